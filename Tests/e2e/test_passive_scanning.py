"""Issue 36's passive scanning on the simulator: on the kernel's advertisement path (the default
of `--simulate`) a scan or the watch with `active: false` runs no BlueZ discovery; gattway adds an
advertisement monitor on the management channel (the simulator answers as the kernel does) and the
controller scans passively: what it hears comes as Advertisement Monitor Device Found frames,
without scan responses, and bluetoothd makes no device objects of it. The state says which mode
really runs; a device heard only so can be connected; the ESPHome proxy honours Home Assistant's
scanner mode. On the D-Bus path a passive scan is refused (501) and a passive watch says active.
The real kernel proves the same in the lab (test_kernel_realbluez.py)."""
import asyncio
import json
import socket
import struct
import subprocess

from aioesphomeapi.model import BluetoothScannerMode

from conftest import Gateway, wait_for
from esphome_client import ad_structures, address_int, connected, esphome_port
from test_kernel_advertisements import Simulator

SENSOR = "A4:C1:38:00:00:01"
PERIPH = "C0:FF:EE:00:00:36"

DEVICES = {"devices": [
    # bthome.io/format's opening example with a packet id: 25.00 °C, 50.55 %.
    {"address": SENSOR, "name": "Passive BTHome", "connectable": False, "advertisingIntervalMs": 200,
     "serviceData": {"FCD2": "40000102C40903BF13"}},
    # Its name only in its scan response, which a passive scan never asks for.
    {"address": PERIPH, "name": "Scan Response Name", "nameInScanResponse": True, "advertisingIntervalMs": 200,
     "uuids": ["180F"], "manufacturerData": {"0xFFFF": "3336"},
     "services": [{"uuid": "180F", "characteristics": [{"uuid": "2A19", "flags": ["read"], "value": "5d"}]}]},
]}


def start(tmp_path, *args):
    config = tmp_path / "passive.json"
    config.write_text(json.dumps(DEVICES))
    return Gateway(["--simulate", str(config), "--no-watch", *args])


