"""Issue 12: the GATT blocklist. An operator file beside the default list, against the built-in
simulated devices: a hidden characteristic is missing from listings and refused, excluded reads
and writes are refused, everywhere with 403 CBErrorDomain 8 uuidNotAllowed; the default list
hides an HID service; a bad file stops gattway at start."""
import asyncio
import json
import os
import subprocess

import pytest
import websockets

from conftest import Gateway, binary, wait_for

HR = "F0:00:00:00:00:01"
SERIAL = "F0:00:00:00:00:02"
KEYBOARD = "F0:00:00:00:00:31"

OPERATOR_LIST = """\
# The operator's entries, beside the default list.
2a38                  # Body Sensor Location: hidden
ffe1 exclude-writes   # the serial module: read only
0x2A19 exclude-reads  # Battery Level: neither read nor notified
"""


def long_uuid(short):
    return f"0000{short}-0000-1000-8000-00805f9b34fb"


def expect_not_allowed(reply):
    status, body, _ = reply
    assert status == 403, body
    assert body["error"]["domain"] == "CBErrorDomain", body
    assert body["error"]["code"] == 8, body
    assert body["error"]["name"] == "uuidNotAllowed", body
    return body["error"]["message"]


@pytest.fixture(scope="module")
def operator_list(tmp_path_factory):
    path = tmp_path_factory.mktemp("blocklist") / "ops.txt"
    path.write_text(OPERATOR_LIST)
    return str(path)


@pytest.fixture(scope="module")
def gw(operator_list):
    gw = Gateway(["--simulate", "--blocklist", operator_list])
    try:
        gw.discover(HR, SERIAL)
        for device in (HR, SERIAL):
            assert gw.post(f"/v1/devices/{device}/connect", {"timeout": 10})[0] == 200
        yield gw
    finally:
        gw.stop()


def test_a_blocklisted_characteristic_answers_403_uuid_not_allowed(gw):
    message = expect_not_allowed(gw.get(f"/v1/devices/{HR}/characteristics/2a38/value"))
    assert message == "characteristic 2a38 is in the GATT blocklist: it is hidden from clients"
    expect_not_allowed(gw.get(f"/v1/devices/{HR}/services/180d/characteristics/2a38/value"))
    expect_not_allowed(gw.get(f"/v1/devices/{HR}/characteristics/2a38"))
    expect_not_allowed(gw.request("PUT", f"/v1/devices/{HR}/characteristics/2a38/value", {"value": "01"}))
    # Something that does not exist is still 404.
    assert gw.get(f"/v1/devices/{HR}/characteristics/2a99/value")[0] == 404


def test_a_hidden_characteristic_is_missing_from_every_listing(gw):
    tree = gw.get(f"/v1/devices/{HR}/gatt")[1]
    listed = {c["uuid"] for s in tree["services"] for c in s["characteristics"]}
    assert long_uuid("2a37") in listed and long_uuid("2a39") in listed, listed
    assert long_uuid("2a38") not in listed
    in_service = gw.get(f"/v1/devices/{HR}/services/180d/characteristics")[1]["characteristics"]
    assert [c["uuid"][4:8] for c in in_service] == ["2a37", "2a39"]
    everywhere = gw.get(f"/v1/devices/{HR}/characteristics")[1]["characteristics"]
    assert long_uuid("2a38") not in {c["uuid"] for c in everywhere}
    # Excluded reads or writes do not hide.
    assert long_uuid("2a19") in {c["uuid"] for c in everywhere}


def test_exclude_writes_lets_reads_through(gw):
    status, body, _ = gw.get(f"/v1/devices/{SERIAL}/characteristics/ffe1/value")
    assert status == 200, body
    message = expect_not_allowed(gw.request("PUT", f"/v1/devices/{SERIAL}/characteristics/ffe1/value",
                                            {"value": "hi", "format": "utf8"}))
    assert "the GATT blocklist has ffe1 exclude-writes" in message, message
    # Notifications are reads: subscribing works.
    assert gw.post(f"/v1/devices/{SERIAL}/characteristics/ffe1/notifications")[0] == 200
    assert gw.delete(f"/v1/devices/{SERIAL}/characteristics/ffe1/notifications")[0] == 200


def test_exclude_reads_refuses_reads_and_notifications(gw):
    expect_not_allowed(gw.get(f"/v1/devices/{HR}/characteristics/2a19/value"))
    expect_not_allowed(gw.post(f"/v1/devices/{HR}/characteristics/2a19/notifications"))
    expect_not_allowed(gw.get(f"/v1/events?device={HR}&characteristic=2a19"))
    assert gw.get(f"/v1/devices/{HR}/characteristics/2a19")[1]["isNotifying"] is False


def ws_url(gw):
    return gw.base.replace("http://", "ws://") + "/v1/ws"


@pytest.mark.parametrize("command", [
    {"op": "read", "device": HR, "characteristic": "2a38"},
    {"op": "read", "device": HR, "characteristic": "2a19"},
    {"op": "subscribe", "device": HR, "characteristic": "2a38"},
    {"op": "subscribe", "device": HR, "characteristic": "2a19"},
    {"op": "write", "device": SERIAL, "characteristic": "ffe1", "value": "00"},
])
def test_websocket_commands_are_refused_with_the_same_error(gw, command):
    async def run():
        async with websockets.connect(ws_url(gw)) as ws:
            await ws.send(json.dumps({"id": "7", **command}))
            return json.loads(await asyncio.wait_for(ws.recv(), 5))
    reply = asyncio.run(run())
    assert reply["op"] == "error" and reply["id"] == "7", reply
    assert reply["error"]["code"] == 8 and reply["error"]["name"] == "uuidNotAllowed", reply
    assert reply["error"]["domain"] == "CBErrorDomain", reply


