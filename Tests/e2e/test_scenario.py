"""One scenario, two targets: `GATTWAY_TARGET=simulator` (default) runs it against
`gattway --simulate`, `GATTWAY_TARGET=realbluez` against Debian's bluetoothd in the realbluez
VM. The expectations are the same; the target only names the devices."""
import time

import pytest

import targets
from conftest import Gateway, wait_for

T = targets.current()
SECURE_JW = "12345678-1234-5678-1234-56789abc0001"
SECURE_MITM = "12345678-1234-5678-1234-56789abc0002"


@pytest.fixture(scope="module")
def gw():
    gateway = Gateway(T["args"], env=T["env"])
    yield gateway
    for device in {T["heart_rate"], T["serial"], T["secure"]}:
        gateway.post(f"/v1/devices/{device}/disconnect")
    gateway.stop()


@pytest.fixture(autouse=True)
def timing(request):
    started = time.monotonic()
    yield
    print(f"\n[{T['name']}] {request.node.name}: {time.monotonic() - started:.2f} s")


def test_state(gw):
    _, body, _ = gw.get("/v1/state")
    assert body["state"] == "poweredOn" and body["code"] == 5


def test_only_the_chosen_adapter_is_used(gw):
    _, body, _ = gw.get("/v1/adapters")
    selected = [a["id"] for a in body["adapters"] if a["selected"]]
    assert selected == [T["args"][1] if T["name"] == "realbluez" else "hci0"]
    gw.post("/v1/scan", {})
    time.sleep(1.5)
    # Objects under other adapters never show: the VM's hci1 is the peripheral side, and it
    # knows our own adapter as a device.
    ours = next(a["address"] for a in body["adapters"] if a["selected"])
    assert ours not in {d["id"] for d in gw.get("/v1/devices")[1]["devices"]}
    gw.delete("/v1/scan")


def test_scan_with_a_service_filter_lists_the_device_with_advertisement_data(gw):
    status, _, _ = gw.post("/v1/scan", {"services": ["180d"]})
    assert status == 200
    found = wait_for(lambda: next((d for d in gw.get("/v1/devices")[1]["devices"] if d["id"] == T["heart_rate"]), None), 30)
    assert found, "the heart-rate device was not discovered"
    assert "0000180d-0000-1000-8000-00805f9b34fb" in found["advertisement"]["serviceUUIDs"]
    assert found["name"]
    assert all("0000180d-0000-1000-8000-00805f9b34fb" in d["advertisement"]["serviceUUIDs"]
               for d in gw.get("/v1/devices")[1]["devices"] if d["state"] != "connected")
    for device in {T["serial"], T["secure"]} - {T["heart_rate"]}:
        gw.post("/v1/scan", {})
        assert wait_for(lambda: any(d["id"] == device for d in gw.get("/v1/devices")[1]["devices"]), 30)
    gw.delete("/v1/scan")


def test_connect_and_full_service_tree(gw):
    for device in sorted({T["heart_rate"], T["serial"]}):
        status, body, _ = gw.post(f"/v1/devices/{device}/connect", {"timeout": T["connect_timeout"]})
        assert status == 200, body
        assert body["state"] == "connected"
    _, tree, _ = gw.get(f"/v1/devices/{T['heart_rate']}/gatt")
    uuids = {s["uuid"][4:8] for s in tree["services"]}
    assert {"180d", "180f", "180a"} <= uuids
    assert tree["maximumWriteValueLength"]["withResponse"] == 512


def test_read_battery_level_and_manufacturer_name(gw):
    _, battery, _ = gw.get(f"/v1/devices/{T['battery']}/characteristics/2a19/value")
    assert 0 <= int(battery["value"], 16) <= 100
    status, info, _ = gw.get(f"/v1/devices/{T['info']}/characteristics/2a29/value?format=utf8")
    assert status == 200, info
    assert info["value"] == T["manufacturer"]


