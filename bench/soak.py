#!/usr/bin/env python3
"""Soak: gattway kept running for a long time against a simulator that keeps failing.

Starts `gattway-sim --config <generated JSON>` on a private bus and gattway (release build) against
it, as bench.py does. The devices (F0:00:00:00:50:0n, --devices) each have --chars notifying
characteristics with the simulator's "counter" generator at intervals of 100 ms to 1 s (drawn from
--seed). The value is 8 bytes little-endian: bytes 0-5 the counter, byte 6 a tag naming the
characteristic, so every notification says which characteristic and which tick it is. The
counter ticks whether or not anybody listens, so a gap in the values a client receives is a
notification lost.

Each characteristic is in a service of its own, so that a GATT table exported in pieces leaves some
of them out for a while.

gattway scans, connects every device with {"autoReconnect": true} and holds every characteristic's
notifications over REST (POST …/notifications); then the stream clients attach:
  - --sse SSE streams on /v1/events?device=…&characteristic=… (one characteristic each, in turn),
  - --ws WebSockets on /v1/ws, each subscribing to every characteristic and to connection events,
  - one SSE event log on /v1/events?types=connection,state,hold: when each device disconnects and is
    connected again, and what became of each hold,
  - a D-Bus observer on the simulator's bus (dbus-fast) that records each value the simulator
    sends (the "floor": what BlueZ emitted), and through which the faults are injected.
For --minutes it injects a random fault every 10-40 s (--gap) through io.gattway.Simulator1:
  droplink        DropLink(a connected device)
  connect-refused SetFault(device, {"connectError": {"message": "le-connection-abort-by-remote",
                  "count": 1}}) then DropLink(device): the first reconnection attempt is refused
  restart         Restart(downMs 500-5000): bluetoothd leaves the bus and comes back
  power           SetPowered(false), 1-5 s, SetPowered(true)
  end-discovery   EndDiscovery()
  late-table      SetFault(device, {"lateServices": {"first": 1, "restAfterMs": 500-6000, "resolved": between|after},
                  "forgetGATT": true}) then DropLink(device): the reconnection finds the GATT table exported
                  in two pieces, as real bluetoothd exported it after a restart (the fault stays for the
                  device's later reconnections, until another SetFault replaces it)
  late-restart    the same SetFault on every device, then Restart(downMs 500-5000)
Beside it, GET /v1/state, /v1/devices and /v1/scan every 5 s (an answer other than 200, or none
within 5 s, is an HTTP error; the scan's state is reported) and gattway's RSS and CPU every 10 s.

A fault's window, for each device it hits: from the fault to the first `connected` event of that
device after it, plus --grace seconds (the notifications are turned on again after `connected`);
for a device the fault did not disconnect (and for end-discovery), the window is the fault time
plus --grace. Each value a client missed is placed in time (when the floor saw it, else by the
counter's tick from the last value received) and counted as lost during a fault if it lies in a
window of its device, else lost outside faults. A device whose table comes in pieces has its
windows longer by the delay of the second piece.

After the last fault the soak waits up to 90 s for every device to be connected again, lets the
notifications flow for a few seconds, takes each characteristic's last value (the floor's; a
characteristic whose values stopped reaching D-Bus is extrapolated by its ticks, so that
notifications that never resume count as lost) and counts, per client and characteristic, the
values from the soak's start to then: expected, received, lost during / outside faults, lost
that the simulator did send on D-Bus (so gattway's own losses, wherever they fall), duplicates,
`dropped` events. Then it checks that gattway is alive and answers GET /v1/state, that
every device is connected, that every stream is still open, and that no hold was lost: every
characteristic held over REST is listed notifying (`isNotifying`) and still held (`GET
/v1/restoration`'s kept holds, with --state-dir); `hold` events restored/failed are counted.

Output: the fault list, a table per client, gattway's figures, and a last line for scripts:
  soak: minutes=… seed=… faults=… reconnections=… clients=… notifications_expected=… received=…
        lost_during_faults=… lost_outside_faults=… lost_after_dbus=… errors=… rss_start_mb=… rss_end_mb=… cpu_s=…
        holds=… holds_lost=… hold_events_restored=… hold_events_failed=…
        alive=yes|no devices_back=yes|no streams_open=yes|no result=pass|fail
Exit status 1 if gattway died or stopped answering, a device did not come back, a stream closed,
a hold was lost or a notification was lost outside the fault windows; 2 if the rig could not be set up; 130 on
Ctrl-C/SIGTERM. Logs (gattway's stderr, the simulator's) go to .build/soak/. Every wait is
bounded; every process started is stopped at the end, on errors and on Ctrl-C/SIGTERM.
Usage: bench/soak [--minutes 10] [--seed N] [--devices 3] [--chars 2] [--sse 4] [--ws 3].
"""
import argparse
import asyncio
import bisect
import contextlib
import datetime
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import aiohttp
from dbus_fast import Message, MessageType
from dbus_fast.aio import MessageBus
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  the harness's process and HTTP helpers

ROOT = bench.ROOT
OUT = os.path.join(ROOT, ".build", "soak")
bench.OUT = OUT  # start_sim writes its configuration and log there
HOST = bench.HOST
CONTROL = dict(path="/io/gattway/simulator", interface="io.gattway.Simulator1")
COUNTER_BITS = 48
FINAL_WAIT_S = 90
log = bench.log


