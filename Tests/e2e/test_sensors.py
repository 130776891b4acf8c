"""Issue 13: decoded sensors, against `gattway --simulate FILE` with devices that advertise the
specifications' own payloads (those of Tests/SensorsTests)."""
import asyncio
import json
import os
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
