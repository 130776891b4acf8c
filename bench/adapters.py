#!/usr/bin/env python3
"""Benchmark of several adapters (issue 33): prints figures, decides nothing.

Every phase starts a fresh `gattway-sim --config <generated JSON>` on its own private bus, then
gattway on that bus (a plain BlueZ client, not --simulate, every adapter BlueZ lists: the
default), which scans (POST /v1/scan {}).

  a. reports  500 non-connectable devices advertising every 250 ms, a counter in their
              manufacturer data (so every advertisement brings new data, as a sensor's does),
              heard by one adapter (hci0, -50 dBm), then by two (hci0 at -50, hci1 at -70); the
              sides alternate (one, two, one, two) and are pooled. A report is one
              advertisement as one adapter's bluetoothd signals it: a PropertiesChanged of
              org.bluez.Device1 on /org/bluez/hciN/dev_… (the scan's filter makes BlueZ signal
              the RSSI of every advertisement), or the InterfacesAdded of a device's first; one
              packet heard by two adapters is two reports. A plain D-Bus client (dbus-fast) on
              the simulator's bus counts them, per adapter, over the window; gattway's CPU
              (utime + stime, /proc) over the same window / those reports = µs per report, also
              per third of the window (first and last: the cost stays flat), and its RSS at the
              window's start and end. After the window, GET /v1/devices: entries, distinct ids,
              and how many list both adapters.
  b. connections  2N + 1 connectable devices, every adapter holding at most N links
              (maxConnections, N = 5): POST /v1/devices/{id}/connect one device after the other
              until one is refused, through one adapter, then two; how many were connected, the
              refusal (status, error name), and each adapter's connections in GET /v1/adapters.

Usage: bench/run adapters [--quick] [--phases reports,connections] [--window S] [--rounds K]
[--gattway PATH] (another build, e.g. the one before a change, for the same script).
Logs go to .build/bench/adapters-*; the figures also to .build/bench/adapters-results.txt.
"""
import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (the rig's tools: simulator, processes, figures)
from bench import GATTWAY, HOST, OUT, Helper, answer, commands, cpu_seconds, fmt, free_port, http_call, log, rss_mb, start_sim, stop_process, tree_cpu_seconds, wait_until  # noqa: E402,E501

ADAPTERS = [{"id": "hci0", "address": "00:1A:7D:DA:71:13"}, {"id": "hci1", "address": "00:1A:7D:DA:71:14"}]
RSSI = {"hci0": -50, "hci1": -70}
LIMIT = 5  # each simulated adapter's maxConnections in the connections phase


def adapters_config(count, devices, max_connections=7):
    return [dict(a, maxConnections=max_connections) for a in ADAPTERS[:count]], {a["id"]: RSSI[a["id"]] for a in ADAPTERS[:count]}


def advertisers(count, devices=500, interval_ms=250):
    adapters, rssi = adapters_config(count, devices)
    return {"adapters": adapters, "devices": [
        {"address": f"F1:00:00:00:{d // 256:02X}:{d % 256:02X}", "name": f"Adv {d}", "connectable": False,
         "advertisingIntervalMs": interval_ms, "manufacturerData": {"0xFFFF": "00"}, "advertisingCounter": True,
         "rssi": rssi, "rssiJitter": 3} for d in range(devices)]}


def connectables(count, devices):
    adapters, rssi = adapters_config(count, devices, max_connections=LIMIT)
    return {"adapters": adapters, "devices": [
        {"address": f"F3:00:00:00:00:{d + 1:02X}", "name": f"Link {d + 1}", "advertisingIntervalMs": 200,
         "connectDelayMs": 10, "rssi": rssi, "services": [{"uuid": "b000", "characteristics": [bench.READ_CHAR]}]}
        for d in range(devices)]}


class Rig:
    """A simulator with `config` and gattway on its bus, scanning; `port` (REST), `pid`."""

    def __init__(self, stack, name, config, binary):
        self.name = name
        self.bus, self.sim_pid = start_sim(stack, config, f"adapters-{name}")
        self.port = free_port()
        self.log = os.path.join(OUT, f"adapters-{name}.log")
        logf = stack.enter_context(open(self.log, "w"))
        # The bench's requests all come from loopback: REST's per-client rate limit is lifted.
        self.proc = subprocess.Popen([binary, "--listen", f"{HOST}:{self.port}", "--state-dir", "none", "--rate-limit", "0"],
                                     env=dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=self.bus), stdout=logf, stderr=logf,
                                     stdin=subprocess.DEVNULL)
        stack.callback(stop_process, self.proc)
        self.pid = self.proc.pid
        wait_until(lambda: self.alive() and self.get("/v1/state").get("state") == "poweredOn", 30, "gattway to be poweredOn")
        wanted = {a["id"] for a in config["adapters"]}
        wait_until(lambda: {a["id"] for a in self.get("/v1/adapters")["adapters"] if a.get("selected")} == wanted, 10,
                   f"gattway to use {', '.join(sorted(wanted))}")
        status, body = http_call(self.port, "POST", "/v1/scan", {})
        if status != 200:
            raise RuntimeError(f"POST /v1/scan answered {status}: {body}")

    def alive(self):
        if self.proc.poll() is not None:
            raise RuntimeError(f"gattway exited with {self.proc.returncode} (see {self.log})")
        return True

    def get(self, path):
        status, body = http_call(self.port, "GET", path, timeout=10)
        if status != 200:
            raise RuntimeError(f"GET {path} answered {status}: {body}")
        return body

    def listing(self, addresses):
        """GET /v1/devices: entries, distinct ids, ours, ours that list every adapter in use."""
        devices = self.get("/v1/devices")["devices"]
        ids = [d["id"] for d in devices]
        adapters = len(self.get("/v1/adapters")["adapters"])
        heard = [d for d in devices if d["id"] in addresses]
        return {"entries": len(ids), "distinct": len(set(ids)), "ours": len({d["id"] for d in heard}),
                "by_every_adapter": sum(1 for d in heard if len(d.get("adapters") or [None]) == adapters)}


