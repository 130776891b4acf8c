"""Issue 34: gattway as a BLE peripheral, defined over REST, on the simulator's hci0; the remote
centrals on hci1 are bleak (unchanged) and gattway's own central (the same gattway, through REST
on both sides). bleak scans the advertisement with its data, connects, reads a static value, reads
a value a WebSocket client answers (a claim), writes (the client sees the event), subscribes and
gets what `PUT …/value` sets, in order. An iBeacon preset is decoded by gattway's own scanner; the
definitions outlive a restart with `--state-dir`; bad definitions get 400 with the reason."""
import asyncio
import json
import os
import shutil
import tempfile
import threading
import time

import pytest
from websockets.sync.client import connect as ws_connect

from conftest import Gateway, wait_for
from targets import current
from test_reconnect import SSE

pytestmark = pytest.mark.skipif(current()["name"] != "simulator", reason="the simulator's two adapters (GATTWAY_TARGET=simulator)")

HCI0, HCI1 = "00:1A:7D:DA:71:13", "00:1A:7D:DA:71:14"
SERVICE = "5a1e0001-0000-4000-8000-00805f9b34fb"
GREETING = "5a1e0002-0000-4000-8000-00805f9b34fb"   # read, write, notify: a stored value
ANSWERED = "5a1e0003-0000-4000-8000-00805f9b34fb"   # read, write: claimed by a WebSocket client
INDICATED = "5a1e0004-0000-4000-8000-00805f9b34fb"  # read, indicate
DEFINITION = {
    "uuid": SERVICE, "primary": True, "adapter": "hci0", "characteristics": [
        {"uuid": GREETING, "properties": ["read", "write", "notify"], "permissions": ["readable", "writeable"],
         "value": "hello", "format": "utf8", "descriptors": [{"uuid": "2901", "value": "Greeting", "format": "utf8"}]},
        {"uuid": ANSWERED, "properties": ["read", "write"], "value": "unanswered", "format": "utf8"},
        {"uuid": INDICATED, "properties": ["read", "indicate"], "value": "0", "format": "utf8"},
    ]}
ADVERTISEMENT = {"localName": "gattway-demo", "serviceUUIDs": [SERVICE], "manufacturerData": {"65535": "cafe"},
                 "connectable": True, "adapter": "hci0"}


@pytest.fixture
def gw():
    from test_adapters import configuration

    path = configuration()
    gw = Gateway(["--simulate", path])
    yield gw
    gw.stop()
    os.remove(path)


def serve(gw, advertisement=ADVERTISEMENT):
    status, body, _ = gw.post("/v1/peripheral/services", DEFINITION)
    assert status == 201 and body["registered"] and body["adapter"] == "hci0", body
    status, body, _ = gw.post("/v1/peripheral/advertisements", advertisement)
    assert status == 201 and body["registered"], body
    return body


def put(gw, char, value):
    status, body, _ = gw.request("PUT", f"/v1/peripheral/characteristics/{char}/value", {"value": value, "format": "utf8"})
    assert status == 200, body
    return body


class Claimer:
    """A WebSocket client that claims ANSWERED and answers each read with `answer`, on a thread."""

    def __init__(self, gw, answer):
        self.ws = ws_connect(gw.base.replace("http", "ws", 1) + "/v1/ws")
        self.ws.send(json.dumps({"op": "claim", "id": "c", "characteristic": ANSWERED, "format": "utf8"}))
        ack = json.loads(self.ws.recv(timeout=10))
        assert ack["op"] == "ack" and ack["subscription"], ack
        self.answer, self.requests = answer, []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        try:
            for raw in self.ws:
                msg = json.loads(raw)
                if msg.get("type") in ("peripheralRead", "peripheralWrite"):
                    self.requests.append(msg)
                    if "request" in msg:
                        self.ws.send(json.dumps({"op": "respond", "id": msg["request"], "request": msg["request"],
                                                 "value": self.answer, "format": "utf8"}
                                                if msg["type"] == "peripheralRead" else
                                                {"op": "respond", "id": msg["request"], "request": msg["request"]}))
        except Exception:
            pass

    def close(self):
        self.ws.close()


