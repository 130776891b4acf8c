"""Benchmark: gattway's serial ports (a TCP port per device, `--serial`) against a bleak script
writing and reading the same characteristics, on the same simulator (issue 26).

Every phase starts a fresh `gattway-sim --config <generated JSON>` on its own private bus with
three peripherals, then either a bleak script (this file run as `_bleak`, a plain BlueZ client on
that bus) or gattway against that bus (a plain BlueZ client too, `--serial` for each device). The
two run one after the other, never together, alternating over the rounds; figures are pooled
(throughput: the median of the rounds).

  HM-10  F0:00:00:00:C0:01  FFE0/FFE1 (written and notifying), through the simulator's UART model
  NUS    F0:00:00:00:C0:02  Nordic UART: RX 6E400002 written, TX 6E400003 notifying, the UART model
  ECHO   F0:00:00:00:C0:03  an HM-10 whose FFE1 notifies each write back at once (no UART model)

The UART model of the first two has a 1 MiB buffer drained at 10 MB/s (far above the link),
so that the figure is the pipeline's, not a module's; it echoes what drains every 10 ms.

  throughput  256 KiB through the port and back, written with response in pieces of MTU - 3
              (244) bytes one after the other — what bleak's `write_gatt_char(…, response=True)`
              loop does and what gattway's `mode=auto` does — timed from the first byte sent to
              the last echoed byte received; bytes/s.
  latency     300 lines of 20 bytes (19 and "\n") on ECHO, one at a time: from the send to the
              echoed line's last byte; p50/p99. gattway's added latency = its p50 - bleak's.
  paced       64 KiB written without response to an HM-10 module as sold (4096-byte buffer,
              drained at 20 000 bytes/s): bleak writes them as fast as it can, gattway with
              `mode=command,rate=20000`; bytes the module dropped (the simulator's UARTStats)
              and the time until all were taken.

Usage: bench/serial [--rounds K] [--quick]. Logs in .build/bench/serial-*.log; the table on
stdout and in .build/bench/serial-results.txt; the last line is for scripts:
  serial: hm10_ratio=<x> nus_ratio=<x> added_p50_ms=<x> paced_dropped=<n> bleak_unpaced_dropped=<n>
"""
import argparse
import asyncio
import contextlib
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as B  # noqa: E402  (the rig: the simulator, processes, ports)

HM10, NUS, ECHO = "F0:00:00:00:C0:01", "F0:00:00:00:C0:02", "F0:00:00:00:C0:03"
FFE0, FFE1 = "0000ffe0-0000-1000-8000-00805f9b34fb", "0000ffe1-0000-1000-8000-00805f9b34fb"
NUS_SERVICE = "6e400001-b5a3-f393-e0a9-e50e24dcca9e"
NUS_RX, NUS_TX = "6e400002-b5a3-f393-e0a9-e50e24dcca9e", "6e400003-b5a3-f393-e0a9-e50e24dcca9e"
# (device, rx, tx) of each throughput target.
TARGETS = {"hm10": (HM10, FFE1, FFE1), "nus": (NUS, NUS_RX, NUS_TX)}
PIECE = 244  # MTU 247 - 3
FAST_UART = {"echo": True, "bufferBytes": 1 << 20, "drainBytesPerSecond": 10_000_000}
SOLD_UART = {"echo": True, "bufferBytes": 4096, "drainBytesPerSecond": 20_000}


def sim_config(uart):
    """The three peripherals; `uart` the HM-10's and the NUS's UART model."""
    def device(address, name, service, characteristics, uart_of=None):
        d = {"address": address, "name": name, "advertisingIntervalMs": 100, "connectDelayMs": 10, "mtu": 247,
             "uuids": [service], "services": [{"uuid": service, "characteristics": characteristics}]}
        if uart_of:
            d["uart"] = {**uart, "rx": uart_of[0], "tx": uart_of[1]}
        return d
    rw = ["write", "write-without-response"]
    return {"devices": [
        device(HM10, "Bench HM-10", FFE0, [{"uuid": FFE1, "flags": ["read", *rw, "notify"]}], (FFE1, FFE1)),
        device(NUS, "Bench NUS", NUS_SERVICE, [{"uuid": NUS_RX, "flags": rw}, {"uuid": NUS_TX, "flags": ["notify"]}],
               (NUS_RX, NUS_TX)),
        device(ECHO, "Bench Echo", FFE0, [{"uuid": FFE1, "flags": ["read", *rw, "notify"], "echo": True}]),
    ]}


def payload(n, seed):
    return bytes(random.Random(seed).randrange(256) for _ in range(n))


def line(i):
    return f"line {i:013d}\n".encode()  # 19 + 1 bytes


def uart_stats(bus, address):
    out = subprocess.run(["dbus-send", "--bus=" + bus, "--print-reply", "--dest=org.bluez", "/io/gattway/simulator",
                          "io.gattway.Simulator1.UARTStats", "string:" + address], capture_output=True, text=True, timeout=10)
    values = [int(w) for w in out.stdout.split() if w.isdigit()]
    return dict(zip(["received", "dropped", "echoed", "streamed"], values[-4:]))