# ---------------------------------------------------------------------------------------------
# Phases

def phase_reports(count, window, binary, tag):
    """One side of the reports phase: `count` adapters hearing the 500 advertisers."""
    config = advertisers(count)
    addresses = {d["address"] for d in config["devices"]}
    with contextlib.ExitStack() as st:
        rig = Rig(st, f"reports{count}-{tag}", config, binary)
        observer = Helper(st, f"adapters-reports{count}-{tag}-observer", "_observer", rig.bus, script=__file__)
        observer.get(30)
        # Every device listed, as heard by every adapter, before the window opens.
        wait_until(lambda: rig.alive() and (lambda l: l["ours"] == len(addresses) and l["by_every_adapter"] == len(addresses))(
            rig.listing(addresses)), 60, f"gattway to list {len(addresses)} devices heard by {count} adapter(s)", step=1)
        time.sleep(3)
        observer.ask(cmd="start")
        marks = []
        for i in range(4):  # the window's start and the ends of its thirds
            if i:
                time.sleep(window / 3)
            rig.alive()
            marks.append({"cpu": cpu_seconds(rig.pid), "sim": tree_cpu_seconds(rig.sim_pid), "t": time.monotonic(), "rss": rss_mb(rig.pid),
                          "reports": observer.ask(cmd="count")["reports"]})
        listing = rig.listing(addresses)
    first, last = marks[0], marks[-1]
    total = lambda m: sum(m["reports"].values())  # noqa: E731
    thirds = [(b["cpu"] - a["cpu"]) / max(1, total(b) - total(a)) * 1e6 for a, b in zip(marks, marks[1:])]
    r = {"adapters": count, "wall": last["t"] - first["t"], "cpu": last["cpu"] - first["cpu"], "sim_cpu": last["sim"] - first["sim"],
         "reports": total(last) - total(first), "per_adapter": {a: last["reports"].get(a, 0) - first["reports"].get(a, 0)
                                                                 for a in last["reports"]},
         "thirds": thirds, "rss": (first["rss"], last["rss"]), **listing}
    r["us_per_report"] = r["cpu"] / max(1, r["reports"]) * 1e6
    wall = r["wall"]
    per_adapter = ", ".join(f"{a} {n / wall:.0f}" for a, n in sorted(r["per_adapter"].items()))
    log(f"  {count} adapter(s): {r['reports'] / wall:.0f} reports/s ({per_adapter}),"
        f" gattway {r['us_per_report']:.2f} µs CPU per report (thirds {', '.join(f'{x:.2f}' for x in thirds)}),"
        f" {r['cpu'] / r['wall']:.3f} cores, RSS {r['rss'][0]:.2f} → {r['rss'][1]:.2f} MB; simulator + bus {r['sim_cpu'] / r['wall']:.2f} cores;"
        f" listed {listing['entries']} ({listing['distinct']} distinct, {listing['by_every_adapter']} heard by every adapter)")
    return r