class Sub:
    """One notifying characteristic: its tag (byte 6 of the value), device, UUID and tick."""

    def __init__(self, tag, device, uuid, interval_ms):
        self.tag, self.device, self.uuid, self.interval = tag, device, uuid, interval_ms / 1000

    def __repr__(self):
        return f"{self.device}/{self.uuid}"


def sim_config(rng, devices, chars):
    subs, config = [], {"devices": []}
    for d in range(devices):
        address = f"F0:00:00:00:50:{d + 1:02X}"
        characteristics = []
        services = []
        for c in range(chars):
            tag, uuid = len(subs) + 1, f"5{c + 1:03x}"
            interval = rng.randrange(100, 1001, 50)
            subs.append(Sub(tag, address, uuid, interval))
            services.append({"uuid": f"50{c:02x}", "characteristics": [
                {"uuid": uuid, "flags": ["read", "notify"], "generator": "counter",
                 "value": f"000000000000{tag:02x}00", "notifyIntervalMs": interval}]})
        config["devices"].append({"address": address, "name": f"Soak {d + 1}", "advertisingIntervalMs": 200,
                                  "services": services})
    return config, subs


def decode(hex_value):
    """(tag, counter) of a value, or None."""
    try:
        n = int.from_bytes(bytes.fromhex(hex_value), "little")
    except (TypeError, ValueError):
        return None
    return (n >> COUNTER_BITS) & 0xFF, n & ((1 << COUNTER_BITS) - 1)


# ---------------------------------------------------------------------------------------------
# What the clients saw.

class Tally:
    """One client's notifications of one characteristic, kept as they arrive: from value `lo` on,
    the gaps between the values received (with the arrival times around each) and the
    duplicates. A value that fills part of a gap (out of order) splits it."""

    def __init__(self, sub):
        self.sub = sub
        self.lo = None
        self.last = self.last_t = None
        self.duplicates = 0
        self.gaps = []  # [v_prev, t_prev, v_next, t_next]: the values strictly between are missing
        self.frozen = False

    def start(self, lo, t):
        """Counting starts with value `lo`; values before it are ignored."""
        self.lo, self.last, self.last_t = lo, lo - 1, t

    def add(self, v, t):
        if self.frozen or self.lo is None or v < self.lo:
            return
        if v > self.last:
            if v > self.last + 1:
                self.gaps.append([self.last, self.last_t, v, t])
            self.last, self.last_t = v, t
            return
        for i, (vp, tp, vn, tn) in enumerate(self.gaps):
            if vp < v < vn:
                self.gaps[i:i + 1] = [g for g in ([vp, tp, v, t], [v, t, vn, tn]) if g[2] > g[0] + 1]
                return
        self.duplicates += 1


class Client:
    """A stream client: its tallies by tag, errors, and whether its stream is still open."""

    def __init__(self, name, kind, subs):
        self.name, self.kind = name, kind
        self.tallies = {s.tag: Tally(s) for s in subs}
        self.open = False
        self.closed_reason = None
        self.errors = []  # (t, text)
        self.dropped_events = self.dropped_count = 0
        self.reconnections = 0
        self.states = {}  # device -> last connection state, for the reconnections it saw
        self.holds = {"restored": 0, "failed": 0}  # `hold` events by state

    def notification(self, event, t):
        got = decode(event.get("value"))
        if got and got[0] in self.tallies:
            self.tallies[got[0]].add(got[1], t)

    def connection(self, event):
        device, state = event.get("device"), event.get("state")
        if state == "connected" and self.states.get(device) in ("disconnected", "reconnecting"):
            self.reconnections += 1
        self.states[device] = state

    def dropped(self, event):
        self.dropped_events += 1
        self.dropped_count += event.get("count", 0)

    def closed(self, t, reason):
        if self.open:
            self.open = False
            self.closed_reason = f"t={t:.1f}s {reason}"
            self.errors.append((t, f"stream closed: {reason}"))


class Soak:
    """The clock and the shared record of a run: events of the event log, faults, errors."""

    def __init__(self, port, subs):
        self.port, self.subs = port, subs
        self.t0, self.wall0 = time.monotonic(), time.time()
        self.base = f"http://{HOST}:{port}"
        self.events = []  # (t, event) from the event log stream
        self.faults = []
        self.http_errors = []  # (t, text)
        self.samples = []  # (t, rss_mb, cpu_s)
        self.scanning = []  # (t, GET /v1/scan's `scanning`) at each change
        self.late = {}  # device -> seconds its GATT table's second piece comes late (late-table faults)

    def now(self):
        return time.monotonic() - self.t0

    def clock(self, t):
        """A soak time as the wall-clock time of gattway's log lines (UTC)."""
        return datetime.datetime.fromtimestamp(self.wall0 + t, datetime.timezone.utc).strftime("%H:%M:%S.%f")[:-3]


def sse_events(raw_lines):
    """SSE lines (bytes) -> JSON objects of the `data:` fields, one per event."""
    data = []
    for raw in raw_lines:
        line = raw.decode(errors="replace").rstrip("\r\n")
        if line == "":
            if data:
                yield json.loads("\n".join(data))
            data = []
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))