# ---- the bleak script (run as `_bleak BUS`, on the simulator's bus) ------------------------------

async def bleak_run(args):
    from bleak import BleakClient, BleakScanner
    results = {}

    async def client(address):
        device = await BleakScanner.find_device_by_address(address, timeout=20)
        if device is None:
            raise RuntimeError(f"{address} not found")
        c = BleakClient(device, timeout=30)
        await c.connect()
        return c

    if args["phase"] == "main":
        for name, (address, rx, tx) in TARGETS.items():
            c = await client(address)
            data = payload(args["bytes"], 26)
            got = bytearray()
            done = asyncio.Event()

            def received(_, value, got=got, done=done, n=len(data)):
                got.extend(value)
                if len(got) >= n:
                    done.set()
            await c.start_notify(tx, received)
            start = time.monotonic()
            for i in range(0, len(data), PIECE):
                await c.write_gatt_char(rx, data[i:i + PIECE], response=True)
            await asyncio.wait_for(done.wait(), 120)
            elapsed = time.monotonic() - start
            results[name] = {"bytes_per_s": len(data) / elapsed, "identical": bytes(got) == data}
            await c.disconnect()
        c = await client(ECHO)
        arrived = asyncio.Queue()
        await c.start_notify(FFE1, lambda _, v: arrived.put_nowait(bytes(v)))
        rtts = []
        for i in range(args["lines"]):
            text = line(i)
            start = time.perf_counter_ns()
            await c.write_gatt_char(FFE1, text, response=True)
            echoed = b""
            while not echoed.endswith(b"\n"):
                echoed += await asyncio.wait_for(arrived.get(), 10)
            rtts.append((time.perf_counter_ns() - start) / 1e6)
            if echoed != text:
                raise RuntimeError(f"echo {echoed!r} for {text!r}")
        results["latency_ms"] = rtts
        await c.disconnect()
    else:  # paced: 64 KiB without response, as fast as bleak writes them
        c = await client(HM10)
        data = payload(64 * 1024, 64)
        start = time.monotonic()
        for i in range(0, len(data), PIECE):
            await c.write_gatt_char(FFE1, data[i:i + PIECE], response=False)
        results["seconds"] = time.monotonic() - start
        await c.disconnect()
    return results


# ---- gattway: --serial per device, plain sockets as the clients ----------------------------------

def through_port(port, data, timeout=120):
    """Sends `data` to the TCP port while reading the echo; seconds until all of it came back."""
    with socket.create_connection((B.HOST, port), timeout=timeout) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        got = bytearray()
        start = time.monotonic()
        sent = 0
        s.setblocking(False)
        deadline = start + timeout
        import select
        while len(got) < len(data):
            if time.monotonic() > deadline:
                raise RuntimeError(f"port {port}: {len(got)} of {len(data)} bytes back in {timeout} s")
            r, w, _ = select.select([s], [s] if sent < len(data) else [], [], 1)
            if w:
                sent += s.send(data[sent:sent + 65536])
            if r:
                chunk = s.recv(1 << 20)
                if not chunk:
                    raise RuntimeError(f"port {port} closed after {len(got)} bytes")
                got += chunk
        return time.monotonic() - start, bytes(got) == data


def line_rtts(port, count):
    with socket.create_connection((B.HOST, port), timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rtts = []
        for i in range(count):
            text = line(i)
            start = time.perf_counter_ns()
            s.sendall(text)
            echoed = b""
            while not echoed.endswith(b"\n"):
                chunk = s.recv(4096)
                if not chunk:
                    raise RuntimeError("the port closed")
                echoed += chunk
            rtts.append((time.perf_counter_ns() - start) / 1e6)
            if echoed != text:
                raise RuntimeError(f"echo {echoed!r} for {text!r}")
        return rtts


def gattway_phase(stack, name, uart, serial_args, scan_for):
    bus, _ = B.start_sim(stack, sim_config(uart), name)
    http = B.free_port()
    ports = {key: B.free_port() for key in serial_args}
    argv = [B.GATTWAY, "--listen", f"{B.HOST}:{http}", "--state-dir", "none"]
    for key, spec in serial_args.items():
        argv += ["--serial", f"{B.HOST}:{ports[key]}={spec}"]
    logf = stack.enter_context(open(os.path.join(B.OUT, f"{name}.log"), "w"))
    proc = subprocess.Popen(argv, env=dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=bus), stdout=logf, stderr=logf,
                            stdin=subprocess.DEVNULL)
    stack.callback(B.stop_process, proc)
    B.wait_until(lambda: B.http_call(http, "GET", "/v1/state", timeout=2)[1].get("state") == "poweredOn", 30, "gattway")
    B.http_call(http, "POST", "/v1/scan", {})

    def listed():
        status, body = B.http_call(http, "GET", "/v1/devices", timeout=5)
        return status == 200 and set(scan_for) <= {d["id"] for d in body["devices"]}
    B.wait_until(listed, 30, "the devices to be listed")
    B.http_call(http, "DELETE", "/v1/scan")
    return bus, ports


