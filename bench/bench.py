#!/usr/bin/env python3
"""Benchmark: gattway against a Python gateway (bleak + aiohttp, bench/pygateway.py).

Every phase starts a fresh `gattway-sim --config <generated JSON>` on its own private bus, then
the gateway under test against that bus (gattway as a plain BlueZ client, not --simulate), scans
(POST /v1/scan {}), waits until the devices are listed and connects them. The peripherals'
characteristics use the simulator's "counter" generator with an 8-byte little-endian value, so
every notification carries its number. The gateways run one after the other, never together;
where noted they alternate (gattway, python, gattway, python) and the figures are pooled.

  a. latency     notification -> WebSocket at 1, 100 and 1000 clients (50/s, 50/s, 10/s). A
                 "probe" process holds up to 4 of the N sockets (opened first, at 1/3, at 2/3 and
                 last) and records time.monotonic_ns() as each message arrives, by counter value;
                 a "load" process holds the others and only counts. A floor observer, a plain
                 D-Bus client (dbus-fast) on the simulator's bus, records when it sees each
                 value. added = probe arrival - floor arrival for the same value: p50/p99 over
                 the probes (pooled over rounds). floor jitter = the observer's arrival against
                 the simulator's tick schedule (above its minimum). delivered = messages whose
                 value lies in the measured window, over (values the floor saw x N clients).
                 socket floor = after the rig is stopped, a plain Python sender sends a message of
                 the gateway's notification size to each of N loopback sockets in turn (read by a
                 child on one epoll), at the same rate: p50 of the time from a round's start to
                 each send's return — what the kernel alone makes the median socket wait, the
                 part of "added" that no single-threaded gateway on this machine can remove.
  b. cpu         utime+stime of the gateway (/proc/PID/stat) over a window of steady load (100
                 clients on 4 characteristics at 100/s each: 400 notifications/s, 40 000 deliveries/s,
                 the load of the issue that asked for this benchmark), per 1000
                 deliveries counted at the clients (pooled: total CPU / total deliveries).
  c. saturation  100 clients on 4 characteristics at 1 ms (offered ~4000 notifications/s, ~400 000
                 deliveries/s): delivered/s against offered/s (floor count x clients), `dropped`
                 events received, and the CPU (cores) of the gateway, of the client process and of
                 the rest (simulator, its dbus-daemon, the floor observer).
                 On 2 cores the clients and the simulator compete with the gateway: the figure is
                 a ceiling of the whole rig, not of the gateway alone.
  d. read        sequential GET .../characteristics/{char}/value?format=hex on one persistent
                 connection: p50/p99 round trip (pooled over rounds).
  e. wrk         wrk -t1 -c50 on GET /v1/devices and GET /v1/state: req/s (best round).
  f. rss         VmRSS idle (after start and connect), then with 1000 and 10 000 idle SSE streams
                 (GET /v1/events?types=state) held by one asyncio process; counts the 200s. Then,
                 on a fresh rig, 10 000 idle WebSockets (GET /v1/ws, upgraded, nothing subscribed;
                 pings answered) held the same way; counts the 101s.
  g. endurance   one process, N events (--events) of notifications to one WebSocket client
                 (10 characteristics at 1 ms), with REST reads beside it (the next 10 ms after each
                 answer, of a characteristic nobody subscribed to: a read's result is an event). The run is
                 cut into 10 blocks by event count; each block's CPU per event and RSS are kept.
                 cost_growth = CPU per event of the last complete block / the first block.
                 events_survived = notifications received before the end, a crash or a stall.

The helper processes (clients, floor observer, SSE holder, endurance client) are this file run
with a leading `_role` argument; they take JSON commands on stdin and answer on stdout.
Logs go to .build/bench/, the table also to .build/bench/results.txt. Usage: bench/run [--quick]
[--events N] [--only gattway|python] [--rounds K] [--phases latency,cpu,...] [--python-gateway PATH]
[--gattway PATH] (another build of gattway, e.g. the one before a change, for the same run script)
[--before PATH] (a second gattway build in the second column instead of the Python gateway:
before and after a change, side by side in one run, alternating as the two gateways do).
Every wait is bounded; every process started is stopped at the end, on errors and on Ctrl-C/SIGTERM.
"""
import argparse
import asyncio
import base64
import contextlib
import http.client
import json
import os
import queue
import re
import resource
import signal
import select
import socket
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, ".build", "bench")
SIM = os.path.join(ROOT, ".build", "release", "gattway-sim")
GATTWAY = os.path.join(ROOT, ".build", "release", "gattway")
PYGATEWAY = os.path.join(ROOT, "bench", "pygateway.py")
TICK = os.sysconf("SC_CLK_TCK")
HOST = "127.0.0.1"
MIN_INTERVAL_MS = 1  # lowered to 10 if the simulator refuses 1 ms (an older build)


def log(*args):
    print(*args, flush=True)


def pct(values, p):
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * len(s) + 0.5) - 1))]


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    """utime + stime of a process, in seconds (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except (OSError, IndexError):
        return None


def tree_cpu_seconds(pid):
    """CPU of a process and its children (the simulator and its private dbus-daemon)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = [int(c) for c in f.read().split()]
    except OSError:
        children = []
    return sum(c or 0 for c in map(cpu_seconds, [pid, *children]))


def rss_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def clear_last_run(prefix):
    """Makes OUT, and removes the last run's files there whose names start with `prefix`, so
    that every such file is this run's."""
    os.makedirs(OUT, exist_ok=True)
    for name in os.listdir(OUT):
        if name.startswith(prefix):
            os.remove(os.path.join(OUT, name))


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


# ---------------------------------------------------------------------------------------------
# Processes of the harness: simulator, gateway, helpers. Each is stopped by the ExitStack that
# started it (gateway before simulator), also on errors and Ctrl-C.

def stop_process(p, grace=5):
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


def sim_config(devices, chars, interval_ms):
    """`devices` peripherals F0:00:00:00:B0:0n, each with `chars` counter characteristics b001…"""
    return {"devices": [{
        "address": f"F0:00:00:00:B0:{d + 1:02X}", "name": f"Bench {d + 1}",
        "advertisingIntervalMs": 200, "connectDelayMs": 10,
        "services": [{"uuid": "b000", "characteristics": [{
            "uuid": f"b{c + 1:03x}", "flags": ["read", "notify"], "value": "0000000000000000",
            "generator": "counter", "notifyIntervalMs": max(interval_ms, MIN_INTERVAL_MS)}
            for c in range(chars)] + [READ_CHAR]}]} for d in range(devices)]}


# Read by the REST phases: not notifying, since a read's result is also an event to its subscribers.
READ_CHAR = {"uuid": "b0ff", "flags": ["read"], "value": "0011223344556677"}