async def run_sse(soak, client, session, query, ready):
    """One SSE stream, held open until cancelled; its events go to `client`."""
    url = f"{soak.base}/v1/events?{query}"
    try:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=None)
        async with session.get(url, timeout=timeout, headers={"Accept": "text/event-stream"}) as resp:
            if resp.status != 200:
                client.errors.append((soak.now(), f"GET {url} answered {resp.status}"))
                ready.set_result(False)
                return
            client.open = True
            ready.set_result(True)
            pending = []
            async for raw in resp.content:
                pending.append(raw)
                if raw not in (b"\n", b"\r\n"):
                    continue
                for event in sse_events(pending):
                    dispatch(soak, client, event)
                pending = []
            client.closed(soak.now(), "the server ended the SSE stream")
    except asyncio.CancelledError:
        raise
    except Exception as e:  # noqa: BLE001  any failure of the stream is the finding
        if not ready.done():
            ready.set_result(False)
            client.errors.append((soak.now(), f"GET {url}: {e!r}"))
        client.closed(soak.now(), repr(e))


def dispatch(soak, client, event):
    t = soak.now()
    kind = event.get("type")
    if kind == "notification":
        client.notification(event, t)
    elif kind == "connection":
        client.connection(event)
        if client.kind == "log":
            soak.events.append((t, event))
    elif kind == "state" and client.kind == "log":
        soak.events.append((t, event))
    elif kind == "dropped":
        client.dropped(event)
    elif kind == "hold":
        client.holds[event.get("state")] = client.holds.get(event.get("state"), 0) + 1


async def run_ws(soak, client, ready):
    """One WebSocket: subscribes to every characteristic (one command per ack, as gattway asks)
    and to connection events, then reads until cancelled."""
    url = f"ws://{HOST}:{soak.port}/v1/ws"
    try:
        async with ws_connect(url, open_timeout=10, close_timeout=3, ping_interval=20, ping_timeout=20,
                              max_size=1 << 20) as ws:
            commands = [{"device": s.device, "characteristic": s.uuid, "format": "hex"} for s in soak.subs]
            commands.append({"types": ["connection"]})
            for i, command in enumerate(commands):
                await ws.send(json.dumps({"op": "subscribe", "id": str(i + 1), **command}))
                reply = json.loads(await asyncio.wait_for(ws.recv(), 10))
                while reply.get("op") not in ("ack", "error"):  # events may come before the ack
                    dispatch(soak, client, reply)
                    reply = json.loads(await asyncio.wait_for(ws.recv(), 10))
                if reply.get("op") != "ack":
                    raise RuntimeError(f"subscribe {command} answered {reply}")
            client.open = True
            ready.set_result(True)
            async for message in ws:
                event = json.loads(message)
                if event.get("op") == "error":
                    client.errors.append((soak.now(), f"WebSocket error message: {message}"))
                else:
                    dispatch(soak, client, event)
            client.closed(soak.now(), f"WebSocket closed by the server: {ws.close_code} {ws.close_reason!r}")
    except asyncio.CancelledError:
        raise
    except Exception as e:  # noqa: BLE001  any failure of the stream is the finding
        reason = f"WebSocket closed: {e}" if isinstance(e, ConnectionClosed) else repr(e)
        if not ready.done():
            client.errors.append((soak.now(), f"WebSocket {url}: {reason}"))
        client.closed(soak.now(), reason)
    finally:
        if not ready.done():
            ready.set_result(False)


class Floor:
    """A plain D-Bus client of the simulator's bus: the values the simulator sent (tag ->
    sorted counters with their times), and the simulator's control interface, called by the
    simulator's unique name so that it answers while bluetoothd is away."""

    def __init__(self, soak):
        self.soak = soak
        self.values = {s.tag: [] for s in soak.subs}
        self.times = {s.tag: [] for s in soak.subs}
        self.seen = {s.tag: {} for s in soak.subs}

    async def start(self, address):
        self.bus = await MessageBus(bus_address=address).connect()
        self.bus.add_message_handler(self.on_message)
        await self.call_bus("AddMatch", "s", ["type='signal',interface='org.freedesktop.DBus.Properties',"
                                                       "member='PropertiesChanged',arg0='org.bluez.GattCharacteristic1'"])
        reply = await self.call_bus("GetNameOwner", "s", ["org.bluez"])
        self.simulator = reply.body[0]

    async def call_bus(self, member, signature, body):
        reply = await asyncio.wait_for(self.bus.call(Message(
            destination="org.freedesktop.DBus", path="/org/freedesktop/DBus", interface="org.freedesktop.DBus",
            member=member, signature=signature, body=body)), 10)
        if reply.message_type == MessageType.ERROR:
            raise RuntimeError(f"{member}: {reply.error_name} {reply.body}")
        return reply

    def on_message(self, msg):
        if msg.message_type != MessageType.SIGNAL or msg.member != "PropertiesChanged":
            return
        value = msg.body[1].get("Value")
        got = decode(bytes(value.value).hex()) if value is not None else None
        if got and got[0] in self.values:
            t = self.soak.now()
            self.values[got[0]].append(got[1])
            self.times[got[0]].append(t)
            self.seen[got[0]][got[1]] = t

    def last(self, tag):
        return (self.values[tag][-1], self.times[tag][-1]) if self.values[tag] else (None, None)

    def first_after(self, tag, t):
        i = bisect.bisect_right(self.times[tag], t)
        return self.times[tag][i] if i < len(self.times[tag]) else None

    async def control(self, member, signature="", *body):
        reply = await asyncio.wait_for(self.bus.call(Message(
            destination=self.simulator, member=member, signature=signature, body=list(body), **CONTROL)), 10)
        if reply.message_type == MessageType.ERROR:
            raise RuntimeError(f"{reply.error_name}: {reply.body[0] if reply.body else ''}")


# ---------------------------------------------------------------------------------------------
# Faults.

