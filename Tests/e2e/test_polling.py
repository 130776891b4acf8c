"""Issue 13: polling-friendly values. `?maxAge=` answers a young enough value without asking the
device, `?connect=auto` connects a disconnected device first, and gattway disconnects a device it
connected that way once it is idle (`--idle-disconnect`), never one a client connected."""
import pytest

from conftest import Gateway, wait_for
from test_reconnect import SSE
from test_streams import char_path

HR = "F0:00:00:00:00:01"
SERIAL = "F0:00:00:00:00:02"
BATTERY = f"/v1/devices/{HR}/characteristics/2a19/value"


@pytest.fixture
def poller():
    gw = Gateway(["--simulate", "--idle-disconnect", "1"])
    gw.discover(HR, SERIAL)
    yield gw
    gw.stop()


def state(gw, device):
    return gw.get(f"/v1/devices/{device}")[1]["state"]


def reads(gw, device, uuid):
    return gw.call_count("ReadValue", char_path(gw, device, uuid))


def get_value(gw, path):
    status, body, _ = gw.get(path)
    assert status == 200, body
    return body


def test_max_age_and_connect_auto_on_a_disconnected_device(poller):
    assert state(poller, HR) == "disconnected"
    poller.simulator("ResetCounters")

    first = get_value(poller, BATTERY + "?maxAge=60&connect=auto")
    assert (first["source"], first["age"]) == ("read", 0)
    assert state(poller, HR) == "connected"
    assert reads(poller, HR, "2a19") == 1

    # Within maxAge: the same value from the cache, older each time, and the device is not asked.
    second = get_value(poller, BATTERY + "?maxAge=60&connect=auto")
    third = get_value(poller, f"/v1/devices/{HR}/services/180f/characteristics/2a19/value?maxAge=60")
    assert second["source"] == third["source"] == "cache"
    assert second["value"] == third["value"] == first["value"]
    assert 0 <= second["age"] <= third["age"] < 60
    assert reads(poller, HR, "2a19") == 1

    # Idle for --idle-disconnect: gattway lets go of the link it made (device state polls are no use of it).
    assert wait_for(lambda: state(poller, HR) == "disconnected", 10)
    kept = get_value(poller, BATTERY + "?maxAge=60")
    assert kept["source"] == "cache" and kept["value"] == first["value"] and kept["age"] >= third["age"]
    assert state(poller, HR) == "disconnected"

    # maxAge=0 always reads: connect=auto connects again for it.
    fresh = get_value(poller, BATTERY + "?maxAge=0&connect=auto")
    assert fresh["source"] == "read"
    assert reads(poller, HR, "2a19") == 2


def test_a_notification_updates_the_cached_value(poller):
    serial = f"/v1/devices/{SERIAL}/characteristics/ffe1"
    assert poller.post(f"/v1/devices/{SERIAL}/connect", {"timeout": 10})[0] == 200
    assert get_value(poller, serial + "/value?maxAge=60")["source"] == "read"
    assert poller.post(serial + "/notifications")[0] == 200
    poller.simulator("ResetCounters")
    poller.simulator("SetValue", "string:" + SERIAL, "string:ffe1", "array:byte:0x2a,0x2b", "boolean:true")
    assert wait_for(lambda: get_value(poller, serial + "/value?maxAge=60")["value"] == "2a2b", 5)
    notified = get_value(poller, serial + "/value?maxAge=60")
    assert notified["source"] == "notification" and notified["age"] >= 0
    assert reads(poller, SERIAL, "ffe1") == 0


def test_a_client_connected_device_is_never_idle_disconnected(poller):
    events = SSE(poller, "types=connection")
    # HR: gattway connects it for a poll, then a client's connect takes it over.
    get_value(poller, BATTERY + "?maxAge=60&connect=auto")
    assert poller.post(f"/v1/devices/{HR}/connect", {"timeout": 10})[0] == 200
    # Serial: a client connects it, then a poll with connect=auto uses it.
    assert poller.post(f"/v1/devices/{SERIAL}/connect", {"timeout": 10})[0] == 200
    get_value(poller, f"/v1/devices/{SERIAL}/characteristics/ffe1/value?maxAge=60&connect=auto")
    # Three idle periods pass without either being disconnected.
    gone = events.wait(lambda e: e.get("state") == "disconnected", timeout=3)
    events.close()
    assert gone is None, gone
    assert state(poller, HR) == state(poller, SERIAL) == "connected"


def test_polling_errors(poller):
    for query in ("maxAge=-1", "maxAge=soon", "connect=always"):
        status, body, _ = poller.get(BATTERY + "?" + query)
        assert (status, body["error"]["name"]) == (400, "invalidParameters"), query
    status, body, _ = poller.get("/v1/devices/AA:00:00:00:00:09/characteristics/2a19/value?maxAge=60&connect=auto")
    assert (status, body["error"]["name"]) == (404, "unknownDevice")


def test_websocket_reads_keep_a_connect_auto_link_in_use(poller):
    """A read over the WebSocket is a use of the device, as a REST read is: reads every 0.3 s
    for three idle periods keep the link gattway made; once they stop it is let go."""
    import json
    import time
    from websockets.sync.client import connect as ws_connect

    get_value(poller, BATTERY + "?maxAge=0&connect=auto")
    with ws_connect(poller.base.replace("http://", "ws://") + "/v1/ws", open_timeout=10) as ws:
        end = time.monotonic() + 3
        n = 0
        while time.monotonic() < end:
            n += 1
            ws.send(json.dumps({"op": "read", "id": str(n), "device": HR, "characteristic": "2a19"}))
            reply = json.loads(ws.recv(timeout=10))
            assert reply["op"] == "result" and reply["id"] == str(n), reply
            assert state(poller, HR) == "connected", f"disconnected after {n} reads"
            time.sleep(0.3)  # the poller's cadence, not a wait for anything
    assert wait_for(lambda: state(poller, HR) == "disconnected", 10)
