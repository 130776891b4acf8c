"""Issue 13: decoded sensors, against `gattway --simulate FILE` with devices that advertise the
specifications' own payloads (those of Tests/SensorsTests), and against `gattway --simulate` with
its built-in sensors: every one decodes, in the units and ranges the simulator gives its values,
the encrypted ones only with their key (read again on SIGHUP), and their `sensor` events."""
import asyncio
import json
import os
import signal
import subprocess
import threading
import time

import pytest
import websockets

from conftest import Gateway, binary, wait_for
from test_streams import sse_events, subscribe, ws_url

THERMOMETER = "A4:C1:38:00:00:01"
# bthome.io/encryption's example: its device, key and service data.
ENCRYPTED = "54:48:E6:8F:80:A5"
KEY = "231d39c1d7cc1ab1aee224cd096db932"
BEACON = "F0:00:00:00:00:09"

DEVICES = {"devices": [
    # bthome.io/format's opening example with a packet id: 25.00 °C, 50.55 %.
    {"address": THERMOMETER, "name": "Sim BTHome", "connectable": False, "advertisingIntervalMs": 200,
     "serviceData": {"FCD2": "40000102C40903BF13"}},
    {"address": ENCRYPTED, "connectable": False, "advertisingIntervalMs": 200,
     "serviceData": {"FCD2": "41e445f3c9962b332211006c7c4519"}},
    # Nothing a decoder knows.
    {"address": BEACON, "connectable": False, "advertisingIntervalMs": 200, "manufacturerData": {"0xFFFF": "0102"}},
]}


def start(tmp_path, *args):
    config = tmp_path / "sensors.json"
    config.write_text(json.dumps(DEVICES))
    gw = Gateway(["--simulate", str(config), *args])
    assert gw.post("/v1/scan", {})[0] == 200
    return gw


@pytest.fixture
def sensors(tmp_path):
    gw = start(tmp_path)
    yield gw
    gw.stop()


def sensor(gw, address):
    status, body, _ = gw.get(f"/v1/sensors/{address}")
    return body if status == 200 else None


def set_thermometer(gw, hex_payload):
    gw.simulator("SetServiceData", "string:" + THERMOMETER, "string:fcd2",
                 "array:byte:" + ",".join(f"0x{hex_payload[i:i + 2]}" for i in range(0, len(hex_payload), 2)))


def test_sensors_are_listed_with_their_values_within_3_s(sensors):
    started = time.monotonic()
    listed = wait_for(lambda: {s["id"]: s for s in sensors.get("/v1/sensors")[1]["sensors"]}.get(THERMOMETER), 3)
    assert listed, "no reading within 3 s"
    assert time.monotonic() - started <= 3.1
    reading = listed["reading"]
    assert reading["format"] == "bthome" and reading["packetId"] == 1 and reading["encryption"] == "none"
    assert reading["measurements"] == {"temperature": {"value": 25, "unit": "°C"},
                                       "humidity": {"value": 50.55, "unit": "%"}}
    assert 0 <= listed["age"] < 3 and listed["name"] == "Sim BTHome" and "stale" not in listed
    ids = [s["id"] for s in sensors.get("/v1/sensors")[1]["sensors"]]
    assert BEACON not in ids and ids == sorted(ids)
    _, device, _ = sensors.get(f"/v1/devices/{THERMOMETER}")
    assert device["sensor"] == reading


def test_values_change_when_the_device_advertises_new_ones(sensors):
    assert wait_for(lambda: sensor(sensors, THERMOMETER), 3)
    set_thermometer(sensors, "40000202CA0903BF13")  # 25.06 °C
    changed = wait_for(lambda: (sensor(sensors, THERMOMETER) or {}).get("reading", {}).get("packetId") == 2, 3)
    assert changed
    assert sensor(sensors, THERMOMETER)["reading"]["measurements"]["temperature"] == {"value": 25.06, "unit": "°C"}