def test_bleak_on_another_adapter_uses_gattways_peripheral(gw, monkeypatch):
    from bleak import BleakClient, BleakScanner

    serve(gw)
    claimer = Claimer(gw, "21.5")
    writes = SSE(gw, "types=peripheralWrite,subscribed,unsubscribed,centralConnected,centralDisconnected&format=utf8")
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", gw.bus)

    async def central():
        device, data = None, None
        async with BleakScanner(bluez={"adapter": "hci1"}) as scanner:
            async for d, adv in scanner.advertisement_data():
                if d.address == HCI0:
                    device, data = d, adv
                    break
        assert data.local_name == "gattway-demo" and SERVICE in data.service_uuids, data
        assert data.manufacturer_data.get(0xFFFF) == bytes.fromhex("cafe"), data
        got = []
        async with BleakClient(device, bluez={"adapter": "hci1"}) as client:
            assert await client.read_gatt_char(GREETING) == b"hello"
            assert await client.read_gatt_char(ANSWERED) == b"21.5"  # the WebSocket client's answer
            await client.write_gatt_char(GREETING, b"hi there", response=True)
            await client.start_notify(GREETING, lambda _, value: got.append(bytes(value)))
            assert await asyncio.to_thread(writes.wait, lambda e: e["type"] == "subscribed", 5)
            for value in ("1", "2", "3"):
                assert put(gw, GREETING, value)["sent"] is True
            deadline = time.monotonic() + 5
            while len(got) < 3 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert got == [b"1", b"2", b"3"], got
            await client.stop_notify(GREETING)
        return got

    try:
        asyncio.run(asyncio.wait_for(central(), 60))
        write = writes.wait(lambda e: e["type"] == "peripheralWrite", 5)
        assert write and write["value"] == "hi there" and write["central"] == HCI1 and write["characteristic"]["uuid"] == GREETING, writes.events
        assert writes.wait(lambda e: e["type"] == "centralConnected" and e["central"] == HCI1, 5), writes.events
        assert writes.wait(lambda e: e["type"] == "unsubscribed" and e["characteristic"]["uuid"] == GREETING, 5), writes.events
        assert writes.wait(lambda e: e["type"] == "centralDisconnected" and e["central"] == HCI1, 5), writes.events
        read = next(r for r in claimer.requests if r["type"] == "peripheralRead")
        assert read["central"] == HCI1 and read["request"], claimer.requests
        # The stored value is what the last PUT set; the central's write had set it before.
        assert gw.get(f"/v1/peripheral/characteristics/{GREETING}/value?format=utf8")[1]["value"] == "3"
    finally:
        claimer.close()


def test_gattways_own_central_on_hci1_reaches_its_peripheral_on_hci0(gw):
    serve(gw)
    events = SSE(gw, "types=notification,peripheralWrite,indicationConfirmed&format=utf8")
    gw.discover(HCI0, timeout=10)
    device = gw.get(f"/v1/devices/{HCI0}")[1]
    assert device["name"] == "gattway-demo", device
    status, body, _ = gw.post(f"/v1/devices/{HCI0}/connect", {"timeout": 10, "adapter": "hci1"})
    assert status == 200 and body["state"] == "connected" and body["adapter"] == "hci1", body
    status, body, _ = gw.get(f"/v1/devices/{HCI0}/characteristics/{GREETING}/value?format=utf8")
    assert status == 200 and body["value"] == "hello", body
    status, body, _ = gw.request("PUT", f"/v1/devices/{HCI0}/characteristics/{GREETING}/value",
                                 {"value": "from hci1", "format": "utf8", "withResponse": True})
    assert status == 200, body
    assert events.wait(lambda e: e["type"] == "peripheralWrite" and e["value"] == "from hci1", 5), events.events
    assert gw.get(f"/v1/peripheral/characteristics/{GREETING}/value?format=utf8")[1]["value"] == "from hci1"
    status, body, _ = gw.post(f"/v1/devices/{HCI0}/characteristics/{GREETING}/notifications")
    assert status == 200, body
    assert wait_for(lambda: gw.get("/v1/peripheral")[1]["services"][0]["characteristics"][0]["subscribed"], 5)
    assert put(gw, GREETING, "notified")["sent"] is True
    assert events.wait(lambda e: e["type"] == "notification" and e["device"] == HCI0 and e["value"] == "notified", 5), events.events
    # An indication: the central confirms it.
    assert gw.post(f"/v1/devices/{HCI0}/characteristics/{INDICATED}/notifications")[0] == 200
    assert wait_for(lambda: gw.get("/v1/peripheral")[1]["services"][0]["characteristics"][2]["subscribed"], 5)
    assert put(gw, INDICATED, "7")["sent"] is True
    assert events.wait(lambda e: e["type"] == "notification" and e["value"] == "7", 5), events.events
    assert events.wait(lambda e: e["type"] == "indicationConfirmed" and e["characteristic"]["uuid"] == INDICATED, 5), events.events
    centrals = gw.get("/v1/peripheral")[1]["centrals"]
    assert centrals == [{"address": HCI1, "adapter": "hci0"}], centrals
    assert gw.post(f"/v1/devices/{HCI0}/disconnect", {})[0] == 200