def start_sim(stack, config, name, options=()):
    """gattway-sim with `config` (written to OUT/<name>-sim.json) and its other `options`, stopped
    by `stack`: (its bus's address, its pid)."""
    path = os.path.join(OUT, f"{name}-sim.json")
    with open(path, "w") as f:
        json.dump(config, f)
    log_path = os.path.join(OUT, f"{name}-sim.log")
    logf = stack.enter_context(open(log_path, "w"))
    p = subprocess.Popen([SIM, "--config", path, *options], stdout=subprocess.PIPE, stderr=logf, text=True)
    stack.callback(stop_process, p)
    lines = queue.Queue()

    def drain():  # the first line to the queue, every line to the log, so the pipe never fills
        for i, line in enumerate(p.stdout):
            if i == 0:
                lines.put(line)
            logf.write(line)
        lines.put("")
    threading.Thread(target=drain, daemon=True).start()
    try:
        first = lines.get(timeout=30)
    except queue.Empty:
        first = ""
    if not first.startswith("DBUS_SYSTEM_BUS_ADDRESS="):
        logf.flush()
        with open(log_path) as f:  # an exit's reason is its last line on stderr
            said = first.strip() or " / ".join(f.read().split("\n")[-3:]).strip(" /")
        raise RuntimeError(f"gattway-sim did not start (see {name}-sim.log): {said}")
    return first.strip().split("=", 1)[1], p.pid


def help_text(binary):
    """`binary --help`'s text ("" if it does not run): which options a build has."""
    try:
        return subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


class Gateway:
    """One gateway under test: how to start it; `rss_extra`: its flags for the 10 000 streams."""

    def __init__(self, name, argv, rss_extra=()):
        self.name, self.argv, self.rss_extra = name, argv, list(rss_extra)

    def command(self, port, extra=()):
        return [*self.argv, "--listen", f"{HOST}:{port}", *extra]


def gattway_gateway(name, binary):
    """A gattway build as a gateway under test, with the flags its --help offers."""
    # Past its default limits gattway answers 503: lift them for the 10 000 streams, if it has the flags.
    offered = help_text(binary)
    lift = [x for f in ("--max-streams", "--max-connections") if f in offered for x in (f, "20000")]
    if not lift:
        log(f"bench: {binary} --help lists no --max-streams / --max-connections: its default limits apply")
    # Every client of the bench has one address (loopback), so the per-client limits, which
    # guard a gateway from one greedy client, are lifted in every phase; the Python gateway
    # has none.
    per_client = [x for f, v in (("--rate-limit", "0"), ("--max-client-connections", "20000"),
                                 ("--max-client-streams", "20000")) if f in offered for x in (f, v)]
    return Gateway(name, [binary, *per_client], rss_extra=lift)


def http_call(port, method, path, body=None, timeout=10):
    c = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        c.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        r = c.getresponse()
        raw = r.read()
        try:
            return r.status, json.loads(raw) if raw else None
        except ValueError:
            return r.status, raw
    finally:
        c.close()


def wait_until(predicate, timeout, what, step=0.1):
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = predicate()
            if result:
                return result
        except (OSError, http.client.HTTPException):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)


class Rig:
    """A fresh simulator and gateway, scanned and connected: port, pid, bus, devices, chars."""

    def __init__(self, stack, gw, name, devices, chars, interval_ms, extra=()):
        self.gw, self.name = gw, name
        config = sim_config(devices, chars, interval_ms)
        self.devices = [d["address"] for d in config["devices"]]
        self.chars = [c["uuid"] for c in config["devices"][0]["services"][0]["characteristics"] if c is not READ_CHAR]
        self.subs = [(d, c) for d in self.devices for c in self.chars]
        self.bus, self.sim_pid = start_sim(stack, config, name)
        self.port = free_port()
        self.log = os.path.join(OUT, f"{name}.log")
        logf = stack.enter_context(open(self.log, "w"))
        env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=self.bus)
        self.proc = subprocess.Popen(gw.command(self.port, extra), env=env, stdout=logf, stderr=logf,
                                     stdin=subprocess.DEVNULL)
        stack.callback(stop_process, self.proc)
        self.pid = self.proc.pid
        wait_until(lambda: self.alive() and self.powered(), 30, f"{gw.name} to answer /v1/state with poweredOn")
        status, body = http_call(self.port, "POST", "/v1/scan", {})
        if status != 200:
            raise RuntimeError(f"{gw.name}: POST /v1/scan answered {status}: {body}")
        wait_until(self.listed, 30, f"{gw.name} to list {len(self.devices)} devices", step=0.2)
        for d in self.devices:
            status, body = http_call(self.port, "POST", f"/v1/devices/{d}/connect", {"timeout": 30}, timeout=40)
            if status != 200:
                raise RuntimeError(f"{gw.name}: connect {d} answered {status}: {body}")

    def alive(self):
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.gw.name} exited with {self.proc.returncode} (see {self.log})")
        return True

    def powered(self):
        status, body = http_call(self.port, "GET", "/v1/state", timeout=2)
        return status == 200 and isinstance(body, dict) and body.get("state") == "poweredOn"

    def listed(self):
        self.alive()
        status, body = http_call(self.port, "GET", "/v1/devices", timeout=5)
        found = {d.get("id") or d.get("address") for d in (body or {}).get("devices", [])} if status == 200 else set()
        return set(self.devices) <= found

    def cpu(self):
        return cpu_seconds(self.pid)

    def rss(self):
        return rss_mb(self.pid)


class Helper:
    """This file (or `script`) run as a helper process (`_role ...`); JSON commands in, JSON answers out."""

    def __init__(self, stack, name, *args, env=None, script=None):
        self.name = name
        self.errf = stack.enter_context(open(os.path.join(OUT, f"{name}.log"), "w"))
        self.p = subprocess.Popen([sys.executable, os.path.abspath(script or __file__), *args], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=self.errf, text=True, bufsize=1,
                                  env=dict(os.environ, **(env or {})))
        stack.callback(stop_process, self.p, 3)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def get(self, timeout):
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(f"helper {self.name} gave no answer within {timeout} s") from None
        if line is None:
            raise RuntimeError(f"helper {self.name} exited (see .build/bench/{self.name}.log)")
        return json.loads(line)

    def ask(self, timeout=30, **command):
        self.p.stdin.write(json.dumps(command) + "\n")
        self.p.stdin.flush()
        return self.get(timeout)


# ---------------------------------------------------------------------------------------------
# Phases. Each returns a dict of figures (lists where rounds are pooled).