def test_a_sensor_event_arrives_over_sse_when_a_value_changes(sensors):
    assert wait_for(lambda: sensor(sensors, THERMOMETER), 3)
    got, opened = [], threading.Event()
    reader = threading.Thread(target=lambda: got.extend(sse_events(sensors, f"types=sensor&device={THERMOMETER}", 1, 5, opened=opened)))
    reader.start()
    assert opened.wait(5)
    set_thermometer(sensors, "40000302CA0903BF13")
    reader.join(6)
    assert len(got) == 1, got
    event = got[0]
    assert event["event"] == "sensor" and event["data"]["device"] == THERMOMETER and event["data"]["changed"] is True
    assert event["data"]["sensor"]["packetId"] == 3
    assert event["data"]["sensor"]["measurements"]["temperature"]["value"] == 25.06


def test_websocket_gets_every_packet_when_asked(sensors):
    assert wait_for(lambda: sensor(sensors, THERMOMETER), 3)

    async def run():
        async with websockets.connect(ws_url(sensors)) as ws:
            changes = await subscribe(ws, "1", types=["sensor"], device=THERMOMETER)
            every = await subscribe(ws, "2", types=["sensor"], device=THERMOMETER, everyPacket=True)
            # A new packet with the same values, then one with a new temperature.
            set_thermometer(sensors, "40000402C40903BF13")
            await asyncio.sleep(0.6)
            set_thermometer(sensors, "40000502CA0903BF13")
            got = []
            deadline = time.monotonic() + 5
            while len(got) < 3 and time.monotonic() < deadline:
                msg = json.loads(await asyncio.wait_for(ws.recv(), 5))
                if msg.get("type") == "sensor":
                    got.append(msg)
            return changes, every, got

    changes, every, got = asyncio.run(run())
    seen = [(m["subscription"], m["sensor"]["packetId"], m["changed"]) for m in got]
    assert sorted(seen) == sorted([(every, 4, False), (every, 5, True), (changes, 5, True)])


@pytest.mark.parametrize("with_key", [False, True])
def test_an_encrypted_bthome_device_decodes_only_with_its_key(tmp_path, with_key):
    args = []
    if with_key:
        keys = tmp_path / "keys.txt"
        keys.write_text(f"# bthome.io/encryption\n{ENCRYPTED} {KEY}\n")
        args = ["--sensor-keys", str(keys)]
    gw = start(tmp_path, *args)
    try:
        found = wait_for(lambda: sensor(gw, ENCRYPTED), 3)
        assert found
        reading = found["reading"]
        assert reading["encrypted"] is True
        if with_key:
            assert reading["encryption"] == "decrypted"
            assert reading["measurements"] == {"temperature": {"value": 25.06, "unit": "°C"},
                                               "humidity": {"value": 50.55, "unit": "%"}}
        else:
            assert reading["encryption"] == "missing-key" and reading["measurements"] == {}
    finally:
        gw.stop()


def test_an_unknown_or_undecoded_device_is_404(sensors):
    assert wait_for(lambda: BEACON in {d["id"] for d in sensors.get("/v1/devices")[1]["devices"]}, 3)
    for address in (BEACON, "F0:00:00:00:00:42"):
        status, body, _ = sensors.get(f"/v1/sensors/{address}")
        assert status == 404
        assert body["error"]["name"] == "unknownDevice" and body["error"]["code"] == 12


