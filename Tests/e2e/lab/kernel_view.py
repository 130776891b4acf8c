"""Runs in the realbluez guest as root (`guest-exec`, with the venv's python), for
test_kernel_realbluez.py, which judges what it gathers: gattway on hci0 with the kernel's
management socket open, while btmon records the controller's reports and the management events
the kernel sends each socket; aioesphomeapi on gattway's ESPHome proxy; REST; BlueZ's own view of
the same devices (their D-Bus properties); what the guest's bluetoothd and kernel offer for passive scanning.

A BTHome sensor advertises on SENSOR_ADAPTER meanwhile (bthome_advert.py), so that the reports
also carry a sensor's service data, which the sensors view decodes. It broadcasts (not
connectable), so the kernel gives it a non-resolvable private address, maybe one per advertising
instance: its addresses are those whose advertisements carry its service data.

Writes OUT/kernel-view.json (facts, no verdicts), OUT/kernel-view.snoop (btmon's), and
OUT/kernel-view-gattway.log. Every wait is bounded; whatever happens, the processes it started
are stopped."""
import argparse
import asyncio
import ctypes
import json
import os
import select
import signal
import struct
import subprocess
import sys
import time
import traceback
import urllib.error
import urllib.request

from aioesphomeapi import APIClient, BluetoothScannerMode

import btsnoop