def open_interleaved(n, probe, load, timeout):
    """n sockets: the probe's at the first, 1/3, 2/3 and last positions, the load's between."""
    positions = sorted({0, n // 3, (2 * n) // 3, n - 1})[:min(4, n)]
    opened = failed = 0
    done = 0
    for p in positions:
        if p > done:
            r = load.ask(timeout, cmd="open", n=p - done)
            opened, failed, done = opened + r["opened"], failed + r["failed"], p
        r = probe.ask(timeout, cmd="open", n=1)
        opened, failed, done = opened + r["opened"], failed + r["failed"], done + 1
    if n > done:
        r = load.ask(timeout, cmd="open", n=n - done)
        opened, failed = opened + r["opened"], failed + r["failed"]
    return opened, failed


def schedule_jitter(arrivals):
    """Each arrival's lateness against the simulator's tick schedule (a line fitted to value ->
    arrival time), above the earliest: how unevenly the floor observer gets the notifications."""
    if len(arrivals) < 3:
        return []
    xs, ys = zip(*sorted(arrivals.items()))
    slope, intercept = statistics.linear_regression(xs, ys)
    late = [y - (slope * x + intercept) for x, y in zip(xs, ys)]
    return [(d - min(late)) / 1e6 for d in late]


def phase_latency(gw, tag, clients, rate, window_s):
    interval = 1000 // rate
    with contextlib.ExitStack() as st:
        rig = Rig(st, gw, f"latency{clients}-{tag}", devices=1, chars=1, interval_ms=interval)
        floor = Helper(st, f"latency{clients}-{tag}-floor", "_floor", rig.bus)
        floor.get(20)
        url = ["--port", str(rig.port), "--subs", json.dumps(rig.subs)]
        probe = Helper(st, f"latency{clients}-{tag}-probe", "_ws", *url, "--record")
        load = Helper(st, f"latency{clients}-{tag}-load", "_ws", *url)
        opened, failed = open_interleaved(clients, probe, load, timeout=90)
        time.sleep(1)
        last = floor.ask(cmd="last")["last"]
        lo = last + rate + 1            # a second ahead: every socket is subscribed by then
        hi = lo + rate * window_s
        for h in (floor, probe, load):
            h.ask(cmd="window", lo=lo, hi=hi)
        wait_until(lambda: rig.alive() and floor.ask(cmd="last")["last"] >= hi, window_s + 15,
                   "the floor to see the window's end", step=0.2)
        time.sleep(2 if clients >= 1000 else 1)  # deliveries still on their way
        f = floor.ask(cmd="stats")
        p, l = probe.ask(cmd="stats"), load.ask(cmd="stats")
        floor_t = {int(k): v for k, v in f["arrivals"].items()}
        added = [(t - floor_t[int(v)]) / 1e6 for conn in p["arrivals"] for v, t in conn.items() if int(v) in floor_t]
        jitter = schedule_jitter(floor_t)
        expected = len(floor_t) * clients
        size = p.get("size") or 200
        delivered = (p["in_window"] + l["in_window"]) / expected if expected else None
        log(f"  {gw.name} {clients} clients ({rate}/s): opened {opened}, failed {failed}, floor saw {len(floor_t)}"
            f"/{hi - lo}, delivered {fraction(delivered)}, added p50 {fmt(pct(added, 50))} ms p99 {fmt(pct(added, 99))} ms,"
            f" dropped events {p['dropped_events'] + l['dropped_events']}; floor jitter p50 {fmt(pct(jitter, 50))} ms")
    # After the rig is gone, so that nothing else runs beside it.
    with contextlib.ExitStack() as st:
        sender = Helper(st, f"latency{clients}-{tag}-sendfloor", "_sendfloor", "--events", str(clients),
                        "--pid", str(rate), "--limit", str(int(size)))
        sends = sender.get(120)["waits"]
    log(f"  socket floor ({clients} sockets, {int(size)} bytes): p50 {fmt(pct(sends, 50))} ms")
    return {"added": added, "jitter": jitter, "delivered": delivered, "opened": opened, "failed": failed,
            "sends": sends}


def steady_load(gw, name, clients, chars, interval_ms, window_s):
    """`clients` sockets on `chars` characteristics (on 2 devices); CPU and deliveries over a window."""
    with contextlib.ExitStack() as st:
        rig = Rig(st, gw, name, devices=2, chars=chars // 2, interval_ms=interval_ms)
        floor = Helper(st, f"{name}-floor", "_floor", rig.bus)
        floor.get(20)
        load = Helper(st, f"{name}-load", "_ws", "--port", str(rig.port), "--subs", json.dumps(rig.subs))
        r = load.ask(90, cmd="open", n=clients)
        time.sleep(2)
        rig.alive()
        def sample():
            return (floor.ask(cmd="stats")["count"], load.ask(cmd="stats"), rig.cpu(), cpu_seconds(load.p.pid),
                    tree_cpu_seconds(rig.sim_pid) + cpu_seconds(floor.p.pid), time.monotonic())
        f0, s0, c0, lc0, r0, t0 = sample()
        time.sleep(window_s)
        rig.alive()
        f1, s1, c1, lc1, r1, t1 = sample()
        wall = t1 - t0
        deliveries = s1["notifications"] - s0["notifications"]
        offered = (f1 - f0) * clients
        return {"cpu": c1 - c0, "deliveries": deliveries, "offered": offered, "wall": wall,
                "client_cpu": lc1 - lc0, "rig_cpu": r1 - r0, "opened": r["opened"], "failed": r["failed"],
                "dropped_events": s1["dropped_events"], "dropped_count": s1["dropped_count"],
                "closed": s1["closed"], "notifications_offered": f1 - f0}


def phase_cpu(gw, tag, window_s):
    r = steady_load(gw, f"cpu-{tag}", clients=100, chars=4, interval_ms=10, window_s=window_s)
    log(f"  {gw.name}: {r['cpu']:.2f} CPU-s for {r['deliveries']} deliveries ({r['deliveries'] / max(1, r['offered']):.4f}"
        f" of offered) in {r['wall']:.1f} s")
    return r


def phase_saturation(gw, tag, window_s):
    r = steady_load(gw, f"saturation-{tag}", clients=100, chars=4, interval_ms=1, window_s=window_s)
    log(f"  {gw.name}: delivered {r['deliveries'] / r['wall']:.0f}/s of {r['offered'] / r['wall']:.0f}/s offered;"
        f" CPU in cores: gateway {r['cpu'] / r['wall']:.2f}, clients {r['client_cpu'] / r['wall']:.2f},"
        f" simulator+bus+floor {r['rig_cpu'] / r['wall']:.2f};"
        f" dropped events {r['dropped_events']} (lost {r['dropped_count']}), closed sockets {r['closed']}")
    return r


def phase_read(gw, tag, reads):
    with contextlib.ExitStack() as st:
        rig = Rig(st, gw, f"read-{tag}", devices=2, chars=1, interval_ms=1000)
        path = f"/v1/devices/{rig.devices[0]}/characteristics/{READ_CHAR['uuid']}/value?format=hex"
        c = http.client.HTTPConnection(HOST, rig.port, timeout=10)
        st.callback(c.close)
        times, errors = [], 0
        deadline = time.monotonic() + 120
        for i in range(reads + 50):
            t = time.perf_counter_ns()
            c.request("GET", path)
            r = c.getresponse()
            r.read()
            if i >= 50:  # the first 50 warm up
                times.append((time.perf_counter_ns() - t) / 1e6)
                errors += r.status != 200
            if time.monotonic() > deadline:
                break
        log(f"  {gw.name}: {len(times)} reads, p50 {pct(times, 50):.3f} ms, p99 {pct(times, 99):.3f} ms, {errors} errors")
        return {"times": times, "errors": errors}


def wrk(port, path, seconds):
    out = subprocess.run(["wrk", "-t1", "-c50", f"-d{seconds}s", f"http://{HOST}:{port}{path}"],
                         capture_output=True, text=True, timeout=seconds + 30).stdout
    rps = re.search(r"Requests/sec:\s*([\d.]+)", out)
    bad = re.search(r"Non-2xx or 3xx responses:\s*(\d+)", out)
    errs = re.search(r"Socket errors:(.*)", out)
    return float(rps.group(1)) if rps else None, int(bad.group(1)) if bad else 0, (errs.group(1).strip() if errs else "")


def phase_wrk(gw, tag, seconds):
    with contextlib.ExitStack() as st:
        rig = Rig(st, gw, f"wrk-{tag}", devices=2, chars=1, interval_ms=1000)
        result = {}
        for key, path in (("devices", "/v1/devices"), ("state", "/v1/state")):
            rps, bad, errs = wrk(rig.port, path, seconds)
            rig.alive()
            result[key] = rps
            log(f"  {gw.name} GET {path}: {rps} req/s, non-2xx {bad}{', socket errors ' + errs if errs else ''}")
        return result


def phase_rss(gw, tag, extra, counts, sockets):
    result = rss_streams(gw, tag, extra, counts)
    result["ws"] = rss_websockets(gw, tag, extra, sockets)
    return result


def rss_streams(gw, tag, extra, counts):
    with contextlib.ExitStack() as st:
        rig = Rig(st, gw, f"rss-{tag}", devices=2, chars=1, interval_ms=1000, extra=extra)
        time.sleep(2)
        result = {"idle": rig.rss()}
        sse = Helper(st, f"rss-{tag}-sse", "_sse", "--port", str(rig.port))
        held = 0
        for n in counts:
            r = sse.ask(150, cmd="open", n=n - held)
            held = n
            time.sleep(2)
            rig.alive()
            result[n] = {"rss": rig.rss(), **r}
            log(f"  {gw.name} {n} SSE streams: {r['ok']} answered 200, {r['non200']} otherwise {r['statuses']},"
                f" {r['failed']} failed; RSS {result[n]['rss']:.1f} MB (idle {result['idle']:.1f} MB)")
        return result


def rss_websockets(gw, tag, extra, n):
    """RSS with n idle WebSockets (upgraded, nothing subscribed), on a rig of their own."""
    with contextlib.ExitStack() as st:
        rig = Rig(st, gw, f"rss-ws-{tag}", devices=2, chars=1, interval_ms=1000, extra=extra)
        time.sleep(2)
        idle = rig.rss()
        ws = Helper(st, f"rss-ws-{tag}-client", "_ws", "--port", str(rig.port), "--subs", "[]")
        r = ws.ask(200, cmd="open", n=n, budget=150)
        time.sleep(2)
        rig.alive()
        result = {"idle": idle, "rss": rig.rss(), "ok": r["opened"], "failed": r["failed"]}
        log(f"  {gw.name} {n} idle WebSockets: {r['opened']} upgraded, {r['failed']} not"
            f"{' (first: ' + str(r['first_error']) + ')' if r['first_error'] else ''}; RSS {result['rss']:.1f} MB"
            f" (idle {idle:.1f} MB)")
        return result


def phase_endurance(gw, tag, events, limit_s):
    with contextlib.ExitStack() as st:
        rig = Rig(st, gw, f"endurance-{tag}", devices=2, chars=5, interval_ms=1)
        client = Helper(st, f"endurance-{tag}-client", "_endure", "--port", str(rig.port), "--pid", str(rig.pid),
                        "--subs", json.dumps(rig.subs), "--events", str(events), "--limit", str(limit_s))
        r = client.get(limit_s + 60)
        with contextlib.suppress(subprocess.TimeoutExpired):
            rig.proc.wait(0 if r["end"] == "done" else 3)  # a crash closes the socket a moment before the exit
        r["exit"] = rig.proc.poll()
        if r["exit"] is not None:
            r["end"] += f", gateway exited with {r['exit']}"
        complete = [b for b in r["blocks"] if b["complete"] and b["cpu"] is not None]
        r["growth"] = complete[-1]["cost_us"] / complete[0]["cost_us"] if len(complete) >= 2 and complete[0]["cost_us"] else None
        log(f"  {gw.name}: {r['events']} of {events} events in {r['seconds']:.0f} s, end: {r['end']};"
            f" cost_growth {fmt(r['growth'])}; {r['reads']} reads beside ({r['read_errors']} errors)")
        return r


def endurance_table(r):
    rows = [f"    {'block':>5} {'events':>9} {'seconds':>8} {'µs CPU/event':>13} {'RSS MB':>7} {'reads':>6} {'read p50 ms':>11} {'dropped':>8}"]
    for i, b in enumerate(r["blocks"]):
        rows.append(f"    {i + 1:>5} {b['events']:>9} {b['seconds']:>8.2f} {fmt(b['cost_us']):>13} {fmt(b['rss']):>7} "
                    f"{b['reads']:>6} {fmt(b['read_p50']):>11} {b['dropped']:>8}{'' if b['complete'] else ' (partial)'}")
    return "\n".join(rows)


# ---------------------------------------------------------------------------------------------
# Helper processes.

VALUE = re.compile(rb'"value"\s*:\s*"([0-9a-fA-F]*)"')


def counter(payload, s, e):
    m = VALUE.search(payload, s, e)
    return int.from_bytes(bytes.fromhex(m.group(1).decode()), "little") if m else None


def ws_frame(payload, opcode=1):
    """A masked client frame."""
    n, mask = len(payload), os.urandom(4)
    head = bytes([0x80 | opcode]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + n.to_bytes(2, "big")
                                     if n < 65536 else bytes([0x80 | 127]) + n.to_bytes(8, "big"))
    key = int.from_bytes((mask * (n // 4 + 1))[:n], "big")
    return head + mask + (int.from_bytes(payload, "big") ^ key).to_bytes(n, "big")


class Tally:
    """What the sockets of one process saw; the window [lo, hi) is set by the harness."""
    lo = hi = None
    record = False
    notifications = in_window = dropped_events = dropped_count = closed = 0
    size = None  # the first notification's frame, header included (for the socket floor)


class WSClient(asyncio.Protocol):
    """A raw WebSocket client: handshake, subscribe, then frames parsed by hand (cheap enough for
    hundreds of thousands of messages a second) and counted."""

    def __init__(self, port, subs, tally):
        self.port, self.subs, self.tally = port, subs, tally
        self.buf, self.upgraded, self.acks, self.error = b"", False, 0, None
        self.ready = asyncio.get_running_loop().create_future()
        self.arrivals = {}  # counter value -> monotonic_ns, in the window (probes only)

    def connection_made(self, transport):
        self.transport = transport
        key = base64.b64encode(os.urandom(16)).decode()
        transport.write(f"GET /v1/ws HTTP/1.1\r\nHost: {HOST}:{self.port}\r\nUpgrade: websocket\r\n"
                        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())

    def connection_lost(self, exc):
        self.tally.closed += self.ready.done()
        self.settle(False, self.error or f"closed: {exc}")

    def settle(self, ok, error=None):
        if not self.ready.done():
            self.error = error
            self.ready.set_result(ok)

    def subscribe(self):
        """The next subscription. One at a time, each after the last one's ack: gattway closes a
        socket (1008) that sends more than a few commands before it has read them."""
        device, char = self.subs[self.acks]
        self.transport.write(ws_frame(json.dumps({"op": "subscribe", "id": str(self.acks + 1), "device": device,
                                                  "characteristic": char, "format": "hex"}).encode()))

    def data_received(self, data):
        now = time.monotonic_ns()
        buf = self.buf + data if self.buf else data
        pos = 0
        if not self.upgraded:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                self.buf = buf
                return
            status = buf[:buf.find(b"\r\n")]
            if b" 101" not in status:
                self.settle(False, status.decode(errors="replace"))
                self.transport.close()
                return
            self.upgraded, pos = True, end + 4
            if self.subs:
                self.subscribe()
            else:  # an idle socket: upgraded is all it asks
                self.settle(True)
        n, t = len(buf), self.tally
        while n - pos >= 2:
            length, head = buf[pos + 1] & 127, 2
            if length == 126:
                if n - pos < 4:
                    break
                length, head = int.from_bytes(buf[pos + 2:pos + 4], "big"), 4
            elif length == 127:
                if n - pos < 10:
                    break
                length, head = int.from_bytes(buf[pos + 2:pos + 10], "big"), 10
            s, e = pos + head, pos + head + length
            if e > n:
                break
            opcode = buf[pos] & 15
            pos = e
            if opcode == 1:
                if buf.find(b'"notification"', s, e) >= 0:
                    t.notifications += 1
                    if t.size is None:
                        t.size = e - s + head
                    if t.lo is not None:
                        v = counter(buf, s, e)
                        if v is not None and t.lo <= v < t.hi:
                            t.in_window += 1
                            if t.record:
                                self.arrivals[v] = now
                elif buf.find(b'"dropped"', s, e) >= 0:
                    t.dropped_events += 1
                    t.dropped_count += json.loads(buf[s:e]).get("count", 0)
                elif buf.find(b'"ack"', s, e) >= 0:
                    self.acks += 1
                    if self.acks == len(self.subs):
                        self.settle(True)
                    else:
                        self.subscribe()
                elif buf.find(b'"error"', s, e) >= 0:
                    self.settle(False, buf[s:e].decode(errors="replace"))
            elif opcode == 9:
                self.transport.write(ws_frame(buf[s:e], 10))
            elif opcode == 8:
                self.transport.close()
        self.buf = buf[pos:]


async def commands():
    """JSON lines from stdin, one at a time."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        yield json.loads(line)


def answer(**fields):
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


async def open_ws(port, subs, tally, n, conns, timeout=4, parallel=64, budget=30):
    """n more sockets, `parallel` at a time; each gets `timeout` s to be subscribed, and none is
    tried after `budget` s (a gateway at its connection limit may leave them in the backlog)."""
    loop = asyncio.get_running_loop()
    gate = asyncio.Semaphore(parallel)
    errors, deadline, streak = [], time.monotonic() + budget, [0]

    async def one():
        async with gate:
            if time.monotonic() > deadline or streak[0] >= parallel:
                errors.append("not tried: the open budget ran out, or a whole wave failed")
                return None
            try:
                _, c = await asyncio.wait_for(loop.create_connection(lambda: WSClient(port, subs, tally), HOST, port), timeout)
                ok = await asyncio.wait_for(c.ready, timeout)
            except (OSError, asyncio.TimeoutError) as e:
                errors.append(repr(e))
                streak[0] += 1
                return None
            if not ok:
                errors.append(c.error)
                streak[0] += 1
                c.transport.close()
                return None
            streak[0] = 0
            return c
    opened = [c for c in await asyncio.gather(*(one() for _ in range(n))) if c]
    conns.extend(opened)
    return {"opened": len(opened), "failed": n - len(opened), "first_error": errors[0] if errors else None}


async def role_ws(args):
    """Load or probe sockets: `open`, `window`, `stats`."""
    raise_nofile()
    tally, conns = Tally(), []
    tally.record = args.record
    subs = [tuple(s) for s in json.loads(args.subs)]
    async for cmd in commands():
        if cmd["cmd"] == "open":
            answer(**await open_ws(args.port, subs, tally, cmd["n"], conns, budget=cmd.get("budget", 30)))
        elif cmd["cmd"] == "window":
            tally.lo, tally.hi, tally.in_window = cmd["lo"], cmd["hi"], 0
            answer(ok=True)
        elif cmd["cmd"] == "stats":
            answer(notifications=tally.notifications, in_window=tally.in_window, dropped_events=tally.dropped_events,
                   dropped_count=tally.dropped_count, closed=tally.closed, size=tally.size,
                   arrivals=[c.arrivals for c in conns] if tally.record else [])


async def role_floor(args):
    """The D-Bus floor: a plain client of the simulator's bus, time of each counter value."""
    from dbus_fast import Message, MessageType
    from dbus_fast.aio import MessageBus
    bus = await MessageBus(bus_address=args.bus).connect()
    state = {"count": 0, "last": -1, "lo": None, "hi": None, "arrivals": {}}

    def on_message(msg):
        if msg.message_type != MessageType.SIGNAL or msg.member != "PropertiesChanged":
            return
        now = time.monotonic_ns()
        value = msg.body[1].get("Value")
        if value is None:
            return
        v = int.from_bytes(bytes(value.value), "little")
        state["count"] += 1
        state["last"] = max(state["last"], v)
        if state["lo"] is not None and state["lo"] <= v < state["hi"]:
            state["arrivals"][v] = now
    bus.add_message_handler(on_message)
    await bus.call(Message(destination="org.freedesktop.DBus", path="/org/freedesktop/DBus",
                           interface="org.freedesktop.DBus", member="AddMatch", signature="s",
                           body=["type='signal',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged',"
                                 "arg0='org.bluez.GattCharacteristic1'"]))
    answer(ready=True)
    async for cmd in commands():
        if cmd["cmd"] == "last":
            answer(last=state["last"])
        elif cmd["cmd"] == "window":
            state.update(lo=cmd["lo"], hi=cmd["hi"], arrivals={})
            answer(ok=True)
        elif cmd["cmd"] == "stats":
            answer(count=state["count"], last=state["last"], arrivals=state["arrivals"])


class SSEClient(asyncio.Protocol):
    def __init__(self):
        self.head, self.status = b"", None
        self.ready = asyncio.get_running_loop().create_future()

    def connection_made(self, transport):
        self.transport = transport
        transport.write(f"GET /v1/events?types=state HTTP/1.1\r\nHost: {HOST}\r\nAccept: text/event-stream\r\n\r\n".encode())

    def data_received(self, data):
        if self.ready.done():
            return  # keep-alive comments and events: read and forgotten
        self.head += data
        if b"\r\n\r\n" in self.head:
            line = self.head.split(b"\r\n", 1)[0].split()
            self.status = int(line[1]) if len(line) > 1 and line[1].isdigit() else 0
            self.ready.set_result(self.status)

    def connection_lost(self, exc):
        if not self.ready.done():
            self.ready.set_result(None)


async def role_sse(args):
    """Idle SSE streams: `open` n more, held until the process ends."""
    raise_nofile()
    loop, held = asyncio.get_running_loop(), []
    gate = asyncio.Semaphore(256)

    async def one():
        async with gate:
            if time.monotonic() > deadline:
                return None
            try:
                _, c = await asyncio.wait_for(loop.create_connection(SSEClient, HOST, args.port), 5)
                status = await asyncio.wait_for(c.ready, 5)
            except (OSError, asyncio.TimeoutError):
                return None
            held.append(c)
            return status
    counts = {}  # over every `open` so far
    async for cmd in commands():
        deadline = time.monotonic() + 90  # past it, no more tries: a full backlog never answers
        for s in await asyncio.gather(*(one() for _ in range(cmd["n"]))):
            counts[str(s)] = counts.get(str(s), 0) + 1
        answer(ok=counts.get("200", 0), non200=sum(v for k, v in counts.items() if k not in ("200", "None")),
               failed=counts.get("None", 0), statuses=counts)


async def read_loop(port, path, stats, stop):
    """Sequential REST reads on one keep-alive connection, 100 a second."""
    reader, writer = await asyncio.open_connection(HOST, port)
    request = f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode()
    try:
        while not stop.is_set():
            t = time.perf_counter_ns()
            writer.write(request)
            status = int((await reader.readline()).split()[1])
            length, chunked = 0, False
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                length = int(value) if name.lower() == "content-length" else length
                chunked = chunked or (name.lower() == "transfer-encoding" and "chunked" in value)
            if chunked:
                while (size := int((await reader.readline()).strip() or b"0", 16)):
                    await reader.readexactly(size + 2)
                await reader.readline()
            else:
                await reader.readexactly(length)
            stats["times"].append((time.perf_counter_ns() - t) / 1e6)
            stats["errors"] += status != 200
            await asyncio.sleep(0.01)
    except (OSError, ValueError, IndexError, asyncio.IncompleteReadError) as e:
        stats["failure"] = repr(e)
    finally:
        writer.close()


async def role_endure(args):
    """One WebSocket on every characteristic, REST reads beside it, 10 blocks by event count."""
    subs = [tuple(s) for s in json.loads(args.subs)]
    tally, conns = Tally(), []
    r = await open_ws(args.port, subs, tally, 1, conns)
    if not conns:
        answer(events=0, end=f"could not open the WebSocket: {r['first_error']}", blocks=[])
        return
    reads, stop = {"times": [], "errors": 0}, asyncio.Event()
    reader = asyncio.create_task(read_loop(args.port, f"/v1/devices/{subs[0][0]}/characteristics/{READ_CHAR['uuid']}"
                                           "/value?format=hex", reads, stop))
    block = max(1, args.events // 10)
    blocks, start, base = [], time.monotonic(), tally.notifications  # events while subscribing are left out
    mark = {"t": start, "cpu": cpu_seconds(args.pid), "reads": 0, "dropped": 0}
    progress, progress_t, end = 0, start, None

    def close_block(complete):
        cpu = cpu_seconds(args.pid)
        events = tally.notifications - base - sum(b["events"] for b in blocks)
        now = time.monotonic()
        times = reads["times"][mark["reads"]:]
        blocks.append({"events": events, "seconds": now - mark["t"], "complete": complete,
                       "cpu": None if cpu is None or mark["cpu"] is None else cpu - mark["cpu"],
                       "rss": rss_mb(args.pid), "reads": len(times), "read_p50": pct(times, 50),
                       "dropped": tally.dropped_count - mark["dropped"]})
        b = blocks[-1]
        b["cost_us"] = b["cpu"] / events * 1e6 if b["cpu"] is not None and events else None
        mark.update(t=now, cpu=cpu, reads=len(reads["times"]), dropped=tally.dropped_count)

    while end is None:
        await asyncio.sleep(0.005)
        n, now = tally.notifications - base, time.monotonic()
        while len(blocks) < 10 and n >= block * (len(blocks) + 1):
            close_block(True)
        if n >= args.events:
            end = "done"
        elif tally.closed:
            end = "the WebSocket closed"
        elif now - start > args.limit:
            end = f"time limit ({args.limit} s)"
        elif n > progress:
            progress, progress_t = n, now
        elif now - progress_t > 10:
            end = "stalled (no event for 10 s)"
    if tally.notifications - base > sum(b["events"] for b in blocks):
        close_block(False)
    stop.set()
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(reader, 5)
    answer(events=tally.notifications - base, end=end, seconds=time.monotonic() - start, blocks=blocks,
           reads=len(reads["times"]), read_errors=reads["errors"], read_failure=reads.get("failure"),
           dropped_events=tally.dropped_events, dropped_count=tally.dropped_count)


async def role_sendfloor(args):
    """The kernel's share of a fan-out on this machine: `--events` loopback TCP connections from
    this process to a child that reads them all on one epoll (as the load client does); at the
    phase's rate, one `--limit`-byte message is sent to every socket in turn, with nothing else
    done between the sends. Answers the time from each round's start to each send's return, in
    ms: a gateway that did no work of its own would still make the k-th socket wait that long."""
    n, size = args.events, int(args.limit)
    listener = socket.create_server((HOST, 0), backlog=n + 16)
    port = listener.getsockname()[1]
    child = os.fork()
    if child == 0:  # the reader
        listener.close()
        conns = [socket.create_connection((HOST, port)) for _ in range(n)]
        ep = select.epoll()
        by_fd = {c.fileno(): c for c in conns}
        for fd in by_fd:
            ep.register(fd, select.EPOLLIN)
        while by_fd:
            for fd, _ in ep.poll():
                if fd in by_fd and not by_fd[fd].recv(65536):
                    ep.unregister(fd)
                    del by_fd[fd]
        os._exit(0)
    socks = [listener.accept()[0] for _ in range(n)]
    for c in socks:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    message, waits = b"x" * size, []
    interval = 1 / args.pid  # --pid carries the rate here
    for _ in range(max(20, int(5 * args.pid))):
        start = time.perf_counter_ns()
        for c in socks:
            c.send(message)
            waits.append((time.perf_counter_ns() - start) / 1e6)
        await asyncio.sleep(interval)
    for c in socks:
        c.close()
    os.waitpid(child, 0)
    answer(waits=waits)


def helper_main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("role")
    p.add_argument("bus", nargs="?")
    p.add_argument("--port", type=int)
    p.add_argument("--pid", type=int)
    p.add_argument("--subs")
    p.add_argument("--record", action="store_true")
    p.add_argument("--events", type=int)
    p.add_argument("--limit", type=float)
    args = p.parse_args(argv)
    roles = {"_ws": role_ws, "_floor": role_floor, "_sse": role_sse, "_endure": role_endure, "_sendfloor": role_sendfloor}
    with contextlib.suppress(KeyboardInterrupt, BrokenPipeError):
        asyncio.run(roles[args.role](args))


# ---------------------------------------------------------------------------------------------
# The run and the table.

def fmt(x, digits=3):
    if x is None:
        return "—"
    if isinstance(x, str):
        return x
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) >= 100):
        return f"{int(x)}"
    if abs(x) >= 1000:
        return f"{x:.0f}"
    return f"{x:.{digits}g}" if abs(x) < 1 else f"{x:.{digits + 1}g}"


def simulator_interval_floor():
    """1 if the simulator takes notifyIntervalMs 1, else 10 (an older build)."""
    with contextlib.ExitStack() as st:
        try:
            start_sim(st, sim_config(1, 1, 1), "interval-check")
            return 1
        except RuntimeError:
            return 10


def main():
    global MIN_INTERVAL_MS
    ap = argparse.ArgumentParser(description="gattway against a Python gateway; see the docstring of bench/bench.py")
    ap.add_argument("--quick", action="store_true", help="short phases, one round: a smoke test (< 3 minutes)")
    ap.add_argument("--events", type=int, help="endurance events (default 1 000 000; 20 000 with --quick)")
    ap.add_argument("--rounds", type=int, help="alternating rounds of the pooled phases (default 2; 1 with --quick)")
    ap.add_argument("--only", choices=["gattway", "python"], help="one gateway only")
    ap.add_argument("--python-gateway", default=PYGATEWAY,
                    help="the Python gateway: a .py script (run with this Python) or an executable; "
                         "either takes --listen HOST:PORT")
    ap.add_argument("--gattway", default=GATTWAY, help="the gattway binary (default: the release build)")
    ap.add_argument("--before", help="a second gattway build (e.g. before a change), in place of the Python gateway")
    ap.add_argument("--phases", default="latency,cpu,saturation,read,wrk,rss,endurance")
    a = ap.parse_args()
    q = a.quick
    events = a.events or (20_000 if q else 1_000_000)
    rounds = a.rounds or (1 if q else 2)
    window = 3 if q else 10
    phases = a.phases.split(",")
    os.makedirs(OUT, exist_ok=True)
    for name in os.listdir(OUT):  # the last run's logs, so that every file there is this run's
        if name.endswith((".log", "-sim.json")) or name == "results.txt":
            os.remove(os.path.join(OUT, name))
    nofile = raise_nofile()

    gateways = []
    if a.only != "python":
        gateways.append(gattway_gateway("gattway", a.gattway))
    if a.before:
        gateways.append(gattway_gateway("before", a.before))
    elif a.only != "gattway":
        if os.path.exists(a.python_gateway):
            script = a.python_gateway.endswith(".py")
            gateways.append(Gateway("python", [sys.executable, a.python_gateway] if script else [a.python_gateway]))
        else:
            log(f"bench: no {a.python_gateway}: the python column stays empty")
    names = [g.name for g in gateways]
    MIN_INTERVAL_MS = simulator_interval_floor()
    log(f"bench: gateways {', '.join(names)}; {rounds} round(s); RLIMIT_NOFILE {nofile}; "
        f"endurance {events} events; logs in {OUT}")
    if MIN_INTERVAL_MS > 1:
        log("bench: WARNING: this gattway-sim refuses notifyIntervalMs 1; 1 ms phases run at 10 ms (10x less offered)")

    res = {n: {} for n in names}

    def run(phase, fn, *args, once=False):
        """The phase for every gateway, alternating them round after round (one round if `once`)."""
        for r in range(1 if once else rounds):
            for g in gateways:
                log(f"[{phase}] {g.name}" + (f" round {r + 1}" if rounds > 1 and not once else ""))
                t = time.monotonic()
                try:
                    out = fn(g, f"{g.name}{r + 1}", *args)
                except Exception as e:  # the phase failed: reported, and the run goes on
                    log(f"  {g.name}: FAILED: {e!r}")
                    out = None
                log(f"  ({time.monotonic() - t:.0f} s)")
                res[g.name].setdefault(phase, []).append(out)

    def endurance(g, tag):
        # Python gets at most 100 000 events and 4 minutes.
        n = events if g.name in ("gattway", "before") else min(events, 100_000)
        limit = max(60, 3 * n / (10_000 if MIN_INTERVAL_MS == 1 else 1000))
        log(f"  {n} events, at most {limit:.0f} s")
        return phase_endurance(g, tag, n, limit if g.name in ("gattway", "before") else min(limit, 240))

    if "latency" in phases:
        for n, rate in ((1, 50), (100, 50), (1000, 10)):
            run(f"latency{n}", phase_latency, n, rate, window)
    if "cpu" in phases:
        run("cpu", phase_cpu, window)
    if "saturation" in phases:
        run("saturation", phase_saturation, window, once=True)
    if "read" in phases:
        run("read", phase_read, 500 if q else 2000)
    if "wrk" in phases:
        run("wrk", phase_wrk, 3 if q else 10)
    if "rss" in phases:
        run("rss", lambda g, tag: phase_rss(g, tag, g.rss_extra, (1000, 10000), 10000), once=True)
    if "endurance" in phases:
        run("endurance", endurance, once=True)
    report(res, names, events)


def figures(r):
    """One gateway's results -> {row: value}, pooled as the docstring says."""
    f = {}

    def ok(phase):
        return [x for x in r.get(phase, []) if x]
    for n in (1, 100, 1000):
        runs = ok(f"latency{n}")
        if runs:
            added = [x for run in runs for x in run["added"]]
            jitter = [x for run in runs for x in run["jitter"]]
            f[f"lat{n}_p50"], f[f"lat{n}_p99"] = pct(added, 50), pct(added, 99)
            f[f"lat{n}_floor"] = pct(jitter, 99)
            sends = [x for run in runs for x in run.get("sends", [])]
            f[f"lat{n}_sends"] = pct(sends, 50) if sends else None
            f[f"lat{n}_delivered"] = statistics.median(run["delivered"] for run in runs if run["delivered"] is not None)
            f[f"lat{n}_opened"] = min(run["opened"] for run in runs)
    if runs := ok("cpu"):
        deliveries = sum(x["deliveries"] for x in runs)
        f["cpu_per_1000"] = sum(x["cpu"] for x in runs) / deliveries * 1000 if deliveries else None
        f["cpu_delivered"] = deliveries / max(1, sum(x["offered"] for x in runs))
    if runs := ok("saturation"):
        x = runs[0]
        f["sat_delivered"], f["sat_offered"] = x["deliveries"] / x["wall"], x["offered"] / x["wall"]
        f["sat_fraction"] = x["deliveries"] / max(1, x["offered"])
        f["sat_dropped"], f["sat_lost"] = x["dropped_events"], x["dropped_count"]
        f["sat_cores"], f["sat_client_cores"] = x["cpu"] / x["wall"], x["client_cpu"] / x["wall"]
        f["sat_rig_cores"] = x["rig_cpu"] / x["wall"]
    if runs := ok("read"):
        times = [t for x in runs for t in x["times"]]
        f["read_p50"], f["read_p99"] = pct(times, 50), pct(times, 99)
    if runs := ok("wrk"):
        for k in ("devices", "state"):
            vals = [x[k] for x in runs if x[k] is not None]
            f[f"wrk_{k}"] = max(vals) if vals else None
    if runs := ok("rss"):
        x = runs[0]
        f["rss_idle"] = x["idle"]
        for n in (1000, 10000):
            if n in x:
                f[f"rss_{n}"], f[f"sse_{n}"] = x[n]["rss"], x[n]["ok"]
                f[f"sse_{n}_not"] = x[n]["non200"] + x[n]["failed"]
        if ws := x.get("ws"):
            f["ws_10000"], f["rss_ws_10000"] = ws["ok"], ws["rss"]
    if runs := ok("endurance"):
        x = runs[0]
        f["events_survived"] = x["events"]
        f["survived"] = "yes" if x["exit"] is None and x["end"] == "done" else "no"
        costs = [b["cost_us"] for b in x["blocks"] if b["complete"] and b["cost_us"] is not None]
        f["cost_first"], f["cost_last"] = (costs[0], costs[-1]) if costs else (None, None)
        f["cost_growth"] = x["growth"]
        rss = [b["rss"] for b in x["blocks"] if b["rss"] is not None]
        f["end_rss_first"], f["end_rss_last"] = (rss[0], rss[-1]) if rss else (None, None)
    return f


ROWS = [
    ("lat1_p50", "latency, 1 client @50/s: added p50 (ms, pooled)"),
    ("lat1_p99", "latency, 1 client: added p99 (ms)"),
    ("lat1_floor", "latency, 1 client: D-Bus floor jitter p99 (ms)"),
    ("lat1_sends", "latency, 1 client: socket floor p50 (ms, sends alone)"),
    ("lat1_delivered", "latency, 1 client: delivered fraction (median)"),
    ("lat100_p50", "latency, 100 clients @50/s: added p50 (ms, pooled)"),
    ("lat100_p99", "latency, 100 clients: added p99 (ms)"),
    ("lat100_floor", "latency, 100 clients: D-Bus floor jitter p99 (ms)"),
    ("lat100_sends", "latency, 100 clients: socket floor p50 (ms, sends alone)"),
    ("lat100_delivered", "latency, 100 clients: delivered fraction (median)"),
    ("lat1000_p50", "latency, 1000 clients @10/s: added p50 (ms, pooled)"),
    ("lat1000_p99", "latency, 1000 clients: added p99 (ms)"),
    ("lat1000_floor", "latency, 1000 clients: D-Bus floor jitter p99 (ms)"),
    ("lat1000_sends", "latency, 1000 clients: socket floor p50 (ms, sends alone)"),
    ("lat1000_opened", "latency, 1000 clients: sockets subscribed (fewest)"),
    ("lat1000_delivered", "latency, 1000 clients: delivered fraction (median)"),
    ("cpu_per_1000", "CPU-s per 1000 deliveries (100 cl x 4 ch @100/s, pooled)"),
    ("cpu_delivered", "  delivered fraction during that window"),
    ("sat_offered", "saturation 100 cl x 4 ch @1 ms: offered deliveries/s"),
    ("sat_delivered", "saturation: delivered/s"),
    ("sat_fraction", "saturation: delivered / offered"),
    ("sat_dropped", "saturation: `dropped` events received"),
    ("sat_lost", "saturation: events lost (sum of their counts)"),
    ("sat_cores", "saturation: gateway CPU (cores)"),
    ("sat_client_cores", "saturation: client process CPU (cores)"),
    ("sat_rig_cores", "saturation: simulator + dbus-daemon + floor CPU (cores)"),
    ("read_p50", "read round trip p50 (ms, pooled)"),
    ("read_p99", "read round trip p99 (ms, pooled)"),
    ("wrk_devices", "wrk GET /v1/devices (req/s, best round)"),
    ("wrk_state", "wrk GET /v1/state (req/s, best round)"),
    ("rss_idle", "RSS idle (MB)"),
    ("sse_1000", "SSE streams answered 200, of 1000"),
    ("rss_1000", "RSS with 1000 SSE streams (MB)"),
    ("sse_10000", "SSE streams answered 200, of 10000"),
    ("sse_10000_not", "SSE streams of 10000 answered otherwise or not at all"),
    ("rss_10000", "RSS with 10000 SSE streams (MB)"),
    ("ws_10000", "idle WebSockets upgraded, of 10000"),
    ("rss_ws_10000", "RSS with 10000 idle WebSockets (MB)"),
    ("events_survived", "endurance: events received"),
    ("survived", "endurance: finished and alive"),
    ("cost_first", "endurance: µs CPU per event, first block"),
    ("cost_last", "endurance: µs CPU per event, last complete block"),
    ("cost_growth", "endurance: cost_growth (last / first)"),
    ("end_rss_first", "endurance: RSS first block (MB)"),
    ("end_rss_last", "endurance: RSS last block (MB)"),
]


def fraction(x):
    return "n/a" if x is None else f"{x:.4f}"


def report(res, names, events):
    fig = {n: figures(res[n]) for n in names}
    other = "before" if "before" in names else "python"
    g, p = fig.get("gattway", {}), fig.get(other, {})
    width = max(len(label) for _, label in ROWS)
    lines = [f"{'figure':<{width}} | {'gattway':>10} | {other:>10} | {'ratio':>7}", "-" * (width + 38)]
    for key, label in ROWS:
        a, b = g.get(key), p.get(key)
        ratio = a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None
        lines.append(f"{label:<{width}} | {fmt(a):>10} | {fmt(b):>10} | {fmt(ratio):>7}")
    for n in names:
        e = (res[n].get("endurance") or [None])[0]
        if e:
            lines += ["", f"endurance blocks, {n} ({e['events']} of {events if n == 'gattway' else min(events, 100_000)} events;"
                      f" end: {e['end']}):", endurance_table(e)]
    table = "\n".join(lines)
    cpu_ratio = (g["cpu_per_1000"] / p["cpu_per_1000"]) if g.get("cpu_per_1000") and p.get("cpu_per_1000") else None
    final = (f"bench: events_survived={fmt(g.get('events_survived'))} cost_growth={fmt(g.get('cost_growth'))} "
             f"cpu_ratio_vs_{other}={fmt(cpu_ratio)} added_p50_ms_100={fmt(g.get('lat100_p50'))} "
             f"clients_1000_delivered={fraction(g.get('lat1000_delivered'))} get_rps={fmt(g.get('wrk_devices'))} "
             f"rss_idle_mb={fmt(g.get('rss_idle'))} rss_10k_mb={fmt(g.get('rss_10000'))} "
             f"rss_ws_10k_mb={fmt(g.get('rss_ws_10000'))}").replace("—", "n/a")
    with open(os.path.join(OUT, "results.txt"), "w") as f:
        f.write(table + "\n\n" + final + "\n")
    log("")
    log(table)
    log("")
    log(final)


def interrupted(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1].startswith("_"):
        helper_main(sys.argv[1:])
    else:
        # Ctrl-C, and SIGTERM too, unwind through the ExitStacks, which stop every process.
        signal.signal(signal.SIGINT, interrupted)
        signal.signal(signal.SIGTERM, interrupted)
        try:
            main()
        except KeyboardInterrupt as e:
            log(f"bench: interrupted ({e or 'Ctrl-C'}); every process started was stopped")
            sys.exit(130)