def test_a_bad_key_file_is_a_start_up_error_with_its_line(tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text(f"{ENCRYPTED} {KEY}\n{ENCRYPTED} nothex\n")
    out = subprocess.run([binary("gattway"), "--simulate", "--state-dir", "none", "--sensor-keys", str(keys)],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert f"{keys}:2: the key of {ENCRYPTED} is not 32 hex digits" in out.stderr


# The simulator's built-in sensors (Sources/Simulator/SimulatorConfiguration+BuiltIn.swift): what
# each decodes to, as the simulator defines its values (Climate: 15 to 30 °C, 30 to 70 %, 980 to
# 1040 hPa, battery 10 to 100 % at 2.2 V + 8 mV per %, acceleration within ±1.1 G). Each entry:
# measurement name -> (unit, lowest, highest); booleans are (None, False, False).
DEMO_KEY = "676174747761792064656d6f206b6579"  # "gattway demo key"
T, H, B = ("°C", 15, 30), ("%", 30, 70), ("%", 10, 100)
MV, V = ("mV", 2280, 3000), ("V", 2.28, 3.0)
FLAG = (None, False, False)
BUILT_IN = {
    "F0:00:00:00:00:06": ("bthome", False, {"temperature": T, "humidity": H, "pressure": ("hPa", 980, 1040),
                                            "battery": B, "voltage": V}),
    "F0:00:00:00:00:07": ("bthome", True, {"temperature": T, "humidity": H, "pressure": ("hPa", 980, 1040),
                                           "battery": B, "voltage": V}),
    "F0:00:00:00:00:08": ("atc1441", False, {"temperature": T, "humidity": H, "battery": B, "voltage": MV}),
    "F0:00:00:00:00:09": ("pvvx", False, {"temperature": T, "humidity": H, "battery": B, "voltage": MV,
                                          "reed_switch": FLAG, "trigger_output": FLAG, "trigger_controlled": FLAG,
                                          "temperature_trigger": FLAG, "humidity_trigger": FLAG}),
    "F0:00:00:00:00:0A": ("mibeacon", False, {"temperature": T, "humidity": H, "battery": B}),
    "F0:00:00:00:00:0B": ("ruuvi-rawv2", False, {"temperature": T, "humidity": H, "pressure": ("Pa", 98000, 104000),
                                                 "acceleration_x": ("G", -1.1, 1.1), "acceleration_y": ("G", -1.1, 1.1),
                                                 "acceleration_z": ("G", -1.1, 1.1), "voltage": V,
                                                 "tx_power": ("dBm", 4, 4), "movement_counter": (None, 0, 0)}),
    "F0:00:00:00:00:0C": ("mibeacon", True, {"temperature": T, "humidity": H}),
    "F0:00:00:00:00:0D": ("eddystone-tlm", False, {"voltage": MV, "temperature": T,
                                                   "advertisement_count": (None, 1, 2**32 - 1),
                                                   "uptime": ("s", 0, 86400)}),
}
ENCRYPTED_BUILT_IN = [a for a, (_, encrypted, _) in BUILT_IN.items() if encrypted]


def built_in(tmp_path, keys=None, *args):
    """`gattway --simulate` scanning, with a --sensor-keys file of `keys` ({address: key}) if given."""
    extra = list(args)
    if keys is not None:
        path = tmp_path / "keys.txt"
        path.write_text("".join(f"{address} {key}\n" for address, key in keys.items()))
        extra += ["--sensor-keys", str(path)]
    gw = Gateway(["--simulate", *extra])
    assert gw.post("/v1/scan", {})[0] == 200
    return gw


def all_sensors(gw):
    """Every built-in sensor's listing, once all are listed; else None."""
    listed = {s["id"]: s for s in gw.get("/v1/sensors")[1]["sensors"]}
    return listed if set(BUILT_IN) <= set(listed) else None


def check_reading(address, reading, decrypted):
    form, encrypted, spec = BUILT_IN[address]
    assert reading["format"] == form and reading["encrypted"] is encrypted, (address, reading)
    if encrypted and not decrypted:
        return
    assert reading["encryption"] == ("decrypted" if encrypted else "none"), (address, reading)
    measurements = reading["measurements"]
    assert set(measurements) == set(spec), (address, measurements)
    for name, (unit, low, high) in spec.items():
        measurement = measurements[name]
        assert measurement.get("unit") == unit, (address, name, measurement)
        value = measurement["value"]
        if isinstance(low, bool):
            assert value is low, (address, name, value)
        else:
            assert not isinstance(value, bool) and low <= value <= high, (address, name, value)


def test_every_built_in_sensor_decodes_with_its_values_and_they_change(tmp_path):
    gw = built_in(tmp_path, {a: DEMO_KEY for a in ENCRYPTED_BUILT_IN})
    try:
        first = wait_for(lambda: all_sensors(gw), 5)
        assert first, gw.get("/v1/sensors")[1]
        for address, listed in first.items():
            if address in BUILT_IN:
                check_reading(address, listed["reading"], decrypted=True)
        # Each measures anew every 2 to 3 s: a new packet (or, for TLM, a longer uptime) and a
        # temperature at least 0.1 °C away.
        def moved(address, earlier, later):
            if BUILT_IN[address][0] == "eddystone-tlm":
                return later["measurements"]["uptime"]["value"] > earlier["measurements"]["uptime"]["value"]
            return later.get("packetId") != earlier.get("packetId")

        def all_moved():
            now = all_sensors(gw)
            return now if now and all(moved(a, first[a]["reading"], now[a]["reading"]) for a in BUILT_IN) else None

        later = wait_for(all_moved, 8)
        assert later, "not every sensor measured anew within 8 s"
        for address in BUILT_IN:
            check_reading(address, later[address]["reading"], decrypted=True)
            before, after = first[address]["reading"]["measurements"], later[address]["reading"]["measurements"]
            assert after["temperature"]["value"] != before["temperature"]["value"], address
    finally:
        gw.stop()


@pytest.mark.parametrize("key", [None, "00112233445566778899aabbccddeeff"], ids=["no-key", "wrong-key"])
def test_the_encrypted_built_in_sensors_stay_undecoded_without_their_key(tmp_path, key):
    gw = built_in(tmp_path, None if key is None else {a: key for a in ENCRYPTED_BUILT_IN})
    try:
        listed = wait_for(lambda: all_sensors(gw), 5)
        assert listed
        for address in BUILT_IN:
            reading = listed[address]["reading"]
            check_reading(address, reading, decrypted=False)
            if address in ENCRYPTED_BUILT_IN:
                assert reading["encryption"] == ("missing-key" if key is None else "failed"), reading
                assert reading["measurements"] == {}
    finally:
        gw.stop()


def test_sighup_reads_the_sensor_keys_again(tmp_path):
    gw = built_in(tmp_path, {})
    keys = tmp_path / "keys.txt"
    try:
        def encryption_of(address):
            return (sensor(gw, address) or {}).get("reading", {}).get("encryption")

        assert wait_for(lambda: all(encryption_of(a) == "missing-key" for a in ENCRYPTED_BUILT_IN), 5)
        keys.write_text("# the simulator's demo key\n" + "".join(f"{a} {DEMO_KEY}\n" for a in ENCRYPTED_BUILT_IN))
        gw.proc.send_signal(signal.SIGHUP)
        assert wait_for(lambda: any(f"sensors: SIGHUP: 2 bind key(s) from {keys}" in l for l in gw.log), 5), gw.log[-5:]
        # Decoded again at once (a listing decodes what was heard with the new keys).
        assert wait_for(lambda: all(encryption_of(a) == "decrypted" for a in ENCRYPTED_BUILT_IN), 2)
        for address in ENCRYPTED_BUILT_IN:
            check_reading(address, sensor(gw, address)["reading"], decrypted=True)
        # A broken file keeps the keys in force, and says why.
        keys.write_text(f"{ENCRYPTED_BUILT_IN[0]} {DEMO_KEY}\n{ENCRYPTED_BUILT_IN[1]} nothex\n")
        gw.proc.send_signal(signal.SIGHUP)
        assert wait_for(lambda: any(f"sensors: SIGHUP: {keys}:2: the key of {ENCRYPTED_BUILT_IN[1]} is not 32 hex digits;"
                                    " keeping the 2 bind key(s) in force" in l for l in gw.log), 5), gw.log[-5:]
        packets = {a: sensor(gw, a)["reading"]["packetId"] for a in ENCRYPTED_BUILT_IN}
        assert wait_for(lambda: all(sensor(gw, a)["reading"].get("packetId") != packets[a] for a in ENCRYPTED_BUILT_IN), 8)
        assert all(encryption_of(a) == "decrypted" for a in ENCRYPTED_BUILT_IN)
        # A file that is gone keeps them too; an empty one removes them.
        keys.unlink()
        gw.proc.send_signal(signal.SIGHUP)
        assert wait_for(lambda: any("cannot read it" in l and "keeping the 2 bind key(s)" in l for l in gw.log), 5)
        keys.write_text("")
        gw.proc.send_signal(signal.SIGHUP)
        assert wait_for(lambda: any("sensors: SIGHUP: 0 bind key(s)" in l for l in gw.log), 5)
        assert wait_for(lambda: all(encryption_of(a) == "missing-key" for a in ENCRYPTED_BUILT_IN), 2)
    finally:
        gw.stop()


def packet_of(reading):
    """What tells one packet of a built-in sensor from the next: its packet id, or TLM's uptime."""
    return reading.get("packetId", reading["measurements"].get("uptime", {}).get("value"))


@pytest.mark.parametrize("address", ["F0:00:00:00:00:06", "F0:00:00:00:00:0C", "F0:00:00:00:00:0D"])
def test_built_in_sensor_events_on_sse_once_per_measurement(tmp_path, address):
    """Each measurement changes the temperature: one `sensor` event per new packet, never one per
    repeated advertisement (the devices advertise every second, measure every 2 to 3 s)."""
    gw = built_in(tmp_path, {a: DEMO_KEY for a in ENCRYPTED_BUILT_IN})
    try:
        assert wait_for(lambda: sensor(gw, address), 5)
        started = time.monotonic()
        events = sse_events(gw, f"types=sensor&device={address}", 3, 10)
        elapsed = time.monotonic() - started
        assert len(events) == 3, events
        packets = [packet_of(e["data"]["sensor"]) for e in events]
        assert len(set(packets)) == 3, packets
        # Three measurements 2 to 3 s apart: at least 4 s between the first and the third.
        assert elapsed >= 4, elapsed
        for event in events:
            assert event["event"] == "sensor" and event["data"]["device"] == address and event["data"]["changed"] is True
            check_reading(address, event["data"]["sensor"], decrypted=True)
    finally:
        gw.stop()


def test_built_in_sensor_events_on_websocket_by_change_and_every_packet(tmp_path):
    gw = built_in(tmp_path, {a: DEMO_KEY for a in ENCRYPTED_BUILT_IN})
    ruuvi, mibeacon = "F0:00:00:00:00:0B", "F0:00:00:00:00:0C"
    try:
        assert wait_for(lambda: all_sensors(gw), 5)

        async def run():
            async with websockets.connect(ws_url(gw)) as ws:
                changes = await subscribe(ws, "1", types=["sensor"], device=ruuvi)
                every = await subscribe(ws, "2", types=["sensor"], device=mibeacon, everyPacket=True)
                got = {changes: [], every: []}
                deadline = time.monotonic() + 10
                while min(len(v) for v in got.values()) < 2 and time.monotonic() < deadline:
                    msg = json.loads(await asyncio.wait_for(ws.recv(), 10))
                    if msg.get("type") == "sensor":
                        got[msg["subscription"]].append(msg)
                return changes, every, got

        changes, every, got = asyncio.run(run())
        for subscription, address in ((changes, ruuvi), (every, mibeacon)):
            messages = got[subscription]
            assert len(messages) >= 2, got
            assert all(m["device"] == address and m["changed"] is True for m in messages)
            packets = [m["sensor"]["packetId"] for m in messages]
            assert len(set(packets)) == len(packets), packets
            for m in messages:
                check_reading(address, m["sensor"], decrypted=True)
    finally:
        gw.stop()