CONNECT_REFUSED = json.dumps({"connectError": {"message": "le-connection-abort-by-remote", "count": 1}})
KINDS = [("droplink", 3), ("connect-refused", 2), ("restart", 2), ("power", 2), ("end-discovery", 1), ("late-table", 2),
         ("late-restart", 1)]


def late_table(rng):
    """A lateServices fault: (its JSON, the second piece's delay in seconds, a description)."""
    rest, resolved = rng.randrange(500, 6001, 100), rng.choice(["between", "after"])
    fault = {"lateServices": {"first": 1, "restAfterMs": rest, "resolved": resolved}, "forgetGATT": True}
    return json.dumps(fault), rest / 1000, f"rest +{rest} ms, {resolved}"


def connected_devices(soak, log_client):
    return [d for d in dict.fromkeys(s.device for s in soak.subs) if log_client.states.get(d, "connected") == "connected"]


async def inject(soak, floor, rng, kind, log_client):
    """One fault; returns its record (time, kind, target, detail, devices it should disconnect)."""
    devices = list(dict.fromkeys(s.device for s in soak.subs))
    fault = {"t": soak.now(), "kind": kind, "target": "", "detail": "", "hits": [], "error": None}
    try:
        if kind in ("droplink", "connect-refused"):
            candidates = connected_devices(soak, log_client) or devices
            device = rng.choice(candidates)
            fault.update(target=device, hits=[device])
            if kind == "connect-refused":
                await floor.control("SetFault", "ss", device, CONNECT_REFUSED)
                soak.late[device] = 0  # that SetFault replaced any late table
                fault["detail"] = "next connect refused"
            await floor.control("DropLink", "s", device)
        elif kind == "late-table":
            device = rng.choice(connected_devices(soak, log_client) or devices)
            text, late, fault["detail"] = late_table(rng)
            fault.update(target=device, hits=[device])
            await floor.control("SetFault", "ss", device, text)
            soak.late[device] = late
            await floor.control("DropLink", "s", device)
        elif kind == "late-restart":
            down = rng.randint(500, 5000)
            text, late, detail = late_table(rng)
            fault.update(target="bluetoothd", detail=f"down {down} ms, {detail}", hits=devices)
            for device in devices:
                await floor.control("SetFault", "ss", device, text)
                soak.late[device] = late
            await floor.control("Restart", "u", down)
        elif kind == "restart":
            down = rng.randint(500, 5000)
            fault.update(target="bluetoothd", detail=f"down {down} ms", hits=devices)
            await floor.control("Restart", "u", down)
        elif kind == "power":
            off = rng.uniform(1, 5)
            fault.update(target="adapter", detail=f"off {off:.1f} s", hits=devices)
            await floor.control("SetPowered", "b", False)
            await asyncio.sleep(off)
            await floor.control("SetPowered", "b", True)
        elif kind == "end-discovery":
            fault["target"] = "discovery"
            await floor.control("EndDiscovery")
    except Exception as e:  # noqa: BLE001  reported with the fault; the soak goes on
        fault["error"] = str(e) or repr(e)
        fault["hits"] = []
    return fault


def recovery(soak, fault, device):
    """When `device` was connected again after `fault` (None if never), and whether the
    fault disconnected it at all (a disconnected/reconnecting event after it)."""
    went_down = False
    for t, e in soak.events:
        if t < fault["t"] or e.get("type") != "connection" or e.get("device") != device:
            continue
        if e.get("state") in ("disconnected", "reconnecting"):
            went_down = True
        elif e.get("state") == "connected" and went_down:
            return t, True
    return None, went_down


def fault_windows(soak, floor, grace):
    """Per device, the time windows in which losses are the faults' doing; fills in each fault's
    recovery figures on the way."""
    windows = {s.device: [] for s in soak.subs}
    for f in soak.faults:
        f["back_after"] = f["resumed_after"] = None
        f["down"], f["backs"] = 0, {}
        if not f["hits"]:
            for d in windows:
                windows[d].append((f["t"], f["t"] + grace))
            continue
        backs, resumed = [], []
        for d in f["hits"]:
            back, went_down = recovery(soak, f, d)
            f["down"] += went_down
            if not went_down:
                windows[d].append((f["t"], f["t"] + grace))
                continue
            end = back if back is not None else float("inf")
            f["backs"][d] = end
            # The table's late piece (as the fault left it) delays the notifications it holds.
            windows[d].append((f["t"], end + grace + f.get("late", {}).get(d, 0)))
            backs.append(end - f["t"])
            firsts = [floor.first_after(s.tag, back) if back is not None else None for s in soak.subs if s.device == d]
            resumed.append(float("inf") if None in firsts else max(firsts) - f["t"])
        f["back_after"] = max(backs) if backs else None
        f["resumed_after"] = max(resumed) if resumed else None
    return windows