def bluez_objects(gw):
    """The object paths bluetoothd (the simulator) exports."""
    out = subprocess.run(["dbus-send", "--bus=" + gw.bus, "--print-reply", "--dest=org.bluez", "/",
                          "org.freedesktop.DBus.ObjectManager.GetManagedObjects"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    return out.stdout


def device_path(address):
    return "/org/bluez/hci0/dev_" + address.replace(":", "_")


def scan_mode(gw):
    status, body, _ = gw.get("/v1/scan")
    assert status == 200, body
    return body.get("mode")


def devices(gw):
    return {d["id"]: d for d in gw.get("/v1/devices")[1]["devices"]}


def sensor(gw):
    status, body, _ = gw.get(f"/v1/sensors/{SENSOR}")
    return body if status == 200 else None


def test_a_passive_scan_hears_advertisements_without_scan_responses_and_connects(tmp_path):
    gw = start(tmp_path)
    try:
        status, body, _ = gw.post("/v1/scan", {"active": False})
        assert status == 200, body
        assert body["scanning"] and body["mode"] == "passive" and body["filters"]["active"] is False, body
        # The sensor's reading decodes from what the monitor heard.
        heard = wait_for(lambda: sensor(gw), 5)
        assert heard, gw.log[-20:]
        assert heard["reading"]["measurements"] == {"temperature": {"value": 25, "unit": "°C"},
                                                    "humidity": {"value": 50.55, "unit": "%"}}
        listed = wait_for(lambda: devices(gw).get(PERIPH), 5)
        assert listed, devices(gw)
        # No scan request went out: the name in the scan response is not known; the advertisement's data is.
        assert listed.get("name") is None and listed["advertisement"].get("localName") is None, listed
        assert listed["advertisement"]["manufacturerData"] == {"65535": "3336"} and "stale" not in listed, listed
        assert devices(gw)[SENSOR].get("name") == "Passive BTHome"
        # BlueZ ran no discovery and knows neither device; the scan says passive.
        assert gw.call_count("StartDiscovery", "") == 0
        objects = bluez_objects(gw)
        assert device_path(PERIPH) not in objects and device_path(SENSOR) not in objects, objects
        assert scan_mode(gw) == "passive"
        assert any("advertisement monitor 1 added on hci0" in line for line in gw.log), gw.log[-20:]

        # A device heard only passively connects: a short discovery makes BlueZ learn it.
        status, body, _ = gw.post(f"/v1/devices/{PERIPH}/connect", {"timeout": 15})
        assert status == 200, body
        assert body["state"] == "connected", body
        status, value, _ = gw.get(f"/v1/devices/{PERIPH}/characteristics/2a19/value")
        assert status == 200 and value["value"] == "5d", value
        assert gw.post(f"/v1/devices/{PERIPH}/disconnect")[0] == 200
        # The connect's discovery over, the scan is passive again.
        assert wait_for(lambda: scan_mode(gw) == "passive", 10), gw.get("/v1/scan")

        # The watch (active) beside it: the controller scans actively, and the scan says so.
        assert gw.request("PUT", "/v1/watch", {})[0] == 200
        assert wait_for(lambda: scan_mode(gw) == "active", 5)
        assert gw.delete("/v1/watch")[0] == 200
        assert wait_for(lambda: scan_mode(gw) == "passive", 5)

        status, body, _ = gw.delete("/v1/scan")
        assert status == 200 and not body["scanning"] and "mode" not in body, body
        assert wait_for(lambda: any("advertisement monitor 1 removed on hci0" in line for line in gw.log), 5), gw.log[-20:]
    finally:
        gw.stop()


def test_a_passive_watch_decodes_sensors_and_says_passive(tmp_path):
    gw = start(tmp_path)
    try:
        status, body, _ = gw.request("PUT", "/v1/watch", {"active": False})
        assert status == 200, body
        assert body["mode"] == "passive" and body["discovering"] and body["filters"] == {"active": False}, body
        assert wait_for(lambda: sensor(gw), 5), gw.log[-20:]
        assert gw.call_count("StartDiscovery", "") == 0
        assert gw.get("/v1/watch")[1]["mode"] == "passive"
    finally:
        gw.stop()


def test_on_the_dbus_path_a_passive_scan_is_refused_and_a_passive_watch_scans_actively(tmp_path):
    gw = start(tmp_path, "--advertisements", "dbus")
    try:
        status, body, _ = gw.post("/v1/scan", {"active": False})
        assert status == 501 and body["error"]["name"] == "operationNotSupported", body
        assert "only on the kernel's advertisement path" in body["error"]["message"], body
        status, body, _ = gw.request("PUT", "/v1/watch", {"active": False})
        assert status == 200 and body["mode"] == "active", body
        assert wait_for(lambda: sensor(gw), 5)
    finally:
        gw.stop()


def test_the_proxy_scans_passively_when_home_assistant_asks(tmp_path):
    gw = start(tmp_path, "--esphome-api", "127.0.0.1:0")
    try:
        async def scenario():
            api = await connected(esphome_port(gw))
            states, reports, phase = [], [], ["active"]
            api.subscribe_bluetooth_scanner_state(lambda s: states.append((s.state, s.mode, s.configured_mode)))
            api.subscribe_bluetooth_le_raw_advertisements(
                lambda r: reports.extend((phase[0], a.address, bytes(a.data)) for a in r.advertisements))


            async def ask(mode):
                """Asks for `mode`; back once the state told says it (at most 5 s)."""
                phase[0] = "asking"
                api.bluetooth_scanner_set_mode(mode)
                for _ in range(50):
                    if states and states[-1][1] == mode:
                        return
                    await asyncio.sleep(0.1)

            await asyncio.sleep(1.5)
            await ask(BluetoothScannerMode.PASSIVE)
            watch = gw.get("/v1/watch")[1]
            phase[0] = "passive"
            await asyncio.sleep(1.5)
            await ask(BluetoothScannerMode.ACTIVE)
            await api.disconnect()
            return states, reports, watch

        states, reports, watch = asyncio.run(asyncio.wait_for(scenario(), 60))
    finally:
        gw.stop()
    assert states[0][1:] == (BluetoothScannerMode.ACTIVE, BluetoothScannerMode.ACTIVE), states
    assert (states[-1][1], states[-1][2]) == (BluetoothScannerMode.ACTIVE, BluetoothScannerMode.ACTIVE), states
    passive = [s for s in states if s[1] == BluetoothScannerMode.PASSIVE]
    assert passive and all(s[2] == BluetoothScannerMode.ACTIVE for s in passive), states
    assert watch["mode"] == "passive" and watch["filters"] == {"active": False}, watch
    periph = address_int(PERIPH)
    names = {phase: [any(t == 0x09 for t, _ in ad_structures(d)) for p, a, d in reports if a == periph and p == phase]
             for phase in ("active", "passive")}
    # Actively the scan response's name comes merged with the advertisement; passively never.
    assert names["active"] and all(names["active"]), names
    assert names["passive"] and not any(names["passive"]), names


def monitors_on_hci0(path):
    """The advertisement monitors hci0 has, asked on a management stream of the simulator's
    (Read Advertisement Monitor Features), as a client of the kernel's socket asks."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.connect(path)
        s.settimeout(5)
        s.send(struct.pack("<HHH", 0x0051, 0, 0))
        while True:
            frame = s.recv(4096)
            if frame[:2] == b"\x01\x00" and frame[6:9] == b"\x51\x00\x00":
                count = struct.unpack_from("<H", frame, 9 + 11)[0]
                return list(struct.unpack_from(f"<{count}H", frame, 9 + 13))


def test_gattways_monitor_is_removed_when_it_stops(tmp_path):
    """The kernel keeps a monitor until it is removed, not when the socket that added it closes
    (measured in the lab, Linux 6.1; the simulator does the same): gattway removes its own as it
    shuts down (SIGTERM)."""
    sim = Simulator(tmp_path)
    gw = Gateway(["--management-socket", sim.socket, "--no-watch"], env={"DBUS_SYSTEM_BUS_ADDRESS": sim.bus})
    try:
        status, body, _ = gw.post("/v1/scan", {"active": False})
        assert status == 200 and body["mode"] == "passive", body
        assert monitors_on_hci0(sim.socket) == [1]
        assert gw.stop() == 0
        assert monitors_on_hci0(sim.socket) == []
    finally:
        gw.stop()
        sim.stop()


def test_a_killed_gattways_monitor_is_removed_by_the_next_with_the_same_state_dir(tmp_path):
    """A gattway killed while it scans passively (SIGKILL; the packaged service's watchdog kills
    a wedged one) cannot remove its monitor, and the kernel keeps it: restarted so again and
    again, the controller would fill up (32 monitors) and scan passively for nobody. gattway
    writes its monitors down in the state directory; the next one there removes the one left
    before it adds its own, so the controller has one monitor, not two."""
    sim = Simulator(tmp_path)
    args = ["--management-socket", sim.socket, "--no-watch", "--state-dir", str(tmp_path / "state")]
    env = {"DBUS_SYSTEM_BUS_ADDRESS": sim.bus}
    started = []

    def gattway(args):
        started.append(Gateway(args, env=env))
        return started[-1]

    try:
        first = gattway(args)
        status, body, _ = first.post("/v1/scan", {"active": False})
        assert status == 200 and body["mode"] == "passive", body
        assert monitors_on_hci0(sim.socket) == [1]
        first.proc.kill()
        first.proc.wait(10)
        assert monitors_on_hci0(sim.socket) == [1]

        again = gattway(args)
        status, body, _ = again.post("/v1/scan", {"active": False})
        assert status == 200 and body["mode"] == "passive", body
        assert monitors_on_hci0(sim.socket) == [1], again.log[-10:]
        assert any("advertisement monitor 1 removed on hci0 (left by a gattway" in line for line in again.log), again.log
        assert again.stop() == 0
        assert monitors_on_hci0(sim.socket) == []
        # A monitor not written down (another program's, or a killed gattway's that had no state
        # directory) is left alone, and said.
        lost = gattway(["--management-socket", sim.socket, "--no-watch"])
        assert lost.post("/v1/scan", {"active": False})[0] == 200
        lost.proc.kill()
        lost.proc.wait(10)
        unwritten = gattway(args)
        assert unwritten.post("/v1/scan", {"active": False})[0] == 200
        assert monitors_on_hci0(sim.socket) == [1, 2]
        assert any("hci0 has monitors 1 already" in line for line in unwritten.log), unwritten.log
    finally:
        for gw in started:
            gw.stop()
        sim.stop()


def watch(gw):
    status, body, _ = gw.get("/v1/watch")
    assert status == 200, body
    return body


def test_a_passive_watch_follows_the_adapter_off_and_on_and_plugged_in_again(tmp_path):
    """The monitors follow the adapters usable: none while hci0 is off, one once it is on, one
    again after it was unplugged (the kernel drops a controller's monitors with it) and plugged in."""
    gw = start(tmp_path)
    try:
        gw.simulator("SetAdapterPowered", "string:hci0", "boolean:false")
        assert wait_for(lambda: gw.get("/v1/state")[1]["state"] == "poweredOff", 5)
        status, body, _ = gw.request("PUT", "/v1/watch", {"active": False})
        assert status == 200 and not body["discovering"], body
        gw.simulator("SetAdapterPowered", "string:hci0", "boolean:true")
        assert wait_for(lambda: watch(gw).get("mode") == "passive" and watch(gw)["discovering"], 5), (watch(gw), gw.log[-10:])
        assert wait_for(lambda: sensor(gw), 5)
        gw.simulator("RemoveAdapter", "string:hci0")
        assert wait_for(lambda: not watch(gw)["discovering"], 5), watch(gw)
        gw.simulator("AddAdapter", "string:hci0")
        assert wait_for(lambda: watch(gw).get("mode") == "passive" and watch(gw)["discovering"], 5), (watch(gw), gw.log[-10:])
        added = [line for line in gw.log if "advertisement monitor" in line and "added on hci0" in line]
        assert len(added) == 2, gw.log[-30:]
        assert gw.call_count("StartDiscovery", "") == 0
    finally:
        gw.stop()