def test_an_ibeacon_preset_is_decoded_by_gattways_own_scanner(gw):
    status, body, _ = gw.post("/v1/peripheral/advertisements", {
        "iBeacon": {"uuid": "e2c56db5-dffb-48d2-b060-d0f5a71096e0", "major": 7, "minor": 9, "measuredPower": -59},
        "adapter": "hci0"})
    assert status == 201, body
    gw.discover(HCI0, timeout=10)
    assert wait_for(lambda: gw.get(f"/v1/sensors/{HCI0}")[0] == 200, 10)
    reading = gw.get(f"/v1/sensors/{HCI0}")[1]["reading"]
    assert reading["format"] == "ibeacon", reading
    m = reading["measurements"]
    assert (m["major"]["value"], m["minor"]["value"], m["uuid"]["value"]) == (7, 9, "e2c56db5-dffb-48d2-b060-d0f5a71096e0"), m
    # Not connectable: a beacon.
    assert gw.get(f"/v1/devices/{HCI0}")[1].get("advertisement", {}).get("localName") is None


@pytest.mark.parametrize("definition, reason", [
    ({"uuid": "1812", "characteristics": [{"uuid": "2a4d", "properties": ["read"]}]}, "blocklist"),
    ({"uuid": SERVICE, "characteristics": [{"uuid": GREETING, "properties": ["fly"]}]}, "unknown property"),
    ({"uuid": SERVICE, "characteristics": [{"uuid": GREETING, "properties": ["notify"], "descriptors": [{"uuid": "2902"}]}]}, "the stack's"),
    ({"uuid": SERVICE, "characteristics": [{"uuid": GREETING, "properties": ["read"], "value": "00" * 513}]}, "at most 512"),
])
def test_bad_definitions_are_refused_with_the_reason_and_nothing_is_served(gw, definition, reason):
    status, body, _ = gw.post("/v1/peripheral/services", definition)
    assert status in (400, 403) and reason in body["error"]["message"], body
    assert gw.get("/v1/peripheral")[1]["services"] == []


def test_definitions_outlive_a_restart_with_a_state_dir():
    from test_adapters import configuration

    path, state = configuration(), tempfile.mkdtemp()
    try:
        first = Gateway(["--simulate", path, "--state-dir", state])
        try:
            serve(first)
        finally:
            first.stop()
        again = Gateway(["--simulate", path, "--state-dir", state])
        try:
            # The kept service is defined first, then the advertisement: each shows when it is back,
            # the service before BlueZ has registered it.
            back = lambda p: p["services"] and p["services"][0]["registered"] and p["advertisements"]
            assert wait_for(lambda: back(again.get("/v1/peripheral")[1]), 10), again.get("/v1/peripheral")[1]
            p = again.get("/v1/peripheral?format=utf8")[1]
            assert [s["uuid"] for s in p["services"]] == [SERVICE] and p["services"][0]["registered"], p
            assert p["services"][0]["characteristics"][0]["value"] == "hello", p
            assert [a.get("localName") for a in p["advertisements"]] == ["gattway-demo"], p
        finally:
            again.stop()
    finally:
        os.remove(path)
        shutil.rmtree(state)


def test_advertisements_past_the_controllers_room_get_a_clear_error(gw):
    free = gw.get("/v1/peripheral")[1]["adapters"]["hci0"]["availableInstances"]
    assert free >= 1
    for n in range(free):
        status, body, _ = gw.post("/v1/peripheral/advertisements", {"localName": f"gattway-{n}", "adapter": "hci0"})
        assert status == 201, body
    assert gw.get("/v1/peripheral")[1]["adapters"]["hci0"] == {"availableInstances": 0, "activeInstances": free}
    status, body, _ = gw.post("/v1/peripheral/advertisements", {"localName": "one too many", "adapter": "hci0"})
    assert status == 503 and body["error"]["name"] == "outOfSpace", body
    assert "SupportedInstances" in body["error"]["message"] or "advertisements" in body["error"]["message"], body
    # Stopping one makes room again.
    first = gw.get("/v1/peripheral")[1]["advertisements"][0]["id"]
    assert gw.delete(f"/v1/peripheral/advertisements/{first}")[0] == 200
    assert gw.post("/v1/peripheral/advertisements", {"localName": "room again", "adapter": "hci0"})[0] == 201