def count_losses(tally, cutoff, cutoff_t, floor, windows):
    """One tally up to `cutoff`: expected, received, lost during faults, lost outside faults, lost
    that the simulator did send on D-Bus (and which: `sent_values`), and the runs of values lost
    outside ([t first, t last, n])."""
    sub = tally.sub
    n = dict(expected=0, received=0, during=0, outside=0, sent=0, runs=[], sent_values=[])
    if tally.lo is None or cutoff is None or cutoff < tally.lo:
        return n
    gaps = [g for g in tally.gaps if g[0] < cutoff]
    if tally.last < cutoff:
        gaps.append([tally.last, tally.last_t, cutoff + 1, cutoff_t])
    seen = floor.seen[sub.tag]
    for vp, tp, vn, tn in gaps:
        run = None
        for v in range(vp + 1, min(vn, cutoff + 1)):
            t = seen.get(v)
            if t is None:
                t = min(tn, tp + (v - vp) * sub.interval)
            if v in seen:
                n["sent"] += 1
                n["sent_values"].append((v, t))
            if any(a <= t <= b for a, b in windows[sub.device]):
                n["during"] += 1
                run = None
                continue
            n["outside"] += 1
            if run is None:
                run = [t, t, 0]
                n["runs"].append(run)
            run[1], run[2] = t, run[2] + 1
    n["expected"] = cutoff - tally.lo + 1
    n["received"] = n["expected"] - n["during"] - n["outside"]
    return n


# ---------------------------------------------------------------------------------------------
# The run.

async def http_get(session, soak, path):
    try:
        async with session.get(soak.base + path, timeout=aiohttp.ClientTimeout(total=5)) as r:
            body = await r.read()
            if r.status != 200:
                soak.http_errors.append((soak.now(), f"GET {path} answered {r.status}: {body[:200]!r}"))
                return None
            return json.loads(body)
    except asyncio.CancelledError:
        raise
    except Exception as e:  # noqa: BLE001
        soak.http_errors.append((soak.now(), f"GET {path}: {e!r}"))
        return None


async def watch(soak, session, proc, stop):
    """GET /v1/state, /v1/devices and /v1/scan every 5 s, RSS and CPU every 10 s, until `stop` or
    gattway exits."""
    n = 0
    while not stop.is_set() and proc.poll() is None:
        await http_get(session, soak, "/v1/state")
        await http_get(session, soak, "/v1/devices")
        scan = await http_get(session, soak, "/v1/scan")
        if scan is not None and (not soak.scanning or soak.scanning[-1][1] != scan.get("scanning")):
            soak.scanning.append((soak.now(), scan.get("scanning")))
        if n % 2 == 0:
            soak.samples.append((soak.now(), bench.rss_mb(proc.pid), bench.cpu_seconds(proc.pid)))
        n += 1
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), 5)


async def device_states(session, soak, devices):
    states = {}
    for d in devices:
        body = await http_get(session, soak, f"/v1/devices/{d}")
        states[d] = (body or {}).get("state", "?")
    return states


async def hold_states(session, soak):
    """Per characteristic held over REST: notifying now, and still among the holds kept."""
    kept = (await http_get(session, soak, "/v1/restoration") or {}).get("kept", {}).get("holds", [])
    held = {(h["device"], h["characteristic"]) for h in kept}
    states = {}
    for s in soak.subs:
        c = await http_get(session, soak, f"/v1/devices/{s.device}/characteristics/{s.uuid}") or {}
        states[s] = {"notifying": c.get("isNotifying") is True, "kept": (s.device, c.get("handle")) in held}
    return states


async def soak_run(args, rng, port, proc, bus, subs):
    soak = Soak(port, subs)
    devices = list(dict.fromkeys(s.device for s in subs))
    floor = Floor(soak)
    await floor.start(bus)
    tasks = []
    connector = aiohttp.TCPConnector(limit=0)
    streams = aiohttp.ClientSession(connector=connector)
    polls = aiohttp.ClientSession()
    try:
        # The event log first, so that it sees every connection event of the soak.
        log_client = Client("events", "log", [])
        clients = []
        specs = [(log_client, "types=connection,state,hold")]
        for i in range(args.sse):
            s = subs[i % len(subs)]
            c = Client(f"sse{i + 1}", "sse", [s])
            specs.append((c, f"device={s.device}&characteristic={s.uuid}&format=hex"))
        for client, query in specs:
            ready = asyncio.get_running_loop().create_future()
            tasks.append(asyncio.create_task(run_sse(soak, client, streams, query, ready)))
            clients.append(client)
            if not await asyncio.wait_for(ready, 15):
                raise RuntimeError(f"{client.name} could not open its stream: {client.errors}")
        for i in range(args.ws):
            c = Client(f"ws{i + 1}", "ws", subs)
            ready = asyncio.get_running_loop().create_future()
            tasks.append(asyncio.create_task(run_ws(soak, c, ready)))
            clients.append(c)
            if not await asyncio.wait_for(ready, 30):
                raise RuntimeError(f"{c.name} could not open its WebSocket: {c.errors}")

        # Counting starts a tick after the floor's current value of each characteristic, once
        # every client gets notifications.
        await asyncio.sleep(2)
        t_start = soak.now()
        for s in subs:
            last, _ = floor.last(s.tag)
            if last is None:
                raise RuntimeError(f"the simulator sends no notifications of {s} (nobody subscribed?)")
            for c in clients:
                if s.tag in c.tallies:
                    c.tallies[s.tag].start(last + 1, t_start)
        rss_start, cpu_start = bench.rss_mb(proc.pid), bench.cpu_seconds(proc.pid)
        log(f"soak: {len(clients)} streams open; RSS {rss_start:.1f} MB; faults for {args.minutes:g} min; gattway on"
            f" {soak.base}, the simulator on DBUS_SYSTEM_BUS_ADDRESS={bus}")

        stop = asyncio.Event()
        watcher = asyncio.create_task(watch(soak, polls, proc, stop))
        tasks.append(watcher)
        end = t_start + args.minutes * 60
        kinds, weights = zip(*KINDS)
        while proc.poll() is None:
            wait = rng.uniform(*args.gap)
            if soak.now() + wait > end:
                break
            await asyncio.sleep(wait)
            if proc.poll() is not None:
                break
            fault = await inject(soak, floor, rng, rng.choices(kinds, weights)[0], log_client)
            fault["late"] = dict(soak.late)
            soak.faults.append(fault)
            log(f"  t={fault['t']:7.1f}s {soak.clock(fault['t'])} {fault['kind']:<16} {fault['target']:<18} {fault['detail']}"
                + (f"  FAILED: {fault['error']}" if fault["error"] else ""))
        if proc.poll() is None:
            await asyncio.sleep(max(0, end - soak.now()))
        t_last_fault = max([f["t"] for f in soak.faults], default=t_start)

        # Every device connected again, within 90 s of the last fault.
        states = {}
        while proc.poll() is None:
            states = await device_states(polls, soak, devices)
            if all(v == "connected" for v in states.values()) or soak.now() > t_last_fault + FINAL_WAIT_S:
                break
            await asyncio.sleep(1)
        t_back = soak.now()
        # Notifications a few ticks past the last reconnection, then each characteristic's last value.
        await asyncio.sleep(max(args.grace, 3 * max(s.interval for s in subs)))
        t_cut = soak.now()
        cutoffs = {}
        for s in subs:
            v, t = floor.last(s.tag)
            stale = t is None or t_cut - t > 2 * s.interval + 1
            cutoffs[s.tag] = (v + int((t_cut - t) / s.interval), True) if stale and v is not None else (v, False)
        await asyncio.sleep(2)  # what the simulator sent by t_cut, on its way through gattway
        for c in clients:
            for tally in c.tallies.values():
                tally.frozen = True

        alive = proc.poll() is None and (await http_get(polls, soak, "/v1/state")) is not None
        holds = await hold_states(polls, soak) if alive else {}
        final_states = await device_states(polls, soak, devices) if proc.poll() is None else {d: "?" for d in devices}
        stop.set()
        await asyncio.wait_for(watcher, 10)
        rss_end, cpu_end = bench.rss_mb(proc.pid), bench.cpu_seconds(proc.pid)
        return report(args, soak, floor, clients, log_client, dict(
            t_start=t_start, t_back=t_back, t_cut=t_cut, cutoffs=cutoffs, alive=alive,
            exit=proc.poll(), states=final_states, holds=holds, rss_start=rss_start, rss_end=rss_end, cpu_start=cpu_start,
            cpu_end=cpu_end))
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await streams.close()
        await polls.close()
        floor.bus.disconnect()