def test_the_default_list_stays_in_force_beside_the_operator_file(gw):
    # The serial number: listed, not readable.
    expect_not_allowed(gw.get(f"/v1/devices/{HR}/characteristics/2a25/value"))
    assert gw.get(f"/v1/devices/{HR}/characteristics/2a29/value")[0] == 200
    # The CCCD: readable, not writable directly; subscribing still writes it (BlueZ does).
    assert gw.get(f"/v1/devices/{HR}/characteristics/2a37/descriptors/2902/value")[0] == 200
    expect_not_allowed(gw.request("PUT", f"/v1/devices/{HR}/characteristics/2a37/descriptors/2902/value", {"value": "0100"}))
    status, body, _ = gw.post(f"/v1/devices/{HR}/characteristics/2a37/notifications")
    assert status == 200 and body["isNotifying"] is True, body
    assert gw.delete(f"/v1/devices/{HR}/characteristics/2a37/notifications")[0] == 200


def test_the_entries_in_force_are_listed(gw, operator_list):
    status, body, _ = gw.get("/v1/blocklist")
    assert status == 200, body
    entries = {e["uuid"]: e for e in body["entries"]}
    assert entries[long_uuid("2a38")] == {"uuid": long_uuid("2a38"), "exclude": "all", "sources": [operator_list + ":2"]}
    assert entries[long_uuid("ffe1")]["exclude"] == "writes"
    assert entries[long_uuid("2a19")]["exclude"] == "reads"
    assert entries[long_uuid("1812")]["exclude"] == "all"
    assert entries[long_uuid("1812")]["sources"][0].startswith("default:")
    # Advertised service UUIDs are listed as received.
    assert long_uuid("180f") in gw.get(f"/v1/devices/{HR}")[1]["advertisement"]["serviceUUIDs"]


def test_a_restored_hold_on_an_unreadable_characteristic_is_refused(gw, operator_list, tmp_path):
    battery = gw.get(f"/v1/devices/{HR}/characteristics/2a19")[1]["handle"]
    state = tmp_path / "state"
    state.mkdir()
    (state / "state.json").write_text(json.dumps(
        {"version": 1, "devices": [HR], "holds": [{"device": HR, "characteristic": battery}]}))
    restored = Gateway(["--simulate", "--blocklist", operator_list, "--state-dir", str(state)])
    try:
        def hold():
            items = restored.get("/v1/restoration")[1]["restored"]
            return next((i for i in items if i["kind"] == "hold" and i["result"] != "pending"), None)
        item = wait_for(hold, 15)
        assert item and item["result"] == "failed", restored.get("/v1/restoration")[1]
        assert item["error"]["code"] == 8 and item["error"]["name"] == "uuidNotAllowed", item
    finally:
        restored.stop()


KEYBOARD_CONFIG = {"devices": [{
    "address": KEYBOARD, "name": "Sim Keyboard", "uuids": ["1812"],
    "services": [
        {"uuid": "1812", "characteristics": [{"uuid": "2a4d", "flags": ["read", "notify"], "value": "00"}]},
        {"uuid": "180f", "characteristics": [{"uuid": "2a19", "flags": ["read"], "value": "64"}]},
    ],
}]}


@pytest.mark.parametrize("default", [True, False])
def test_the_default_list_hides_hid_unless_left_out(tmp_path, default):
    config = tmp_path / "keyboard.json"
    config.write_text(json.dumps(KEYBOARD_CONFIG))
    kb = Gateway(["--simulate", str(config)] + ([] if default else ["--no-default-blocklist"]))
    try:
        kb.discover(KEYBOARD)
        assert kb.post(f"/v1/devices/{KEYBOARD}/connect", {"timeout": 10})[0] == 200
        services = [s["uuid"][4:8] for s in kb.get(f"/v1/devices/{KEYBOARD}/services")[1]["services"]]
        hid = kb.get(f"/v1/devices/{KEYBOARD}/services/1812")
        report = kb.get(f"/v1/devices/{KEYBOARD}/characteristics/2a4d/value")
        if default:
            assert services == ["180f"]
            expect_not_allowed(hid)
            expect_not_allowed(report)
            expect_not_allowed(kb.post(f"/v1/devices/{KEYBOARD}/characteristics/2a4d/notifications"))
        else:
            assert services == ["1812", "180f"]
            assert hid[0] == 200 and report[0] == 200
            assert kb.get("/v1/blocklist")[1]["entries"] == []
        # The device list shows what the keyboard advertises, HID included.
        assert long_uuid("1812") in kb.get(f"/v1/devices/{KEYBOARD}")[1]["advertisement"]["serviceUUIDs"]
    finally:
        kb.stop()


@pytest.mark.parametrize("text, where", [
    ("1812\n\nffe1 exclude-write\n", ":3: after the UUID, only exclude-reads or exclude-writes may follow"),
    ("# fine\nnot-a-uuid\n", ':2: "not-a-uuid" is not a UUID'),
])
def test_a_bad_blocklist_file_stops_gattway_with_file_and_line(tmp_path, text, where):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    done = subprocess.run([binary("gattway"), "--simulate", "--listen", "127.0.0.1:0", "--blocklist", str(path)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2, done.stderr
    assert f"gattway: {path}{where}" in done.stderr, done.stderr
    assert "listening" not in done.stderr


def test_a_missing_blocklist_file_stops_gattway(tmp_path):
    missing = str(tmp_path / "nope.txt")
    done = subprocess.run([binary("gattway"), "--blocklist", missing], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert f"cannot read the blocklist {missing}: No such file or directory" in done.stderr, done.stderr
