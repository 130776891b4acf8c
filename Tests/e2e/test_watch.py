"""Issue 13's watch: a discovery for sensors that lasts as long as gattway runs, beside any scan
(`--watch`, implied by `--simulate`; `PUT`/`GET`/`DELETE /v1/watch`), against the simulator's
built-in sensor devices. No scan is started here unless a test says so."""
import datetime
import threading

import pytest

from conftest import Gateway, wait_for
from test_bus_loss import bus  # noqa: F401 (a fixture)
from test_streams import sse_events

# The simulator's built-in sensors and what each decodes as.
SENSORS = {"F0:00:00:00:00:06": "bthome", "F0:00:00:00:00:07": "bthome", "F0:00:00:00:00:08": "atc1441",
           "F0:00:00:00:00:09": "pvvx", "F0:00:00:00:00:0A": "mibeacon", "F0:00:00:00:00:0B": "ruuvi-rawv2",
           "F0:00:00:00:00:0C": "mibeacon", "F0:00:00:00:00:0D": "eddystone-tlm"}
BEACONS = {"F0:00:00:00:00:04": "ibeacon", "F0:00:00:00:00:05": "eddystone-url"}
HEART_RATE = "F0:00:00:00:00:01"


def listed(gw):
    """The sensors GET /v1/sensors lists: {id: entry}."""
    status, body, _ = gw.get("/v1/sensors")
    assert status == 200, body
    return {s["id"]: s for s in body["sensors"]}


def put_watch(gw, body):
    return gw.request("PUT", "/v1/watch", body)


def adapter_discovering(gw):
    return gw.get("/v1/adapters")[1]["adapters"][0]["discovering"]


@pytest.fixture
def watching():
    gw = Gateway(["--simulate"])
    yield gw
    gw.stop()


def test_simulate_lists_every_built_in_sensor_within_3_s_without_a_scan(watching):
    everything = {**SENSORS, **BEACONS}
    assert wait_for(lambda: set(everything) <= set(listed(watching)), 3), listed(watching).keys()
    assert {i: s["reading"]["format"] for i, s in listed(watching).items()} == everything
    assert HEART_RATE not in listed(watching)  # it advertises nothing a decoder knows
    assert watching.get("/v1/scan")[1]["scanning"] is False
    assert watching.get("/v1/devices")[1]["devices"] == []  # the watch feeds sensors, not the device list
    _, status, _ = watching.get("/v1/watch")
    assert status["watching"] is True and status["discovering"] is True and status["devices"] >= len(everything), status
    one = watching.get("/v1/sensors/F0:00:00:00:00:06")[1]
    assert one["reading"]["measurements"]["temperature"]["unit"] == "°C" and one["age"] < 3


def test_no_watch_lists_nothing_until_one_is_put():
    gw = Gateway(["--simulate", "--no-watch"])
    try:
        assert gw.get("/v1/watch")[1] == {"watching": False, "discovering": False, "devices": 0}
        assert listed(gw) == {} and adapter_discovering(gw) is False
        status, body, _ = put_watch(gw, {})
        assert status == 200 and body["watching"] is True, body
        assert wait_for(lambda: set(SENSORS) <= set(listed(gw)), 3), listed(gw).keys()
    finally:
        gw.stop()


def test_filters_choose_the_sensors_and_replacing_them_starts_afresh(watching):
    assert wait_for(lambda: set(SENSORS) <= set(listed(watching)), 3)
    status, body, _ = put_watch(watching, {"devices": ["F0:00:00:00:00:08"]})
    assert status == 200 and body["filters"] == {"devices": ["F0:00:00:00:00:08"]}, body
    assert wait_for(lambda: set(listed(watching)) == {"F0:00:00:00:00:08"}, 3), listed(watching).keys()
    # Service data counts as advertising the service: ATC1441 and PVVX send 0x181A service data only.
    put_watch(watching, {"services": ["181a"]})
    assert wait_for(lambda: set(listed(watching)) == {"F0:00:00:00:00:08", "F0:00:00:00:00:09"}, 3), listed(watching).keys()
    put_watch(watching, {"namePrefix": "Sim BTHome"})
    assert wait_for(lambda: set(listed(watching)) == {"F0:00:00:00:00:06", "F0:00:00:00:00:07"}, 3), listed(watching).keys()
    assert watching.get("/v1/watch")[1]["filters"] == {"namePrefix": "Sim BTHome"}


@pytest.mark.parametrize("body, field", [({"devices": ["nope"]}, "devices[0]"), ({"services": ["xyz"]}, "services[0]"),
                                         ({"rssi": 99}, "rssi"), ({"namePrefix": ""}, "namePrefix"),
                                         ({"every": True}, "every")])
def test_bad_filters_are_refused_and_the_watch_stays_as_it_was(watching, body, field):
    status, error, _ = put_watch(watching, body)
    assert status == 400 and error["error"]["name"] == "invalidParameters" and field in error["error"]["message"], error
    assert watching.get("/v1/watch")[1]["watching"] is True
    assert "filters" not in watching.get("/v1/watch")[1] or watching.get("/v1/watch")[1]["filters"] == {}


def test_a_scan_beside_the_watch_keeps_its_own_filters_and_its_end_leaves_the_watch_running(watching):
    assert wait_for(lambda: set(SENSORS) <= set(listed(watching)), 3)
    status, body, _ = watching.post("/v1/scan", {"services": ["180d"]})
    assert status == 200, body
    assert wait_for(lambda: [d["id"] for d in watching.get("/v1/devices")[1]["devices"]] == [HEART_RATE], 3), \
        watching.get("/v1/devices")[1]
    assert watching.delete("/v1/scan")[0] == 200
    assert adapter_discovering(watching) is True and watching.get("/v1/watch")[1]["discovering"] is True
    # Readings still arrive after the scan ended: a sensor event with a new packet.
    events = sse_events(watching, "types=sensor&device=F0:00:00:00:00:06&everyPacket=true", 1, 5)
    assert events and events[0]["data"]["device"] == "F0:00:00:00:00:06", events