# ---------------------------------------------------------------------------------------------
# The report.

def fmt_s(x):
    if x is None:
        return "—"
    return "never" if x == float("inf") else f"{x:.1f}"


def report(args, soak, floor, clients, log_client, r):
    windows = fault_windows(soak, floor, args.grace)
    lines = [f"faults ({len(soak.faults)}; t from the soak's start, UTC as in gattway's log; down = devices it disconnected;"
             f" back = the last one's `connected` event; notifying = its characteristics' next value on D-Bus):",
             f"  {'t (s)':>7}  {'UTC':<12}  {'fault':<16} {'target':<18} {'detail':<22} {'down':>4} {'back (s)':>8} {'notifying (s)':>13}"]
    for f in soak.faults:
        detail = f["detail"] + (f" FAILED: {f['error']}" if f["error"] else "")
        lines.append(f"  {f['t']:7.1f}  {soak.clock(f['t'])}  {f['kind']:<16} {f['target']:<18} {detail:<22} {f['down']:>4}"
                     f" {fmt_s(f['back_after']):>8} {fmt_s(f['resumed_after']):>13}")

    lines += ["", "clients (notifications from the soak's start to the last value; lost: in a fault window / outside /"
              " of those, values the simulator did send on D-Bus):",
              f"  {'client':<8} {'kind':<5} {'chars':>5} {'expected':>9} {'received':>9} {'lost in':>8} {'outside':>8}"
              f" {'sent':>6} {'dup':>5} {'dropped':>7} {'reconn':>6} {'errors':>6}  open"]
    totals = dict(expected=0, received=0, during=0, outside=0, sent=0)
    errors = len(soak.http_errors)
    outside_runs, sent_lost = [], {}
    for c in clients:
        row = dict(expected=0, received=0, during=0, outside=0, sent=0)
        for tag, tally in c.tallies.items():
            n = count_losses(tally, r["cutoffs"][tag][0], r["t_cut"], floor, windows)
            for k in row:
                row[k] += n[k]
            outside_runs += [(c.name, tally.sub, *run) for run in n["runs"]]
            for v, t in n["sent_values"]:
                sent_lost.setdefault((tally.sub, v, t), []).append(c.name)
        for k in totals:
            totals[k] += row[k]
        errors += len(c.errors)
        dup = sum(t.duplicates for t in c.tallies.values())
        chars = len(c.tallies) if c.kind != "log" else 0
        reconn = c.reconnections if c.kind != "sse" else "—"
        lines.append(f"  {c.name:<8} {c.kind:<5} {chars:>5} {row['expected']:>9} {row['received']:>9} {row['during']:>8}"
                     f" {row['outside']:>8} {row['sent']:>6} {dup:>5} {c.dropped_events:>7} {reconn:>6} {len(c.errors):>6}"
                     f"  {'yes' if c.open else 'NO: ' + str(c.closed_reason)}")
    lines.append(f"  {'total':<8} {'':<5} {'':>5} {totals['expected']:>9} {totals['received']:>9} {totals['during']:>8}"
                 f" {totals['outside']:>8} {totals['sent']:>6}")
    stale = [str(next(s for s in soak.subs if s.tag == tag)) for tag, (_, st) in r["cutoffs"].items() if st]
    if stale:
        lines.append(f"  notifications never resumed on D-Bus for: {', '.join(stale)}")
    if outside_runs:
        lines.append("  lost outside fault windows (client, characteristic, from, to, values):")
        for name, sub, t1, t2, count in outside_runs[:20]:
            lines.append(f"    {name:<6} {sub}  t={t1:.1f} s ({soak.clock(t1)}) to t={t2:.1f} s ({soak.clock(t2)}): {count}")
        if len(outside_runs) > 20:
            lines.append(f"    … and {len(outside_runs) - 20} more")
    if sent_lost:
        lines.append("  lost although the simulator sent them on D-Bus (characteristic, value, when D-Bus carried it, clients):")
        for (sub, v, t), names in sorted(sent_lost.items(), key=lambda x: x[0][2])[:20]:
            lines.append(f"    {sub} #{v} at t={t:.3f} s ({soak.clock(t)}), {around(soak, sub.device, t)}: {', '.join(names)}")
        if len(sent_lost) > 20:
            lines.append(f"    … and {len(sent_lost) - 20} more")

    reconnections = log_client.reconnections
    downs = sum(f["down"] for f in soak.faults)
    outages = len({(d, back) for f in soak.faults for d, back in f["backs"].items()})
    samples = [s for s in soak.samples if s[1] is not None]
    rss_max = max([s[1] for s in samples] + [r["rss_end"] or 0, r["rss_start"] or 0])
    cpu = (r["cpu_end"] - r["cpu_start"]) if r["cpu_end"] is not None and r["cpu_start"] is not None else None
    wall = r["t_cut"] - r["t_start"]
    devices_back = all(v == "connected" for v in r["states"].values())
    streams_open = all(c.open for c in clients)
    lines += ["", "gattway:",
              f"  alive and answering GET /v1/state: {'yes' if r['alive'] else 'NO (exit status ' + str(r['exit']) + ')'}",
              f"  devices at the end: {', '.join(f'{d} {s}' for d, s in r['states'].items())}"
              f" (at t={r['t_back']:.1f} s; " + (f"the last fault at t={soak.faults[-1]['t']:.1f} s)" if soak.faults else "no fault)"),
              f"  reconnections seen on the event stream: {reconnections} (the faults disconnected a device {downs} times:"
              f" {outages} outages, counting those that overlapped once)",
              f"  RSS: {r['rss_start']:.1f} MB at the start, {fmt_mb(r['rss_end'])} at the end, {rss_max:.1f} MB at most",
              f"  CPU: {fmt_s(cpu)} s over {wall:.0f} s ({(cpu or 0) / wall * 100:.2f} % of a core)",
              f"  the scan started before the soak (GET /v1/scan every 5 s): "
              + ", ".join(f"{'running' if on else 'stopped'} from t={t:.0f} s" for t, on in soak.scanning),
              f"  HTTP errors (GET /v1/state, /v1/devices, /v1/scan every 5 s): {len(soak.http_errors)}"]
    for t, text in soak.http_errors[:10] + [e for c in clients for e in c.errors][:10]:
        lines.append(f"    t={t:.1f}s {text}")

    holds_lost = [str(s) + (" (not notifying)" if not h["notifying"] else "") + (" (no longer kept)" if not h["kept"] else "")
                  for s, h in r["holds"].items() if not (h["notifying"] and h["kept"])]
    lines.append(f"  holds (REST, one per characteristic): {len(soak.subs)}; `hold` events on the event log: "
                 f"{log_client.holds.get('restored', 0)} restored, {log_client.holds.get('failed', 0)} failed (not within 10 s, still held);"
                 f" lost at the end: {', '.join(holds_lost) if holds_lost else 'none'}")
    ok = r["alive"] and devices_back and streams_open and totals["outside"] == 0 and not holds_lost
    final = (f"soak: minutes={args.minutes:g} seed={args.seed} faults={len(soak.faults)} reconnections={reconnections} "
             f"clients={len(clients)} notifications_expected={totals['expected']} received={totals['received']} "
             f"lost_during_faults={totals['during']} lost_outside_faults={totals['outside']} lost_after_dbus={totals['sent']} errors={errors} "
             f"rss_start_mb={r['rss_start']:.1f} rss_end_mb={fmt_mb(r['rss_end'], unit='')} cpu_s={fmt_s(cpu)} "
             f"holds={len(soak.subs)} holds_lost={len(holds_lost) if r['alive'] else '?'} "
             f"hold_events_restored={log_client.holds.get('restored', 0)} hold_events_failed={log_client.holds.get('failed', 0)} "
             f"alive={'yes' if r['alive'] else 'no'} devices_back={'yes' if devices_back else 'no'} "
             f"streams_open={'yes' if streams_open else 'no'} result={'pass' if ok else 'fail'}")
    log("")
    log("\n".join(lines))
    log("")
    log(final)
    return ok, r


