#!/usr/bin/env python3
"""Benchmark of the ESPHome-API Bluetooth proxy (issues 25 and 36): prints figures, decides nothing.

Every phase starts a fresh `gattway-sim --config <generated JSON>` on its own private bus, then
gattway on that bus (a plain BlueZ client, not --simulate) with `--esphome-api`; the helpers
(this file run with a leading `_role`) take JSON commands on stdin and answer on stdout.

  a. stream   500 devices advertising every 250 ms (2 000 advertisements a second), each with
              manufacturer data 0xFFFF whose last byte counts its advertisements, measured for
              each path advertisements can take into gattway, one after the other on the same
              simulator:
                dbus    `--advertisements dbus`: BlueZ's D-Bus signals, read through libdbus;
                kernel  the simulator also serves the kernel's management-socket events
                        (DEVICE_FOUND, `gattway-sim --management-socket PATH`) and gattway reads
                        them there (`--management-socket PATH`), as it reads the kernel's own
                        socket when it may (root or CAP_NET_ADMIN).
              A path is checked in GET /v1/adapters ("advertisements") before it is measured; a
              build without it prints `path=kernel unavailable: <why>` instead. A plain D-Bus
              client (dbus-fast) on the simulator's bus sees every advertisement the simulator
              signals (PropertiesChanged of Device1 with an RSSI) and notes its (address,
              counter), and when it saw those of 25 sample devices; one aioesphomeapi client,
              subscribed to raw advertisements, does the same with what the proxy sends. Over the
              window: delivered = the (address, counter) pairs the client got / those the
              simulator signalled (on the kernel path: / the Device Found frames it served, read
              by a client of its management socket beside gattway's); latency = the client's
              arrival minus the D-Bus client's (the kernel path: minus the frame's), for
              the samples (p50, p99; on the kernel path too the reference is the D-Bus signal,
              which the simulator sends with the frame). The proxy's batching is in it: up to 16
              a message or 100 ms; at 2 000 a second a batch fills in 8 ms, so an advertisement
              waits for the rest of its batch, 3.75 ms on average (the 100 ms bound only counts
              below 160 a second). gattway's CPU (utime + stime) per advertisement the client got.
  b. bleak    the same stream to bleak's BleakScanner, alone on the bus (gattway stopped), with a
              detection callback that only counts: its process's CPU per callback; for each
              path the ratio gattway / bleak (issue 36's target: at most 0.5 on the kernel
              path). Then the libdbus floor, alone too: bench/dbus_floor.c, a C
              program that discovers as gattway's watch does and reads every signal through
              libdbus (each value read once, nothing kept), its CPU per advertisement signal:
              what any libdbus client pays, beside half of bleak's.
  c. churn    devices whose random address changes every 10 s (the simulator's
              addressRotationMs; BlueZ drops an address 5 s after it was last heard): 500 at a
              time, 10 000 distinct addresses over the run, to the same client; gattway's RSS
              each 1 000 new addresses (its tables are bounded, so it should stay flat).
  d. read     sequential reads of one characteristic: through the proxy (aioesphomeapi
              bluetooth_gatt_read, connected) and through REST (GET .../value on one keep-alive
              connection), alternating blocks; p50 and p99 of each and the ratio of the p50s.
              Phases c and d run gattway on the D-Bus path.
  e. endurance  (only when asked: --phases endurance) one gattway on the kernel's path, the
              stream of phase a for 10 windows of 60 s in a row (1.2 million advertisements) to
              one API client: CPU per forwarded advertisement and RSS in each window; a cost
              that grows with what was handled shows as the last windows against the first.

For each path one line that a script can read:
  esphome: path=kernel delivered=0.9990 latency_p50_ms=4.10 cpu_us_per_adv=6.1 bleak_cpu_us_per_adv=15.2 ratio=0.40
  esphome: path=kernel unavailable: <why>
and, for phase e:
  esphome: endurance path=kernel windows=10 advertisements=1200000 cpu_us_first=5.9 cpu_us_last=5.8 cpu_us_max=6.1 rss_first_mb=.. rss_last_mb=..

Usage: bench/run esphome [--quick] [--phases stream,churn,read,endurance] [--paths dbus,kernel] [--window S]
                         [--endurance-windows N] [--endurance-window S]
Logs go to .build/bench/esphome-*; the figures also to .build/bench/esphome-results.txt.
"""
import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (the rig's tools: simulator, processes, figures)
from bench import GATTWAY, HOST, OUT, Helper, answer, commands, cpu_seconds, free_port, log, pct, rss_mb, start_sim, stop_process, wait_until  # noqa: E402,E501

SAMPLES = 25
COMPANY = 0xFFFF


def stream_config(devices, interval_ms, rotation_ms=None, temporary_timeout=30):
    """`devices` non-connectable advertisers F1:00:00:00:xx:yy (with a counter in their
    manufacturer data), and one connectable device with a readable characteristic."""
    config = {"adapter": {"temporaryTimeoutSec": temporary_timeout}, "devices": [
        {"address": f"F1:00:00:00:{d // 256:02X}:{d % 256:02X}", "name": f"Adv {d}", "connectable": False,
         "advertisingIntervalMs": interval_ms, "manufacturerData": {"0xFFFF": "00"}, "advertisingCounter": True,
         **({"addressRotationMs": rotation_ms} if rotation_ms else {})}
        for d in range(devices)]}
    config["devices"].append({"address": "F2:00:00:00:00:01", "name": "Reader", "advertisingIntervalMs": 1000,
                              "services": [{"uuid": "b000", "characteristics": [bench.READ_CHAR]}]})
    return config


def address_int(text):
    return int(text.replace(":", ""), 16)


class Unavailable(Exception):
    """A path of advertisements that this run cannot measure, and why."""


class Rig:
    """A simulator with `config` (and its other `sim_options`), gattway on its bus serving the API
    (started with `path`'s options); `port` (REST), `api` (ESPHome)."""

    def __init__(self, stack, name, config, path="dbus", sim_options=()):
        self.bus, self.sim_pid = start_sim(stack, config, f"esphome-{name}", sim_options)
        self.stack, self.name = stack, name
        self.proc = None
        if path:
            self.start_gattway(path_options(path))

    def start_gattway(self, options, label=None):
        self.port, self.api = free_port(), free_port()
        self.log = os.path.join(OUT, f"esphome-{label or self.name}.log")
        logf = self.stack.enter_context(open(self.log, "w"))
        self.proc = bench.subprocess.Popen(
            # The bench's clients all come from loopback: REST's per-client rate limit is lifted.
            [GATTWAY, "--listen", f"{HOST}:{self.port}", "--state-dir", "none", "--esphome-api", f"{HOST}:{self.api}",
             "--watch", "--rate-limit", "0", *options], env=dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=self.bus),
            stdout=logf, stderr=logf, stdin=bench.subprocess.DEVNULL)
        self.stack.callback(stop_process, self.proc)
        wait_until(self.powered, 30, "gattway to be poweredOn")

    def powered(self):
        if self.proc.poll() is not None:
            raise RuntimeError(f"gattway exited with {self.proc.returncode}: {self.log_tail()}")
        return bench.http_call(self.port, "GET", "/v1/state", timeout=2)[1].get("state") == "poweredOn"

    def log_tail(self, lines=3, having=()):
        """gattway's last `lines` log lines (those with a word of `having`), joined."""
        with open(self.log) as f:
            kept = [line.strip() for line in f if not having or any(w in line for w in having)]
        return " / ".join(kept[-lines:]) or "nothing on it"

    def advertisements(self):
        """What GET /v1/adapters says of the selected adapters' advertisements ("kernel", "dbus";
        None from a build before issue 36)."""
        status, body = bench.http_call(self.port, "GET", "/v1/adapters", timeout=5)
        return [a.get("advertisements") for a in body.get("adapters", []) if a.get("selected")] if status == 200 else []

    def stop_gattway(self):
        stop_process(self.proc)
        self.proc = None