def bleak_phase(stack, name, uart, args):
    bus, _ = B.start_sim(stack, sim_config(uart), name)
    errf = stack.enter_context(open(os.path.join(B.OUT, f"{name}.log"), "w"))
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "_bleak", json.dumps(args)],
                         env=dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=bus), stdout=subprocess.PIPE, stderr=errf,
                         text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"the bleak script failed (see {name}.log)")
    return bus, json.loads(out.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one round, 128 KiB, 100 lines")
    opts = parser.parse_args()
    rounds, size, lines = (1, 128 * 1024, 100) if opts.quick else (opts.rounds, 256 * 1024, 300)
    os.makedirs(B.OUT, exist_ok=True)
    through = {("bleak", k): [] for k in TARGETS} | {("gattway", k): [] for k in TARGETS}
    rtts = {"bleak": [], "gattway": []}
    paced = {}
    for r in range(rounds):
        for who in (["bleak", "gattway"] if r % 2 == 0 else ["gattway", "bleak"]):
            with contextlib.ExitStack() as stack:
                if who == "bleak":
                    _, res = bleak_phase(stack, f"serial-bleak-{r}", FAST_UART, {"phase": "main", "bytes": size, "lines": lines})
                    for k in TARGETS:
                        assert res[k]["identical"], f"bleak: the {k} echo differs"
                        through[("bleak", k)].append(res[k]["bytes_per_s"])
                    rtts["bleak"] += res["latency_ms"]
                else:
                    _, ports = gattway_phase(stack, f"serial-gattway-{r}", FAST_UART,
                                             {"hm10": f"{HM10},hm10", "nus": f"{NUS},nordic", "echo": f"{ECHO},hm10"},
                                             [HM10, NUS, ECHO])
                    for k in TARGETS:
                        seconds, identical = through_port(ports[k], payload(size, 26))
                        assert identical, f"gattway: the {k} echo differs"
                        through[("gattway", k)].append(size / seconds)
                    rtts["gattway"] += line_rtts(ports["echo"], lines)
            B.log(f"serial: round {r + 1}/{rounds}: {who} done")
    # Paced: once each (the module as sold).
    with contextlib.ExitStack() as stack:
        bus, res = bleak_phase(stack, "serial-bleak-paced", SOLD_UART, {"phase": "paced"})
        paced["bleak"] = (uart_stats(bus, HM10), res["seconds"])
    with contextlib.ExitStack() as stack:
        bus, ports = gattway_phase(stack, "serial-gattway-paced", SOLD_UART, {"hm10": f"{HM10},hm10,mode=command,rate=20000"}, [HM10])
        data = payload(64 * 1024, 64)
        start = time.monotonic()
        with socket.create_connection((B.HOST, ports["hm10"]), timeout=60) as s:
            s.sendall(data)
            B.wait_until(lambda: sum(uart_stats(bus, HM10)[k] for k in ("received", "dropped")) >= len(data), 60,
                         "the module to take 64 KiB", step=0.05)
            seconds = time.monotonic() - start
        paced["gattway"] = (uart_stats(bus, HM10), seconds)

    def p(values, q):
        return B.pct(values, q)
    rows = []
    ratios = {}
    for k in TARGETS:
        g, b = statistics.median(through[("gattway", k)]), statistics.median(through[("bleak", k)])
        ratios[k] = g / b
        rows.append((f"throughput, {k} (256 KiB with response, echoed)" if not opts.quick else f"throughput, {k}",
                     f"{g / 1000:.1f} kB/s", f"{b / 1000:.1f} kB/s", f"{ratios[k]:.2f}"))
    g50, b50 = p(rtts["gattway"], 50), p(rtts["bleak"], 50)
    rows.append(("20-byte line round trip, p50 / p99", f"{g50:.2f} / {p(rtts['gattway'], 99):.2f} ms",
                 f"{b50:.2f} / {p(rtts['bleak'], 99):.2f} ms", f"+{g50 - b50:.2f} ms"))
    gs, gsec = paced["gattway"]
    bs, bsec = paced["bleak"]
    rows.append(("64 KiB without response to a 4 KiB / 20 kB/s module: dropped; seconds",
                 f"{gs['dropped']}; {gsec:.2f} s (rate=20000)", f"{bs['dropped']}; {bsec:.2f} s (unpaced)", ""))
    table = ["| figure | gattway (TCP port) | bleak | ratio |", "|---|---|---|---|"]
    table += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    summary = (f"serial: hm10_ratio={ratios['hm10']:.3f} nus_ratio={ratios['nus']:.3f} added_p50_ms={g50 - b50:.3f}"
               f" paced_dropped={gs['dropped']} bleak_unpaced_dropped={bs['dropped']}")
    text = "\n".join(table + ["", summary])
    print(text, flush=True)
    with open(os.path.join(B.OUT, "serial-results.txt"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "_bleak":
        print(json.dumps(asyncio.run(bleak_run(json.loads(sys.argv[2])))))
    else:
        main()