def around(soak, device, t):
    """Where a moment lies among the faults and the device's connection events."""
    fault = next((f for f in reversed(soak.faults) if f["t"] <= t), None)
    before = next(((te, e) for te, e in reversed(soak.events) if te <= t and e.get("device") == device), None)
    after = next(((te, e) for te, e in soak.events if te > t and e.get("device") == device), None)
    parts = [f"{t - fault['t']:.2f} s after {fault['kind']} at t={fault['t']:.1f} s" if fault else "before any fault"]
    parts += [f"{abs(t - te):.3f} s {word} `{e.get('state')}` ({soak.clock(te)})"
              for word, x in (("after", before), ("before", after)) if x for te, e in [x]]
    return "; ".join(parts)


def fmt_mb(x, unit=" MB"):
    return "—" if x is None else f"{x:.1f}{unit}"


def show_log(path, devices, exited):
    """gattway's log lines that bear on a failure: the last ones, and those about devices that did not come back."""
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return
    if exited:
        log(f"\nlast lines of {path}:")
        for line in lines[-40:]:
            log("  " + line)
        return
    for d in devices:
        mine = [line for line in lines if d in line and "GET /v1/devices" not in line]
        log(f"\n{path}, the last lines about {d}:")
        for line in mine[-25:]:
            log("  " + line)