def path_options(path, socket=None):
    """gattway's options for advertisements by `path`: "dbus" (BlueZ's signals), "kernel" (the
    simulator's management-socket stream at `socket`)."""
    if path == "kernel":
        return ["--management-socket", socket]
    # Pinned where the build has the option: run as root, "auto" would open the machine's own
    # kernel socket, whose adapters are not the simulator's.
    return ["--advertisements", "dbus"] if "--advertisements" in bench.help_text(GATTWAY) else []


def kernel_path_missing():
    """Why these builds cannot take the kernel path, or None."""
    for binary in (bench.SIM, GATTWAY):
        if "--management-socket" not in bench.help_text(binary):
            return f"{os.path.basename(binary)} --help lists no --management-socket (a build before issue 36)"
    return None


# ---------------------------------------------------------------------------------------------
# Phases

def phase_stream(window, paths, devices=500, interval_ms=250):
    with contextlib.ExitStack() as st:
        config = stream_config(devices, interval_ms)
        samples = [d["address"] for d in config["devices"][:devices:devices // SAMPLES]][:SAMPLES]
        missing = {"kernel": kernel_path_missing()} if "kernel" in paths else {}
        kernel = "kernel" in paths and not missing["kernel"]
        # In a directory of its own: a Unix socket's path has at most 107 bytes.
        socket = os.path.join(st.enter_context(tempfile.TemporaryDirectory(prefix="gattway-bench-")), "mgmt")
        try:
            rig = Rig(st, "stream", config, path=None, sim_options=("--management-socket", socket) if kernel else ())
        except RuntimeError as e:
            if not kernel:
                raise
            missing["kernel"] = f"with --management-socket, {e}"
            rig = Rig(st, "stream-plain", config, path=None)
        observer = Helper(st, "esphome-observer", "_observer", rig.bus, "--samples", ",".join(samples), script=__file__)
        observer.get(30)
        r = {"paths": {}}
        for path in paths:
            if missing.get(path):
                r["paths"][path] = {"unavailable": missing[path]}
                log(f"  path={path} unavailable: {missing[path]}")
                continue
            try:
                # The kernel path's reference is the frame the kernel hands on, not BlueZ's signal.
                reference = observer
                if path == "kernel":
                    reference = Helper(st, "esphome-frames", "_frames", "--socket", socket, "--samples", ",".join(samples),
                                       script=__file__)
                    reference.get(30)
                r["paths"][path] = stream_window(st, rig, reference, samples, window, path, socket)
            except (Unavailable, RuntimeError) as e:
                if path != "kernel":
                    raise
                r["paths"][path] = {"unavailable": str(e)}
                log(f"  path={path} unavailable: {e}")
            finally:
                if rig.proc:
                    rig.stop_gattway()
        # b, on the same simulator: bleak alone.
        time.sleep(1)
        scanner = Helper(st, "esphome-bleak", "_bleak", rig.bus, script=__file__, env={"DBUS_SYSTEM_BUS_ADDRESS": rig.bus})
        pid = scanner.get(60)["pid"]
        time.sleep(5)
        c0 = cpu_seconds(pid)
        scanner.ask(cmd="start")
        time.sleep(window)
        counted = scanner.ask(cmd="stop")["callbacks"]
        c1 = cpu_seconds(pid)
        r["bleak_callbacks"] = counted
        r["bleak_cpu_per_adv_us"] = (c1 - c0) / max(1, counted) * 1e6
        for path, figures in r["paths"].items():
            if "unavailable" not in figures:
                figures["cpu_ratio"] = figures["cpu_per_adv_us"] / r["bleak_cpu_per_adv_us"]
        log(f"  bleak: {counted / window:.0f} callbacks/s, {r['bleak_cpu_per_adv_us']:.1f} µs CPU per callback; gattway / bleak: "
            + ", ".join(f"{p} {f['cpu_ratio']:.2f}" for p, f in r["paths"].items() if "cpu_ratio" in f))
        scanner.p.stdin.close()
        stop_process(scanner.p, 3)
        r["floor_cpu_per_adv_us"], signals = libdbus_floor(rig.bus, window)
        log(f"  libdbus floor: {signals / window:.0f} signals/s, {r['floor_cpu_per_adv_us']:.1f} µs CPU per advertisement")
        return r


def start_on_path(rig, path, socket, label):
    """gattway started on `rig`, its advertisements taking `path` (checked in GET /v1/adapters)."""
    rig.start_gattway(path_options(path, socket), label)

    def on_path():
        said = rig.advertisements()
        # A build before issue 36 says nothing: it has the D-Bus path only.
        return said and all(a == path or (a is None and path == "dbus") for a in said)
    try:
        wait_until(on_path, 15, f'GET /v1/adapters to say "advertisements": "{path}"')
    except RuntimeError:
        said = rig.advertisements()
        raise Unavailable(f'GET /v1/adapters says "advertisements": {said} (gattway\'s log: '
                          f'{rig.log_tail(having=("advertisements", "management"))})') from None


def stream_window(st, rig, observer, samples, window, path, socket):
    """gattway on `path` for `window` seconds of the stream, to one API client: its figures."""
    start_on_path(rig, path, socket, f"stream-{path}")
    client = Helper(st, f"esphome-client-{path}", "_client", "--port", str(rig.api), "--samples", ",".join(samples),
                    script=__file__)
    client.get(30)
    time.sleep(5)  # every device heard, the batching settled
    cpu0 = cpu_seconds(rig.proc.pid)
    observer.ask(cmd="start")
    client.ask(cmd="start")
    time.sleep(window)
    seen = observer.ask(cmd="stop", timeout=60)
    cpu1 = cpu_seconds(rig.proc.pid)
    time.sleep(0.5)  # the last batches of the window
    got = client.ask(cmd="stop", timeout=60)
    rss = rss_mb(rig.proc.pid)
    client.ask(cmd="quit")
    emitted = {tuple(p) for p in seen["pairs"]}
    received = {tuple(p) for p in got["pairs"]}
    delivered = len(emitted & received) / max(1, len(emitted))
    latencies = [(got["times"][k] - t) * 1000 for k, t in seen["times"].items() if k in got["times"]]
    forwarded = got["count_in_window"]
    with open(rig.log) as f:
        drops = sum("dropped" in line for line in f)
    r = {"emitted": len(emitted), "emitted_per_s": len(emitted) / window, "delivered": delivered,
         "received": len(received), "cpu_s": cpu1 - cpu0, "cpu_per_adv_us": (cpu1 - cpu0) / max(1, forwarded) * 1e6,
         "latency_p50_ms": pct(latencies, 50), "latency_p99_ms": pct(latencies, 99), "latency_n": len(latencies),
         "rss_mb": rss, "drops_logged": drops}
    log(f"  path={path}: {r['emitted_per_s']:.0f}/s signalled, delivered {delivered:.4f}, latency p50 "
        f"{r['latency_p50_ms']:.2f} ms p99 {r['latency_p99_ms']:.2f} ms (n={len(latencies)}), gattway "
        f"{r['cpu_per_adv_us']:.1f} µs CPU per advertisement")
    return r


def phase_endurance(windows, window, path="kernel", devices=500, interval_ms=250):
    """e. One gattway, the stream of phase a for `windows` windows of `window` seconds in a row,
    to one API client: its CPU per forwarded advertisement and RSS in each window, so that a
    cost that grows with the events handled shows (the first windows against the last)."""
    with contextlib.ExitStack() as st:
        missing = kernel_path_missing() if path == "kernel" else None
        if missing:
            log(f"  path={path} unavailable: {missing}")
            return {"path": path, "unavailable": missing}
        socket = os.path.join(st.enter_context(tempfile.TemporaryDirectory(prefix="gattway-bench-")), "mgmt")
        sim_options = ("--management-socket", socket) if path == "kernel" else ()
        rig = Rig(st, "endurance", stream_config(devices, interval_ms), path=None, sim_options=sim_options)
        start_on_path(rig, path, socket, f"endurance-{path}")
        client = Helper(st, "esphome-client-endurance", "_client", "--port", str(rig.api), "--samples", "", script=__file__)
        client.get(30)
        time.sleep(5)
        points = []
        for i in range(windows):
            cpu0 = cpu_seconds(rig.proc.pid)
            client.ask(cmd="start")
            time.sleep(window)
            got = client.ask(cmd="stop", timeout=60)
            cpu1 = cpu_seconds(rig.proc.pid)
            forwarded = got["count_in_window"]
            points.append({"forwarded": forwarded, "cpu_per_adv_us": (cpu1 - cpu0) / max(1, forwarded) * 1e6,
                           "rss_mb": rss_mb(rig.proc.pid)})
            log(f"  window {i + 1}/{windows}: {forwarded} forwarded, {points[-1]['cpu_per_adv_us']:.2f} µs CPU per advertisement, "
                f"RSS {points[-1]['rss_mb']:.2f} MB")
        client.ask(cmd="quit")
        rig.stop_gattway()
        return {"path": path, "points": points}


def libdbus_floor(bus, window):
    """bench/dbus_floor.c on `bus` for `window` seconds: (µs CPU per advertisement signal, signals)."""
    exe = os.path.join(OUT, "dbus_floor")
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "dbus-1"], capture_output=True, text=True, check=True).stdout.split()
    subprocess.run(["cc", "-O2", "-o", exe, os.path.join(os.path.dirname(os.path.abspath(__file__)), "dbus_floor.c"), *flags],
                   check=True)
    p = subprocess.Popen([exe], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, bufsize=1, env=dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=bus))
    try:
        def ask(command):
            p.stdin.write(command + "\n")
            p.stdin.flush()
            return json.loads(p.stdout.readline())
        json.loads(p.stdout.readline())  # discovering
        time.sleep(5)
        ask("start")
        time.sleep(window)
        got = ask("stop")
        return got["cpu_s"] / max(1, got["signals"]) * 1e6, got["signals"]
    finally:
        stop_process(p, 3)