def test_write_with_and_without_response(gw):
    path = f"/v1/devices/{T['serial']}/characteristics/ffe1/value"
    assert gw.request("PUT", path, {"value": "ping", "format": "utf8"})[0] == 200
    assert gw.get(path + "?format=utf8")[1]["value"] == "ping"
    assert gw.request("PUT", path, {"value": "pong", "format": "utf8", "withResponse": False})[0] == 200
    assert wait_for(lambda: gw.get(path + "?format=utf8")[1]["value"] == "pong", 5)


def test_notifications_can_be_turned_on_and_off(gw):
    base = f"/v1/devices/{T['heart_rate']}/characteristics/2a37"
    assert gw.post(base + "/notifications")[1]["isNotifying"] is True
    assert gw.delete(base + "/notifications")[1]["isNotifying"] is False


def test_write_echo_arrives_as_notification_on_a_websocket(gw):
    import asyncio, json, websockets

    async def run():
        async with websockets.connect(gw.base.replace("http://", "ws://") + "/v1/ws") as ws:
            await ws.send(json.dumps({"op": "subscribe", "id": "1", "device": T["serial"], "characteristic": "ffe1", "format": "utf8"}))
            assert json.loads(await asyncio.wait_for(ws.recv(), 10))["op"] == "ack"
            status, _, _ = gw.request("PUT", f"/v1/devices/{T['serial']}/characteristics/ffe1/value",
                                      {"value": "echo-me", "format": "utf8", "withResponse": False})
            assert status == 200
            while True:
                msg = json.loads(await asyncio.wait_for(ws.recv(), 5))
                if msg.get("type") == "notification" and msg["value"] == "echo-me":
                    return
    asyncio.run(run())


def test_heart_rate_notifications_on_sse(gw):
    from test_streams import sse_events
    started = time.monotonic()
    events = sse_events(gw, f"device={T['heart_rate']}&characteristic=2a37", 3, 5)
    assert [e["data"]["sequence"] for e in events] == [1, 2, 3]
    assert all(e["data"]["value"].startswith("06") for e in events)
    assert time.monotonic() - started < 4.5


def test_write_to_read_only_is_write_not_permitted(gw):
    status, body, _ = gw.request("PUT", f"/v1/devices/{T['battery']}/characteristics/2a19/value", {"value": "01"})
    assert status == 403
    assert body["error"]["domain"] == "CBATTErrorDomain" and body["error"]["code"] == 3


def test_duplicated_180a_is_an_ambiguity_error_listing_handles(gw):
    status, body, _ = gw.get(f"/v1/devices/{T['duplicated_180a']}/services/180a")
    _, services, _ = gw.get(f"/v1/devices/{T['duplicated_180a']}/services?uuids=180a")
    handles = [s["handle"] for s in services["services"]]
    assert len(handles) >= 2
    assert status == 400 and all(h in body["error"]["message"] for h in handles), body


def test_encrypted_read_succeeds_after_just_works_pairing(gw):
    if T["secure"] != T["heart_rate"]:
        assert gw.post(f"/v1/devices/{T['secure']}/connect", {"timeout": T["connect_timeout"]})[0] == 200
    status, body, _ = gw.get(f"/v1/devices/{T['secure']}/characteristics/{SECURE_JW}/value?format=utf8")
    assert status == 200, body
    assert body["value"] == "secret-jw"
    assert gw.get(f"/v1/devices/{T['secure']}")[1]["paired"] is True


def test_authenticated_read_fails_with_att_0x0e(gw):
    status, body, _ = gw.get(f"/v1/devices/{T['secure']}/characteristics/{SECURE_MITM}/value")
    assert status == 502, body
    assert body["error"]["domain"] == "CBATTErrorDomain" and body["error"]["code"] == 0x0E
    assert "0x0e" in body["error"]["detail"]


def test_disconnect(gw):
    for device in sorted({T["heart_rate"], T["serial"], T["secure"]}):
        status, body, _ = gw.post(f"/v1/devices/{device}/disconnect")
        assert status == 200, body
        assert wait_for(lambda: gw.get(f"/v1/devices/{device}")[1]["state"] == "disconnected", 10)