def phase_connections(count, binary):
    """Connect devices one after the other until one is refused, through `count` adapters."""
    config = connectables(count, 2 * LIMIT + 1)
    addresses = [d["address"] for d in config["devices"]]
    with contextlib.ExitStack() as st:
        rig = Rig(st, f"connections{count}", config, binary)
        wait_until(lambda: rig.alive() and rig.listing(set(addresses))["ours"] == len(addresses), 30,
                   f"gattway to list {len(addresses)} devices")
        connected, through, refusal = 0, {}, None
        for address in addresses:
            t = time.monotonic()
            status, body = http_call(rig.port, "POST", f"/v1/devices/{address}/connect", {"timeout": 10}, timeout=20)
            if status != 200:
                error = (body or {}).get("error", {}) if isinstance(body, dict) else {}
                refusal = {"status": status, "name": error.get("name"), "message": error.get("message"),
                           "seconds": time.monotonic() - t}
                break
            connected += 1
            through[body.get("adapter")] = through.get(body.get("adapter"), 0) + 1
        adapters = {a["id"]: (a.get("connections"), a.get("connectionLimit")) for a in rig.get("/v1/adapters")["adapters"]}
    r = {"adapters": count, "slots": count * LIMIT, "connected": connected, "through": through, "refusal": refusal,
         "in_use": adapters}
    refused = (f"then {refusal['status']} {refusal['name']} in {refusal['seconds'] * 1000:.0f} ms: {refusal['message']}"
               if refusal else "none refused")
    log(f"  {count} adapter(s) of {LIMIT} links: {connected} connected"
        f" ({', '.join(f'{a} {n}' for a, n in sorted(through.items()))}), {refused}")
    log(f"    GET /v1/adapters: {', '.join(f'{a} {c}/{l}' for a, (c, l) in sorted(adapters.items()))} (connections/limit)")
    return r


# ---------------------------------------------------------------------------------------------
# Helper (this file run with a leading _role)

async def role_observer(args):
    """Counts the reports the simulator signals, per adapter: PropertiesChanged of Device1 and
    InterfacesAdded with Device1, by the adapter in their path."""
    from dbus_fast import Message, MessageType
    from dbus_fast.aio import MessageBus
    bus = await MessageBus(bus_address=args.bus).connect()
    state = {"on": False, "reports": {}}

    def on_message(msg):
        if not state["on"] or msg.message_type != MessageType.SIGNAL:
            return
        if msg.member == "PropertiesChanged":
            path = msg.path
        elif msg.member == "InterfacesAdded" and "org.bluez.Device1" in msg.body[1]:
            path = msg.body[0]
        else:
            return
        parts = path.split("/")
        if len(parts) == 5 and parts[4].startswith("dev_"):
            state["reports"][parts[3]] = state["reports"].get(parts[3], 0) + 1
    bus.add_message_handler(on_message)
    for rule in ("type='signal',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged',arg0='org.bluez.Device1'",
                 "type='signal',interface='org.freedesktop.DBus.ObjectManager',member='InterfacesAdded'"):
        await bus.call(Message(destination="org.freedesktop.DBus", path="/org/freedesktop/DBus", interface="org.freedesktop.DBus",
                               member="AddMatch", signature="s", body=[rule]))
    answer(ready=True)
    async for cmd in commands():
        if cmd["cmd"] == "start":
            state.update(on=True, reports={})
            answer(ok=True)
        elif cmd["cmd"] == "count":
            answer(reports=dict(state["reports"]))


def helper_main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("role")
    p.add_argument("bus")
    args = p.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt, BrokenPipeError):
        asyncio.run({"_observer": role_observer}[args.role](args))


# ---------------------------------------------------------------------------------------------

def pooled(runs):
    """Sides' rounds pooled: total CPU / total reports, reports/s, thirds, the fewest listed."""
    if not runs:
        return None
    wall, reports = sum(r["wall"] for r in runs), sum(r["reports"] for r in runs)
    return {"per_s": reports / wall, "us": sum(r["cpu"] for r in runs) / max(1, reports) * 1e6,
            "first": sum(r["thirds"][0] for r in runs) / len(runs), "last": sum(r["thirds"][-1] for r in runs) / len(runs),
            "cores": sum(r["cpu"] for r in runs) / wall, "sim_cores": sum(r["sim_cpu"] for r in runs) / wall,
            "entries": min(r["entries"] for r in runs), "distinct": min(r["distinct"] for r in runs),
            "both": min(r["by_every_adapter"] for r in runs), "rounds": len(runs), "each": [r["us_per_report"] for r in runs],
            "rss": [r["rss"] for r in runs]}