def phase_churn(addresses, devices=500, interval_ms=250, rotation_ms=10_000):
    with contextlib.ExitStack() as st:
        config = stream_config(devices, interval_ms, rotation_ms=rotation_ms, temporary_timeout=5)
        rig = Rig(st, "churn", config)
        client = Helper(st, "esphome-churn-client", "_client", "--port", str(rig.api), "--samples", "", script=__file__)
        client.get(30)
        client.ask(cmd="start")
        points, step, deadline = [], 1000, time.monotonic() + 3 * addresses / devices * rotation_ms / 1000 + 120
        while time.monotonic() < deadline:
            time.sleep(2)
            distinct = client.ask(cmd="distinct")["distinct"]
            if distinct >= (len(points)) * step:
                points.append((distinct, rss_mb(rig.proc.pid)))
                log(f"  churn: {distinct} distinct addresses, gattway RSS {points[-1][1]:.2f} MB")
            if distinct >= addresses:
                break
        status, watch = bench.http_call(rig.port, "GET", "/v1/watch")
        client.ask(cmd="quit")
        return {"points": points, "watch_devices": watch.get("devices") if status == 200 else None}


def phase_read(reads):
    with contextlib.ExitStack() as st:
        rig = Rig(st, "read", stream_config(0, 1000))
        device = "F2:00:00:00:00:01"
        wait_until(lambda: bench.http_call(rig.port, "GET", f"/v1/devices/{device}")[0] == 200, 20, "the reader to be heard")
        reader = Helper(st, "esphome-reader", "_reader", "--port", str(rig.api), "--device", device, script=__file__)
        reader.get(60)
        path = f"/v1/devices/{device}/characteristics/{bench.READ_CHAR['uuid']}/value?format=hex"
        c = bench.http.client.HTTPConnection(HOST, rig.port, timeout=10)
        st.callback(c.close)
        rest, proxy = [], []
        for block in range(10):
            for i in range(reads // 10 + (5 if block == 0 else 0)):
                t = time.perf_counter_ns()
                c.request("GET", path)
                resp = c.getresponse()
                resp.read()
                assert resp.status == 200
                if not (block == 0 and i < 5):
                    rest.append((time.perf_counter_ns() - t) / 1e6)
            proxy += reader.ask(cmd="read", n=reads // 10, timeout=120)["times"]
        r = {"rest_p50_ms": pct(rest, 50), "rest_p99_ms": pct(rest, 99), "proxy_p50_ms": pct(proxy, 50),
             "proxy_p99_ms": pct(proxy, 99), "n": len(proxy)}
        r["ratio"] = r["proxy_p50_ms"] / r["rest_p50_ms"]
        log(f"  read: proxy p50 {r['proxy_p50_ms']:.3f} ms p99 {r['proxy_p99_ms']:.3f}; REST p50 {r['rest_p50_ms']:.3f} ms "
            f"p99 {r['rest_p99_ms']:.3f}; ratio {r['ratio']:.2f}")
        return r


# ---------------------------------------------------------------------------------------------
# Helpers (this file run with a leading _role)

def counter_of(manufacturer):
    return manufacturer[-1] if manufacturer else None


async def role_observer(args):
    """The D-Bus floor: every advertisement the simulator signals, (address, counter)."""
    from dbus_fast import Message, MessageType
    from dbus_fast.aio import MessageBus
    bus = await MessageBus(bus_address=args.bus).connect()
    samples = {"/org/bluez/hci0/dev_" + a.replace(":", "_"): address_int(a) for a in args.samples.split(",") if a}
    state = {"on": False, "pairs": [], "times": {}}

    def on_message(msg):
        if not state["on"] or msg.message_type != MessageType.SIGNAL or msg.member != "PropertiesChanged":
            return
        now = time.monotonic()
        changed = msg.body[1]
        if "RSSI" not in changed or "ManufacturerData" not in changed:
            return
        path = msg.path
        address = int(path.rsplit("dev_", 1)[1].replace("_", ""), 16)
        counter = counter_of(changed["ManufacturerData"].value.get(COMPANY).value)
        state["pairs"].append((address, counter))
        if path in samples:
            state["times"][f"{address}:{counter}"] = now
    bus.add_message_handler(on_message)
    await bus.call(Message(destination="org.freedesktop.DBus", path="/org/freedesktop/DBus", interface="org.freedesktop.DBus",
                           member="AddMatch", signature="s",
                           body=["type='signal',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged',"
                                 "arg0='org.bluez.Device1'"]))
    await observe_commands(state)


async def observe_commands(state, lock=contextlib.nullcontext()):
    """An observer's commands: start (afresh) and stop (what it saw in between)."""
    answer(ready=True)
    async for cmd in commands():
        with lock:
            if cmd["cmd"] == "start":
                state.update(on=True, pairs=[], times={})
                answer(ok=True)
            elif cmd["cmd"] == "stop":
                state["on"] = False
                answer(pairs=state["pairs"], times=state["times"])


async def role_frames(args):
    """The kernel path's floor: every Device Found frame the simulator serves on its management
    socket (a client of its own beside gattway), (address, counter) — the moment the kernel would
    have handed the advertisement on, the reference of the kernel path's latency."""
    import socket
    import struct
    import threading
    samples = {address_int(a) for a in args.samples.split(",") if a}
    state = {"on": False, "pairs": [], "times": {}}
    lock = threading.Lock()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.connect(args.socket)

    def read():
        while True:
            frame = sock.recv(1024)
            now = time.monotonic()
            if not frame:
                return
            event, index, _ = struct.unpack_from("<HHH", frame)
            if event != 0x0012 or index != 0:
                continue
            address = int.from_bytes(frame[6:12], "little")
            length = struct.unpack_from("<H", frame, 6 + 12)[0]
            counter = ad_counter(frame[6 + 14:6 + 14 + length])
            with lock:
                if state["on"] and counter is not None:
                    state["pairs"].append((address, counter))
                    if address in samples:
                        state["times"][f"{address}:{counter}"] = now
    threading.Thread(target=read, daemon=True).start()
    await observe_commands(state, lock)


def ad_counter(data):
    i = 0
    while i + 1 < len(data):
        length = data[i]
        if length == 0:
            break
        if data[i + 1] == 0xFF and length >= 3 and int.from_bytes(data[i + 2:i + 4], "little") == COMPANY:
            return data[i + length]
        i += length + 1
    return None


async def role_client(args):
    """One aioesphomeapi client subscribed to raw advertisements, as Home Assistant's scanner."""
    from aioesphomeapi import APIClient
    client = APIClient(HOST, args.port, None, client_info="bench")
    await client.connect(login=False)
    samples = {address_int(a) for a in args.samples.split(",") if a}
    state = {"on": False, "pairs": [], "times": {}, "count": 0, "distinct": set()}

    def on_raw(message):
        now = time.monotonic()
        advertisements = message.advertisements
        for i in range(len(advertisements)):
            a = advertisements[i]
            state["distinct"].add(a.address)
            if not state["on"]:
                continue
            state["count"] += 1
            counter = ad_counter(a.data)
            if counter is None:
                continue
            state["pairs"].append((a.address, counter))
            if a.address in samples:
                state["times"].setdefault(f"{a.address}:{counter}", now)
    client.subscribe_bluetooth_le_raw_advertisements(on_raw)
    answer(ready=True)
    async for cmd in commands():
        if cmd["cmd"] == "start":
            state.update(on=True, pairs=[], times={}, count=0)
            answer(ok=True)
        elif cmd["cmd"] == "stop":
            state["on"] = False
            answer(pairs=state["pairs"], times=state["times"], count_in_window=state["count"])
        elif cmd["cmd"] == "distinct":
            answer(distinct=len(state["distinct"]))
        elif cmd["cmd"] == "quit":
            await client.disconnect()
            answer(ok=True)
            return


async def role_bleak(args):
    """bleak's BleakScanner on the same bus, a detection callback that only counts."""
    from bleak import BleakScanner
    state = {"n": 0}

    def detected(device, advertisement):
        state["n"] += 1
    scanner = BleakScanner(detection_callback=detected)
    await scanner.start()
    answer(pid=os.getpid())
    async for cmd in commands():
        if cmd["cmd"] == "start":
            state["n"] = 0
            answer(ok=True)
        elif cmd["cmd"] == "stop":
            answer(callbacks=state["n"])
    await scanner.stop()


async def role_reader(args):
    """Connected through the proxy; sequential GATT reads of the bench's read characteristic."""
    from aioesphomeapi import APIClient, BluetoothProxyFeature
    client = APIClient(HOST, args.port, None, client_info="bench reader")
    await client.connect(login=False)
    address = address_int(args.device)
    states = []
    await client.bluetooth_device_connect(address, lambda c, m, e: states.append((c, e)), timeout=30, address_type=0,
                                          feature_flags=BluetoothProxyFeature.REMOTE_CACHING)
    assert states and states[-1][0], states
    services = await client.bluetooth_gatt_get_services(address)
    handle = next(c.handle for s in services.services for c in s.characteristics if c.uuid[4:8] == bench.READ_CHAR["uuid"])
    for _ in range(5):
        await client.bluetooth_gatt_read(address, handle)
    answer(ready=True)
    async for cmd in commands():
        if cmd["cmd"] == "read":
            times = []
            for _ in range(cmd["n"]):
                t = time.perf_counter_ns()
                await client.bluetooth_gatt_read(address, handle)
                times.append((time.perf_counter_ns() - t) / 1e6)
            answer(times=times)


def helper_main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("role")
    p.add_argument("bus", nargs="?")
    p.add_argument("--port", type=int)
    p.add_argument("--samples", default="")
    p.add_argument("--device")
    p.add_argument("--socket")
    args = p.parse_args(argv)
    roles = {"_observer": role_observer, "_frames": role_frames, "_client": role_client, "_bleak": role_bleak, "_reader": role_reader}
    with contextlib.suppress(KeyboardInterrupt, BrokenPipeError):
        asyncio.run(roles[args.role](args))


# ---------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description="the ESPHome-API proxy's figures; see the docstring of bench/esphome.py")
    ap.add_argument("--quick", action="store_true", help="short phases: a smoke run")
    ap.add_argument("--phases", default="stream,churn,read")
    ap.add_argument("--paths", default="dbus,kernel", help="the stream phase's paths of advertisements into gattway")
    ap.add_argument("--window", type=float, help="seconds measured in the stream phases (default 30, 8 with --quick)")
    ap.add_argument("--addresses", type=int, help="distinct addresses in the churn phase (default 10 000)")
    ap.add_argument("--endurance-windows", type=int, help="windows in the endurance phase (default 10, 3 with --quick)")
    ap.add_argument("--endurance-window", type=float, help="seconds a window in the endurance phase (default 60, 8 with --quick)")
    a = ap.parse_args()
    window = a.window or (8 if a.quick else 30)
    bench.clear_last_run("esphome-")
    phases = a.phases.split(",")
    res = {}
    if "stream" in phases:
        paths = [p for p in a.paths.split(",") if p]
        if not paths or set(paths) - {"dbus", "kernel"}:
            ap.error("--paths takes dbus, kernel or both")
        log(f"esphome: a+b. 2 000 advertisements a second: to one API client ({', '.join(paths)}), then to bleak's BleakScanner")
        res["stream"] = phase_stream(window, paths)
    if "churn" in phases:
        addresses = a.addresses or (2000 if a.quick else 10_000)
        log(f"esphome: c. {addresses} distinct random addresses over time")
        res["churn"] = phase_churn(addresses)
    if "read" in phases:
        log("esphome: d. GATT reads through the proxy and through REST")
        res["read"] = phase_read(200 if a.quick else 1000)
    if "endurance" in phases:
        windows, seconds = a.endurance_windows or (3 if a.quick else 10), a.endurance_window or (8 if a.quick else 60)
        log(f"esphome: e. one gattway on the kernel's path, {windows} windows of {seconds:.0f} s of the stream in a row")
        res["endurance"] = phase_endurance(windows, seconds)
    lines = report(res)
    with open(os.path.join(OUT, "esphome-results.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def report(res):
    lines = []
    s, c, r = res.get("stream"), res.get("churn"), res.get("read")
    if s:
        paths = s["paths"]
        measured = {p: f for p, f in paths.items() if "unavailable" not in f}

        def row(figure, cell):
            # An unavailable path's reason is on its line below the tables.
            return f"| {figure} | " + " | ".join(cell(f) if p in measured else "unavailable" for p, f in paths.items()) + " |"
        lines += ["", "| figure | " + " | ".join(f"path={p}" for p in paths) + " |", "|---" * (len(paths) + 1) + "|",
                  row("advertisements signalled by the simulator", lambda f: f"{f['emitted_per_s']:.0f} per s"),
                  row("delivered to one API client", lambda f: f"{f['delivered']:.4f}"),
                  row("latency, simulator's signal → client's callback, p50 / p99",
                      lambda f: f"{f['latency_p50_ms']:.2f} / {f['latency_p99_ms']:.2f} ms"),
                  row("gattway CPU per forwarded advertisement", lambda f: f"{f['cpu_per_adv_us']:.1f} µs"),
                  row("CPU ratio gattway / bleak", lambda f: f"{f['cpu_ratio']:.2f}"),
                  row("gattway RSS while streaming", lambda f: f"{f['rss_mb']:.2f} MB")]
    if s or c or r:
        lines += ["", "| figure | measured |", "|---|---|"]
    if s:
        lines += [f"| bleak's BleakScanner CPU per callback | {s['bleak_cpu_per_adv_us']:.1f} µs |",
                  f"| libdbus floor (bench/dbus_floor.c), CPU per advertisement | {s['floor_cpu_per_adv_us']:.1f} µs |"]
    if c and c["points"]:
        rss = [p[1] for p in c["points"]]
        lines.append(f"| RSS at {', '.join(str(p[0]) for p in c['points'])} distinct addresses | "
                     f"{', '.join(f'{x:.2f}' for x in rss)} MB (max − min after the first 1 000: "
                     f"{max(rss[1:] or rss) - min(rss[1:] or rss):.2f} MB) |")
    if r:
        lines.append(f"| GATT read p50 / p99: proxy; REST; ratio of p50s | {r['proxy_p50_ms']:.3f} / {r['proxy_p99_ms']:.3f} ms; "
                     f"{r['rest_p50_ms']:.3f} / {r['rest_p99_ms']:.3f} ms; {r['ratio']:.2f} |")
    lines.append("")
    # One line a path, then one of the rest: for scripts.
    summary = []
    if s:
        for p, f in s["paths"].items():
            lines.append(f"esphome: path={p} unavailable: {f['unavailable']}" if "unavailable" in f else
                         f"esphome: path={p} delivered={f['delivered']:.4f} latency_p50_ms={f['latency_p50_ms']:.2f} "
                         f"cpu_us_per_adv={f['cpu_per_adv_us']:.1f} bleak_cpu_us_per_adv={s['bleak_cpu_per_adv_us']:.1f} "
                         f"ratio={f['cpu_ratio']:.2f}")
        summary.append(f"floor_us_per_adv={s['floor_cpu_per_adv_us']:.1f}")
    if c and c["points"]:
        rss = [p[1] for p in c["points"]]
        summary += [f"churn_addresses={c['points'][-1][0]}", f"rss_first_mb={rss[0]:.2f}", f"rss_last_mb={rss[-1]:.2f}",
                    f"rss_max_mb={max(rss):.2f}"]
    if r:
        summary += [f"read_ratio={r['ratio']:.2f}"]
    e = res.get("endurance")
    if e and "unavailable" in e:
        lines.append(f"esphome: endurance path={e['path']} unavailable: {e['unavailable']}")
    elif e:
        cpu = [p["cpu_per_adv_us"] for p in e["points"]]
        lines.append(f"esphome: endurance path={e['path']} windows={len(cpu)} advertisements={sum(p['forwarded'] for p in e['points'])} "
                     f"cpu_us_first={cpu[0]:.2f} cpu_us_last={cpu[-1]:.2f} cpu_us_max={max(cpu):.2f} "
                     f"rss_first_mb={e['points'][0]['rss_mb']:.2f} rss_last_mb={e['points'][-1]['rss_mb']:.2f}")
    if summary:
        lines.append(" ".join(["esphome:", *summary]))
    for line in lines:
        log(line)
    return lines


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1].startswith("_"):
        helper_main(sys.argv[1:])
    else:
        main()