HERE = os.path.dirname(os.path.abspath(__file__))
API = "http://127.0.0.1:8080"


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--gattway", required=True, help="the gattway binary (the host's build)")
    p.add_argument("--out", default="/run/realbluez")
    p.add_argument("--periph", required=True, help="RB-Periph's address (hci1's)")
    p.add_argument("--sensor-adapter", default="hci2")
    p.add_argument("--sensor-name", default="RB-Sensor")
    # BTHome v2, not encrypted: packet id 7, battery 93 %, temperature 25.06 °C.
    p.add_argument("--sensor-data", default="40000701" "5d02ca09")
    p.add_argument("--listen", type=float, default=6.0, help="seconds of raw advertisements kept")
    return p.parse_args()


def bounded_wait(predicate, timeout, interval=0.1):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return predicate()


def http(method, path, body=None, timeout=10):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(API + path, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            text = resp.read().decode()
            status = resp.status
    except urllib.error.HTTPError as e:
        text, status = e.read().decode(), e.code
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def run(command, timeout=20):
    out = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=timeout)
    return {"command": command, "rc": out.returncode, "output": (out.stdout + out.stderr)[-20000:]}


def device_path(adapter, address):
    return f"/org/bluez/{adapter}/dev_{address.replace(':', '_')}"


# Debian's python3 with dbus-python reads them: busctl's JSON output fails on a{qv}
# (ManufacturerData) with busctl 252.
PROPERTIES = r"""
import dbus, json, sys
props = dbus.SystemBus().get_object("org.bluez", sys.argv[1], introspect=False).GetAll(
    sys.argv[2], dbus_interface="org.freedesktop.DBus.Properties")
def plain(v):
    if isinstance(v, dbus.Array) and v.signature == "y": return bytes(v).hex()
    if isinstance(v, dbus.Dictionary): return {str(k): plain(x) for k, x in v.items()}
    if isinstance(v, dbus.Array): return [plain(x) for x in v]
    if isinstance(v, dbus.Boolean): return bool(v)
    if isinstance(v, (dbus.String, dbus.ObjectPath)): return str(v)
    return int(v)
print(json.dumps({str(k): plain(v) for k, v in props.items()}))
"""


def bluez_properties(path, interface):
    """Device1's (or Adapter1's) properties as BlueZ has them: {name: value}, byte arrays as hex."""
    out = subprocess.run(["/usr/bin/python3", "-c", PROPERTIES, path, interface], capture_output=True, text=True, timeout=10)
    if out.returncode != 0:
        return {"error": out.stderr.strip()[-500:]}
    return json.loads(out.stdout)


def metrics():
    with urllib.request.urlopen(API + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    wanted = ("gattway_management_frames_total", "gattway_dbus_properties_signals_total", "gattway_devices_engaged")
    return {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines() if line.startswith(wanted)}


def snoop(path):
    """btmon's records so far (it writes each as it comes); none before its header."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return []
    return btsnoop.records(data) if len(data) >= 16 else []


def gattway_frames_until_discovery_ended(path):
    """How many management frames gattway's channel counts once it has read the Discovering (off)
    event of hci0: those sent to its socket after its opening handshake (the answer to Read
    Controller Index List, its last) up to that event; None while btmon has not recorded it."""
    frames = [frame for _, frame, _ in btsnoop.frames_to_others(snoop(path))]
    start = next((i for i, f in enumerate(frames) if f[:2] == b"\x01\x00" and f[6:8] == b"\x03\x00"), None)
    off = [i for i, f in enumerate(frames) if f[:4] == b"\x13\x00\x00\x00" and f[7] == 0]
    if start is None or not off:
        return None
    return off[-1] - start


def counted(m):
    return sum(v for k, v in m.items() if k.startswith("gattway_management_frames_total") and "ad_dropped" not in k)


class Processes:
    """What this script started, stopped in reverse order."""

    def __init__(self):
        self.started = []

    def start(self, name, argv, log, env=None):
        f = open(log, "w")
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                             start_new_session=True)
        self.started.append((name, p, f))
        return p

    def stop(self, name, sig=signal.SIGTERM, timeout=15):
        for n, p, f in self.started:
            if n == name and p.poll() is None:
                p.send_signal(sig)
                try:
                    p.wait(timeout)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
                f.close()
                return p.returncode
        return None

    def stop_all(self):
        for n, _, _ in reversed(self.started):
            self.stop(n, signal.SIGINT if n == "btmon" else signal.SIGTERM)


def address(number):
    return ":".join(f"{number:012X}"[i:i + 2] for i in range(0, 12, 2))


async def esphome(periph, sensor_structure, seconds):
    """Raw advertisements of RB-Periph and of the sensor (those carrying `sensor_structure`)
    through the proxy for `seconds` once both were heard (scanning actively), and the scanner
    states told."""
    api = APIClient("127.0.0.1", 6053, None, client_info="gattway kernel view")
    await api.connect(login=False)
    reports, states = [], []
    heard = {"periph": asyncio.Event(), "sensor": asyncio.Event()}
    ended = None

    def on_advertisements(batch):
        if ended is not None:
            return  # what came after the window's end is not counted
        for a in batch.advertisements:
            data = bytes(a.data)
            whose = "periph" if address(a.address) == periph else "sensor" if sensor_structure in data else None
            if whose:
                reports.append({"address": address(a.address), "whose": whose, "address_type": a.address_type,
                                "rssi": a.rssi, "data": data.hex(), "t": time.time()})
                heard[whose].set()

    def on_state(s):
        states.append({"state": s.state.name, "mode": s.mode.name, "configured_mode": s.configured_mode.name,
                       "t": time.time()})

    api.subscribe_bluetooth_scanner_state(on_state)
    subscribed = time.time()
    api.subscribe_bluetooth_le_raw_advertisements(on_advertisements)
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in heard.values())), 40)
    first_after = time.time() - subscribed
    await asyncio.sleep(seconds)
    ended = time.time()
    await api.disconnect()
    # Wall-clock times (btmon's records carry the kernel's): the subscription taken (the
    # proxy tells the state once it listens) and its end.
    return {"reports": reports, "scanner_states": states,
            "first_heard_after": round(first_after, 2), "subscribed_at": subscribed,
            "listening_at": states[0]["t"] if states else None, "ended_at": ended}


def passive_rest(periph, seconds):
    """A passive REST scan (no watch runs then), RB-Periph first removed from BlueZ: the scan's
    answer, GET /v1/scan and RB-Periph as REST lists it after `seconds`, whether BlueZ has an
    object for it then, the window's wall-clock times; then a connect to it through REST (BlueZ
    must learn it first), its disconnect, the mode once the connect's discovery is over, and the
    stop's answer."""
    path = device_path("hci0", periph)
    removed = run(f"busctl call org.bluez /org/bluez/hci0 org.bluez.Adapter1 RemoveDevice o {path}")
    started = time.time()
    answer = http("POST", "/v1/scan", {"active": False})
    time.sleep(seconds)
    state = http("GET", "/v1/scan")
    device = http("GET", f"/v1/devices/{periph}")
    bluez_object = "error" not in bluez_properties(path, "org.bluez.Device1")
    ended = time.time()
    asked = time.monotonic()
    connect = (*http("POST", f"/v1/devices/{periph}/connect", {"timeout": 20}, timeout=40), (time.monotonic() - asked) * 1000)
    read = http("GET", f"/v1/devices/{periph}/characteristics/2a29/value?format=utf8")
    disconnect = http("POST", f"/v1/devices/{periph}/disconnect")
    passive_again = bounded_wait(lambda: http("GET", "/v1/scan")[1].get("mode") == "passive", 10, 0.25)
    return {"removed": removed, "answer": answer, "state": state, "device": device, "bluez_object": bluez_object,
            "started_at": started, "ended_at": ended, "connect": connect, "read": read, "disconnect": disconnect,
            "passive_again": bool(passive_again), "stopped": http("DELETE", "/v1/scan")}


async def esphome_passive(periph, seconds):
    """The proxy asked for passive scanning, as Home Assistant asks: the scanner states told, RB-Periph's
    raw advertisements for `seconds` once the state says passive (and the window), GET /v1/watch
    then; active asked again at the end."""
    api = APIClient("127.0.0.1", 6053, None, client_info="gattway kernel view (passive)")
    await api.connect(login=False)
    reports, states = [], []
    phase = ["before"]

    def on_advertisements(batch):
        for a in batch.advertisements:
            if address(a.address) == periph:
                reports.append({"phase": phase[0], "data": bytes(a.data).hex(), "t": time.time()})

    def on_state(s):
        states.append({"state": s.state.name, "mode": s.mode.name, "configured_mode": s.configured_mode.name, "t": time.time()})

    async def told(mode):
        for _ in range(100):
            if states and states[-1]["mode"] == mode:
                return True
            await asyncio.sleep(0.1)
        return False

    api.subscribe_bluetooth_scanner_state(on_state)
    api.subscribe_bluetooth_le_raw_advertisements(on_advertisements)
    await told("ACTIVE")
    asked = time.time()
    api.bluetooth_scanner_set_mode(BluetoothScannerMode.PASSIVE)
    answered = await told("PASSIVE")
    phase[0] = "passive"
    started = time.time()
    await asyncio.sleep(seconds)
    ended = time.time()
    phase[0] = "after"
    watch = http("GET", "/v1/watch")
    api.bluetooth_scanner_set_mode(BluetoothScannerMode.ACTIVE)
    await told("ACTIVE")
    await api.disconnect()
    return {"states": states, "reports": reports, "asked_at": asked, "answered": answered, "started_at": started,
            "ended_at": ended, "watch": watch}


def other_client_links(periph, rounds=2):
    """Another client of BlueZ (busctl) connects RB-Periph and disconnects it, `rounds` times:
    whether gattway's REST shows each link up and down (within 10 s). bluetoothd 5.66 was seen not
    to signal Connected=true after such a Connect; the second time the device is engaged already."""
    path = device_path("hci0", periph)

    def state():
        return http("GET", f"/v1/devices/{periph}")[1].get("state")

    out = []
    for _ in range(rounds):
        connect = run(f"busctl call org.bluez {path} org.bluez.Device1 Connect", timeout=40)
        up = bounded_wait(lambda: state() == "connected", 10)
        disconnect = run(f"busctl call org.bluez {path} org.bluez.Device1 Disconnect", timeout=40)
        down = bounded_wait(lambda: state() == "disconnected", 10)
        out.append({"connect": connect, "shown_connected": bool(up), "disconnect": disconnect, "shown_disconnected": bool(down)})
    return out


def btmgmt(index, command):
    """btmgmt's answer (it prints nothing without a terminal: `script` gives it one)."""
    out = run(f"timeout 10 script -qc 'btmgmt --index {index} {command}' /dev/null")
    out["output"] = "\n".join(line for line in out["output"].replace("\r", "").splitlines() if line.strip())
    return out


def monitor_probe(index, seconds, prefix=b"RB"):
    """Passive scanning through the kernel's advertisement monitors (what habluetooth uses, and
    bluetoothd's AdvertisementMonitorManager1 under it): Add Advertisement Patterns Monitor
    (0x0052, one pattern: a complete name starting with `prefix`) on a management socket of this
    process, whatever the kernel sends it for `seconds`, then Remove Advertisement Monitor. A
    socket of its own: Python's socket module cannot bind the control channel, so libc does."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.socket(31, 3 | 0o2000000, 1)  # AF_BLUETOOTH, SOCK_RAW | SOCK_CLOEXEC, BTPROTO_HCI
    control = struct.pack("<HHH", 31, 0xFFFF, 3)  # no controller, HCI_CHANNEL_CONTROL
    if fd < 0 or libc.bind(fd, control, len(control)) != 0:
        return {"error": os.strerror(ctypes.get_errno())}
    with open("/proc/self/comm") as f:
        probe = {"comm": f.read().strip(), "started_at": time.time(), "replies": [], "events": {}}
    try:
        pattern = bytes([1, 0x09, 0, len(prefix)]) + prefix.ljust(31, b"\0")
        os.write(fd, struct.pack("<HHH", 0x0052, index, len(pattern)) + pattern)
        handle, end = None, time.monotonic() + seconds
        while time.monotonic() < end:
            if not select.select([fd], [], [], max(0.0, end - time.monotonic()))[0]:
                continue
            frame = os.read(fd, 1024)
            code = struct.unpack_from("<H", frame)[0]
            if code in (0x0001, 0x0002):
                probe["replies"].append(frame.hex())
                if code == 0x0001 and frame[6:9] == b"\x52\x00\x00":
                    handle = struct.unpack_from("<H", frame, 9)[0]
            else:
                probe["events"].setdefault(f"0x{code:04x}", []).append(frame.hex())
        probe["handle"] = handle
        if handle is not None:
            os.write(fd, struct.pack("<HHHH", 0x0053, index, 2, handle))
            if select.select([fd], [], [], 5)[0]:
                probe["removed"] = os.read(fd, 1024).hex()
    finally:
        os.close(fd)
        probe["stopped_at"] = time.time()
    return probe


def passive_facts(adapter):
    """What this bluetoothd and kernel offer for passive scanning (facts for the lead)."""
    index = adapter[3:]
    bluetoothd = ""
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0].decode(errors="replace")) == "bluetoothd":
            bluetoothd = " ".join(a.decode(errors="replace") for a in argv if a)
    introspected = subprocess.run(["busctl", "introspect", "--list", "org.bluez", f"/org/bluez/{adapter}"],
                                  capture_output=True, text=True, timeout=10)
    interfaces = sorted({line.split()[0] for line in introspected.stdout.splitlines() if line.split()[1:2] == ["interface"]}) \
        if introspected.returncode == 0 else [introspected.stderr.strip()]
    return {
        "bluetoothd_cmdline": bluetoothd,
        "bluetoothd_version": run("bluetoothd --version")["output"].strip(),
        "kernel": os.uname().release,
        "adapter_interfaces": interfaces,
        "btmgmt_info": btmgmt(index, "info"),
        "btmgmt_commands": btmgmt(index, "commands"),
        "btmgmt_monitor_features": btmgmt(index, "monitor.features"),
        "btmgmt_exp_info": btmgmt(index, "expinfo"),
        "monitor_probe": monitor_probe(int(index), 4),
    }


def main():
    args = parse_args()
    os.makedirs(args.out, exist_ok=True)
    snoop_path = os.path.join(args.out, "kernel-view.snoop")
    result_path = os.path.join(args.out, "kernel-view.json")
    gattway_log = os.path.join(args.out, "kernel-view-gattway.log")
    sensor_ready = os.path.join(args.out, "kernel-view-sensor.ready")
    for stale in (snoop_path, result_path, sensor_ready):
        if os.path.exists(stale):
            os.remove(stale)
    sensor_structure = bytes([len(args.sensor_data) // 2 + 3, 0x16, 0xD2, 0xFC]) + bytes.fromhex(args.sensor_data)
    result = {"periph": args.periph, "sensor_data": args.sensor_data, "sensor_name": args.sensor_name,
              "steps": []}
    procs = Processes()

    def step(name):
        result["steps"].append({"step": name, "t": round(time.monotonic() - t0, 2)})

    t0 = time.monotonic()
    try:
        procs.start("sensor", ["/usr/bin/python3", os.path.join(HERE, "bthome_advert.py"), args.sensor_adapter,
                               sensor_ready, args.sensor_name, args.sensor_data],
                    os.path.join(args.out, "kernel-view-sensor.log"))
        assert bounded_wait(lambda: os.path.exists(sensor_ready), 20), "the BTHome advertiser did not register"
        step("sensor advertising")
        procs.start("btmon", ["btmon", "-w", snoop_path], os.path.join(args.out, "kernel-view-btmon.log"))
        # btmon is bound to the monitor once it has replayed the sockets already open (bluetoothd's).
        assert bounded_wait(lambda: btsnoop.control_sockets(snoop(snoop_path)), 20), "btmon recorded no control socket"
        step("btmon recording")
        env = {**os.environ, "DBUS_SYSTEM_BUS_ADDRESS": "unix:path=/run/dbus/system_bus_socket"}
        gattway = procs.start("gattway", [args.gattway, "--listen", "127.0.0.1:8080", "--adapter", "hci0", "--state-dir", "none",
                                          "--no-auth", "--esphome-api", "127.0.0.1:6053", "--watch"], gattway_log, env=env)

        def adapters():
            try:
                status, body = http("GET", "/v1/adapters")
            except OSError:
                return None
            return body if status == 200 else None

        body = bounded_wait(adapters, 60, 0.25)
        assert body, f"gattway did not serve /v1/adapters (exit {gattway.poll()})"
        step("gattway serving")
        result["adapters"] = body
        with open(gattway_log) as f:
            result["advertisements_log"] = [line.strip() for line in f if "advertisements: from" in line]

        result["esphome"] = asyncio.run(asyncio.wait_for(esphome(args.periph, sensor_structure, args.listen), 90))
        step("esphome listened")
        sensors = sorted({r["address"] for r in result["esphome"]["reports"] if r["whose"] == "sensor"})
        result["sensors_heard"] = sensors
        result["rest"] = {
            "device": http("GET", f"/v1/devices/{args.periph}"),
            "watch": http("GET", "/v1/watch"),
            "sensors": http("GET", "/v1/sensors"),
            "sensor": {a: http("GET", f"/v1/sensors/{a}") for a in sensors},
        }
        result["bluez"] = {a: bluez_properties(device_path("hci0", a), "org.bluez.Device1") for a in [args.periph, *sensors]}
        # Quiet before counting: the watch stopped, BlueZ's discovery ended, so that no more
        # device-found events come and gattway's counters can be set against btmon's record.
        result["rest"]["watch_stopped"] = http("DELETE", "/v1/watch")
        discovery_ended = bounded_wait(
            lambda: bluez_properties("/org/bluez/hci0", "org.bluez.Adapter1").get("Discovering") is False, 20, 0.25)
        result["discovery_ended"] = bool(discovery_ended)
        # gattway has read every frame the kernel sent its socket up to the end of discovery
        # (the events of a socket come in order): its counters are then comparable.
        expected = bounded_wait(lambda: gattway_frames_until_discovery_ended(snoop_path), 10)
        result["frames_until_discovery_ended"] = expected
        result["metrics"] = bounded_wait(lambda: (lambda m: m if expected is None or counted(m) >= expected else None)(metrics()), 10) \
            or metrics()
        result["metrics_at"] = time.time()
        step("counted")
        result["other_client"] = other_client_links(args.periph)
        step("another client's links")
        result["passive_rest"] = passive_rest(args.periph, 4)
        step("passive REST scan")
        result["esphome_passive"] = asyncio.run(asyncio.wait_for(esphome_passive(args.periph, 4), 60))
        step("proxy in passive mode")
        with open(gattway_log) as f:
            result["passive_log"] = [line.strip() for line in f if "passive scanning" in line or "advertisement monitor" in line]
        result["gattway_exit"] = procs.stop("gattway")
        step("gattway stopped")
        result["passive"] = passive_facts("hci0")
        step("passive facts")
    except Exception:
        result["error"] = traceback.format_exc()
    finally:
        procs.stop_all()
        with open(gattway_log) as f:
            result["gattway_log_tail"] = f.read().splitlines()[-40:]
        with open(result_path + ".tmp", "w") as f:
            json.dump(result, f, indent=1)
        os.rename(result_path + ".tmp", result_path)
    print(json.dumps({k: result.get(k) for k in ("steps", "error")}))
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main())