def test_stopping_the_watch_stops_the_discovery(watching):
    assert wait_for(lambda: adapter_discovering(watching), 3)
    status, body, _ = watching.delete("/v1/watch")
    assert status == 200 and body == {"watching": False, "discovering": False, "devices": 0}, body
    assert wait_for(lambda: adapter_discovering(watching) is False, 3)
    assert listed(watching) == {}


def test_stale_while_the_adapter_is_off_and_fresh_again_when_it_is_back():
    gw = Gateway(["--simulate", "--stale-after", "1"])
    try:
        assert wait_for(lambda: set(SENSORS) <= set(listed(gw)), 3)
        assert not any(s.get("stale") for s in listed(gw).values())
        gw.simulator("SetPowered", "boolean:false")
        assert wait_for(lambda: all(listed(gw).get(i, {}).get("stale") for i in SENSORS), 5), listed(gw)
        assert gw.get("/v1/watch")[1]["watching"] is True
        gw.simulator("SetPowered", "boolean:true")
        fresh = lambda: all(i in listed(gw) and not listed(gw)[i].get("stale") for i in SENSORS)
        assert wait_for(fresh, 5), listed(gw)
        assert gw.get("/v1/watch")[1]["discovering"] is True
    finally:
        gw.stop()


def test_the_watch_resumes_after_bluetoothd_restarts(watching):
    assert wait_for(lambda: set(SENSORS) <= set(listed(watching)), 3)
    got, opened = [], threading.Event()
    reader = threading.Thread(target=lambda: got.extend(
        sse_events(watching, "types=state,sensor&everyPacket=true", 40, 15, opened=opened)))
    reader.start()
    assert opened.wait(5)
    watching.simulator("Restart", "uint32:500")
    reader.join(20)
    kinds = [(e["event"], e["data"].get("state")) for e in got]
    back = next((i for i, k in enumerate(kinds) if k == ("state", "poweredOn")), None)
    assert back is not None, kinds
    assert any(e["event"] == "sensor" for e in got[back + 1:]), kinds
    assert watching.get("/v1/watch")[1]["discovering"] is True


def test_a_watch_put_by_a_client_is_restored_at_start_and_the_flag_one_is_not(tmp_path):
    state = str(tmp_path)
    gw = Gateway(["--simulate", "--no-watch", "--state-dir", state])
    try:
        assert put_watch(gw, {"devices": ["F0:00:00:00:00:0B"]})[0] == 200
    finally:
        gw.stop()
    again = Gateway(["--simulate", "--no-watch", "--state-dir", state])
    try:
        assert wait_for(lambda: again.get("/v1/watch")[1]["watching"], 3)
        assert again.get("/v1/watch")[1]["filters"] == {"devices": ["F0:00:00:00:00:0B"]}
        assert wait_for(lambda: set(listed(again)) == {"F0:00:00:00:00:0B"}, 3), listed(again).keys()
        items = again.get("/v1/restoration")[1]["restored"]
        assert {"kind": "watch", "target": "watch", "result": "restored"} in items, items
    finally:
        again.stop()
    # --watch does not replace a restored watch's filters.
    flagged = Gateway(["--simulate", "--watch", "--state-dir", state])
    try:
        assert wait_for(lambda: flagged.get("/v1/restoration")[1]["restored"], 3)
        assert flagged.get("/v1/watch")[1]["filters"] == {"devices": ["F0:00:00:00:00:0B"]}
        assert flagged.delete("/v1/watch")[0] == 200
    finally:
        flagged.stop()
    # Stopped by a client: not restored; a --watch start is not recorded.
    third = Gateway(["--simulate", "--watch", "--state-dir", state])
    try:
        assert wait_for(lambda: third.get("/v1/watch")[1]["watching"], 3)
        assert "filters" not in third.get("/v1/watch")[1] or third.get("/v1/watch")[1]["filters"] == {}
        assert third.get("/v1/restoration")[1]["kept"].get("watch") is None
    finally:
        third.stop()


def test_a_watch_from_the_start_waits_for_the_bus_and_outlives_losing_it(bus):
    """`--watch` before there is any D-Bus system bus (gattway started before bluetoothd), then
    the bus killed and started again: the watch is on throughout and lists fresh sensors each
    time BlueZ is back."""
    gw = Gateway(["--watch", "--stale-after", "1"], env={"DBUS_SYSTEM_BUS_ADDRESS": bus.address})
    try:
        assert wait_for(lambda: gw.get("/v1/watch")[1]["watching"], 3)
        assert gw.get("/v1/watch")[1]["discovering"] is False
        bus.start()
        fresh = lambda: all(i in listed(gw) and not listed(gw)[i].get("stale") for i in SENSORS)
        assert wait_for(fresh, 40), listed(gw)
        bus.kill()
        assert wait_for(lambda: gw.get("/v1/state")[1]["state"] == "unsupported", 10)
        assert gw.get("/v1/watch")[1] == {**gw.get("/v1/watch")[1], "watching": True, "discovering": False}
        back = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:23] + "Z"
        bus.start()
        assert wait_for(lambda: gw.get("/v1/state")[1]["state"] == "poweredOn", 40)
        # Heard again after the bus came back (not only listed from before).
        assert wait_for(lambda: fresh() and all(listed(gw)[i]["updated"] > back for i in SENSORS), 10), listed(gw)
    finally:
        gw.stop()