def report(res, window):
    one, two = pooled(res.get("reports1", [])), pooled(res.get("reports2", []))
    c1, c2 = res.get("connections1"), res.get("connections2")
    lines = []

    def row(label, sides, cell):
        return f"| {label} | " + " | ".join(cell(s) if s else "—" for s in sides) + " |"
    if one or two:
        sides = (one, two)
        ratio = two["us"] / one["us"] if one and two else None
        lines += [f"reports: 500 devices advertising every 250 ms, gattway scanning; {window:.0f} s windows, "
                  f"{(one or two)['rounds']} round(s) per side, alternating, pooled",
                  "| figure | one adapter | two adapters |", "|---|---|---|",
                  row("reports/s signalled (one adapter's PropertiesChanged of a Device1)", sides, lambda s: f"{s['per_s']:.0f}"),
                  row("gattway CPU per report (pooled)", sides, lambda s: f"{s['us']:.2f} µs"),
                  row("  each round", sides, lambda s: ", ".join(f"{x:.2f}" for x in s["each"]) + " µs"),
                  row("  first third → last third of the window (mean of rounds)", sides,
                      lambda s: f"{s['first']:.2f} → {s['last']:.2f} µs"),
                  row("gattway CPU", sides, lambda s: f"{s['cores']:.3f} cores"),
                  row("gattway RSS, the window's start → end", sides, lambda s: ", ".join(f"{a:.2f} → {b:.2f}" for a, b in s["rss"]) + " MB"),
                  row("simulator + its dbus-daemon CPU", sides, lambda s: f"{s['sim_cores']:.2f} cores"),
                  row("GET /v1/devices: entries (distinct ids); listing every adapter", sides,
                      lambda s: f"{s['entries']} ({s['distinct']}); {s['both']}"),
                  f"| ratio two / one, CPU per report | {fmt(ratio)} | |"]
    if c1 or c2:
        sides = (c1, c2)
        lines += ["", f"connections: each adapter holds {LIMIT} links (maxConnections); connect until refused",
                  "| figure | one adapter | two adapters |", "|---|---|---|",
                  row("connected before the refusal", sides, lambda c: str(c["connected"])),
                  row("the refusal", sides, lambda c: f"{c['refusal']['status']} {c['refusal']['name']}" if c["refusal"] else "none"),
                  row("GET /v1/adapters: connections / limit", sides,
                      lambda c: ", ".join(f"{a} {n}/{l}" for a, (n, l) in sorted(c["in_use"].items())))]
    final = "adapters:"
    if one and two:
        final += (f" reports_per_s_one={one['per_s']:.0f} reports_per_s_two={two['per_s']:.0f} us_per_report_one={one['us']:.2f}"
                  f" us_per_report_two={two['us']:.2f} ratio={two['us'] / one['us']:.3f} listed_one={one['entries']}"
                  f" listed_two={two['entries']}")
    if c1 and c2:
        final += (f" connected_one={c1['connected']} connected_two={c2['connected']}"
                  f" refusal_one={c1['refusal']['status'] if c1['refusal'] else 'none'}"
                  f" refusal_two={c2['refusal']['status'] if c2['refusal'] else 'none'}")
    return lines + ["", final]


def main():
    ap = argparse.ArgumentParser(description="several adapters' figures; see the docstring of bench/adapters.py")
    ap.add_argument("--quick", action="store_true", help="short windows, one round: a smoke run")
    ap.add_argument("--phases", default="reports,connections")
    ap.add_argument("--window", type=float, help="seconds measured per side and round (default 24, 6 with --quick)")
    ap.add_argument("--rounds", type=int, help="rounds per side, alternating (default 2, 1 with --quick)")
    ap.add_argument("--gattway", default=GATTWAY, help="the gattway binary (default: the release build)")
    a = ap.parse_args()
    window = a.window or (6 if a.quick else 24)
    rounds = a.rounds or (1 if a.quick else 2)
    bench.clear_last_run("adapters-")
    phases = a.phases.split(",")
    res = {}
    if "reports" in phases:
        log(f"adapters: a. 500 advertising devices heard by one adapter, then two ({rounds} round(s) of {window:.0f} s)")
        for r in range(rounds):
            for count in (1, 2):
                res.setdefault(f"reports{count}", []).append(phase_reports(count, window, a.gattway, f"r{r + 1}"))
    if "connections" in phases:
        log(f"adapters: b. connections until refused, {LIMIT} links per adapter")
        for count in (1, 2):
            res[f"connections{count}"] = phase_connections(count, a.gattway)
    lines = report(res, window)
    for line in lines:
        log(line)
    with open(os.path.join(OUT, "adapters-results.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1].startswith("_"):
        helper_main(sys.argv[1:])
    else:
        bench.signal.signal(bench.signal.SIGINT, bench.interrupted)
        bench.signal.signal(bench.signal.SIGTERM, bench.interrupted)
        try:
            main()
        except KeyboardInterrupt as e:
            log(f"adapters: interrupted ({e or 'Ctrl-C'}); every process started was stopped")
            sys.exit(130)