def main():
    ap = argparse.ArgumentParser(description="gattway under random BlueZ faults; see bench/soak.py's docstring")
    ap.add_argument("--minutes", type=float, default=10, help="how long faults are injected (default 10)")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: drawn, and printed)")
    ap.add_argument("--devices", type=int, default=3)
    ap.add_argument("--chars", type=int, default=2, help="notifying characteristics per device")
    ap.add_argument("--sse", type=int, default=4, help="SSE streams, one characteristic each")
    ap.add_argument("--ws", type=int, default=3, help="WebSockets, each on every characteristic")
    ap.add_argument("--gap", type=float, nargs=2, default=(10, 40), metavar=("MIN", "MAX"),
                    help="seconds between faults (default 10 40)")
    ap.add_argument("--grace", type=float, default=5, help="seconds after a reconnection still in its fault's window")
    a = ap.parse_args()
    if a.seed is None:
        a.seed = random.randrange(1 << 30)
    os.makedirs(OUT, exist_ok=True)
    for name in os.listdir(OUT):
        if name.endswith((".log", ".json")):
            os.remove(os.path.join(OUT, name))
    shutil.rmtree(os.path.join(OUT, "state"), ignore_errors=True)  # the holds kept by the last run
    rng = random.Random(a.seed)  # the intervals, then the faults
    config, subs = sim_config(rng, a.devices, a.chars)
    log(f"soak: seed {a.seed}; {a.devices} devices, {len(subs)} counter characteristics at "
        f"{', '.join(f'{s.interval * 1000:.0f}' for s in subs)} ms; {a.sse} SSE + {a.ws} WebSocket clients + an event log;"
        f" logs in {OUT}")
    gattway_log = os.path.join(OUT, "gattway.log")
    with contextlib.ExitStack() as stack:
        try:
            bus, _ = bench.start_sim(stack, config, "soak")
            port = bench.free_port()
            logf = stack.enter_context(open(gattway_log, "w"))
            proc = subprocess.Popen([bench.GATTWAY, "--listen", f"{HOST}:{port}", "--state-dir", os.path.join(OUT, "state")],
                                    stdin=subprocess.DEVNULL,
                                    stdout=logf, stderr=logf, env=dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=bus))
            stack.callback(bench.stop_process, proc)

            def powered():
                status, body = bench.http_call(port, "GET", "/v1/state", timeout=2)
                return status == 200 and body.get("state") == "poweredOn"
            bench.wait_until(powered, 30, "gattway to answer /v1/state with poweredOn")
            status, body = bench.http_call(port, "POST", "/v1/scan", {})
            if status != 200:
                raise RuntimeError(f"POST /v1/scan answered {status}: {body}")
            devices = [d["address"] for d in config["devices"]]

            def listed():
                status, body = bench.http_call(port, "GET", "/v1/devices", timeout=5)
                return status == 200 and set(devices) <= {d["id"] for d in body["devices"]}
            bench.wait_until(listed, 30, f"gattway to list {len(devices)} devices", step=0.2)
            for d in devices:
                status, body = bench.http_call(port, "POST", f"/v1/devices/{d}/connect",
                                               {"timeout": 30, "autoReconnect": True}, timeout=40)
                if status != 200:
                    raise RuntimeError(f"connect {d} answered {status}: {body}")
            for s in subs:
                status, body = bench.http_call(port, "POST", f"/v1/devices/{s.device}/characteristics/{s.uuid}/notifications",
                                               timeout=40)
                if status != 200:
                    raise RuntimeError(f"holding {s} answered {status}: {body}")
        except (RuntimeError, OSError) as e:
            log(f"soak: could not set up the rig: {e} (logs in {OUT})")
            return 2
        try:
            ok, r = asyncio.run(guarded(soak_run(a, rng, port, proc, bus, subs)))
        except (RuntimeError, OSError, asyncio.TimeoutError) as e:
            log(f"soak: could not start the streams: {e!r} (logs in {OUT})")
            show_log(gattway_log, [], True)
            return 2
        if not ok:
            show_log(gattway_log, [d for d, s in r["states"].items() if s != "connected"], r["exit"] is not None)
        return 0 if ok else 1


async def guarded(coroutine):
    """Runs the soak; SIGINT and SIGTERM cancel it (the ExitStack then stops every process)."""
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(s, task.cancel)
    return await coroutine


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, bench.interrupted)
    try:
        sys.exit(main())
    except (KeyboardInterrupt, asyncio.CancelledError):
        log("soak: interrupted; every process started was stopped")
        sys.exit(130)
