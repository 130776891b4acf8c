"""Issue 33 on the simulator: several adapters in one gattway. The built-in devices on two
adapters, hci0 and hci1: the heart-rate monitor near hci0 (-45) and far from hci1 (-75), the serial
module heard by hci1 only, the others by both. One device list with the adapters that hear each
device; a connect goes to the nearer adapter, or the one named, or the next when the nearer one
is full; an adapter pulled out while a device with two holds is connected through it moves the
link to the other, both holds delivering again; an adapter plugged in is used."""
import json
import os
import subprocess
import tempfile
import time

import pytest

from conftest import Gateway, wait_for
from test_reconnect import SSE, connection, notification

HR, SERIAL, SECURE = "F0:00:00:00:00:01", "F0:00:00:00:00:02", "F0:00:00:00:00:03"


def configuration(hci0_limit=7, hci1_limit=7):
    """The built-in configuration on two adapters, with the RSSIs above."""
    sim = os.path.join(os.environ["GATTWAY_BIN_DIR"], "gattway-sim")
    config = json.loads(subprocess.run([sim, "--print-config"], capture_output=True, text=True, check=True).stdout)
    hci0 = dict(config.pop("adapter"), id="hci0", maxConnections=hci0_limit)
    hci1 = dict(hci0, id="hci1", address="00:1A:7D:DA:71:14", maxConnections=hci1_limit)
    config["adapters"] = [hci0, hci1]
    for device in config["devices"]:
        if device["address"] == HR:
            device.update(rssi={"hci0": -45, "hci1": -75}, rssiJitter=0)
        elif device["address"] == SERIAL:
            device.update(rssi={"hci1": -50}, rssiJitter=0)
    f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump(config, f)
    f.close()
    return f.name


@pytest.fixture
def two():
    path = configuration()
    gw = Gateway(["--simulate", path])
    yield gw
    gw.stop()
    os.remove(path)


def listed(gw, address):
    return next((d for d in gw.get("/v1/devices")[1]["devices"] if d["id"] == address), None)


def heard_by(device):
    return {a["adapter"]: a.get("rssi") for a in device.get("adapters", [])}


def scanned(gw, *addresses):
    status, body, _ = gw.post("/v1/scan", {})
    assert status == 200, body
    assert wait_for(lambda: all(listed(gw, a) and len(heard_by(listed(gw, a))) == expected
                                for a, expected in addresses), 10), [listed(gw, a) for a, _ in addresses]


def test_one_list_with_the_adapters_that_hear_each_device(two):
    scanned(two, (HR, 2), (SERIAL, 1), (SECURE, 2))
    devices = two.get("/v1/devices")[1]["devices"]
    assert len([d for d in devices if d["id"] == HR]) == 1, "one entry per device"
    hr = listed(two, HR)
    assert heard_by(hr) == {"hci0": -45, "hci1": -75}, hr
    assert hr["rssi"] == -45, "the best recent RSSI"
    assert heard_by(listed(two, SERIAL)) == {"hci1": -50}
    state = two.get("/v1/state")[1]
    assert state["state"] == "poweredOn" and state["usableAdapters"] == 2, state
    adapters = {a["id"]: a for a in two.get("/v1/adapters")[1]["adapters"]}
    assert set(adapters) == {"hci0", "hci1"} and all(a["selected"] and a["connections"] == 0 for a in adapters.values()), adapters


def test_a_connect_goes_to_the_nearer_adapter_or_the_one_named(two):
    scanned(two, (HR, 2), (SECURE, 2))
    status, body, _ = two.post(f"/v1/devices/{HR}/connect", {"timeout": 10})
    assert status == 200 and body["adapter"] == "hci0", body
    status, body, _ = two.post(f"/v1/devices/{SECURE}/connect", {"timeout": 10, "adapter": "hci1"})
    assert status == 200 and body["adapter"] == "hci1", body
    adapters = {a["id"]: a["connections"] for a in two.get("/v1/adapters")[1]["adapters"]}
    assert adapters == {"hci0": 1, "hci1": 1}, adapters


def test_an_adapter_not_in_use_is_400_with_the_usable_ones(two):
    scanned(two, (HR, 2))
    status, body, _ = two.post(f"/v1/devices/{HR}/connect", {"timeout": 10, "adapter": "hci7"})
    assert status == 400 and body["error"]["name"] == "invalidParameters", body
    assert "usable: hci0, hci1" in body["error"]["message"], body
    status, body, _ = two.post(f"/v1/devices/{SERIAL}/connect", {"timeout": 10, "adapter": "hci0"})
    assert status == 404 and body["error"]["name"] == "unknownDevice", body


def test_a_full_adapter_passes_the_link_to_the_next_that_hears_the_device():
    path = configuration(hci0_limit=1)
    gw = Gateway(["--simulate", path])
    try:
        scanned(gw, (HR, 2), (SECURE, 2))
        status, body, _ = gw.post(f"/v1/devices/{SECURE}/connect", {"timeout": 10, "adapter": "hci0"})
        assert status == 200 and body["adapter"] == "hci0", body
        status, body, _ = gw.post(f"/v1/devices/{HR}/connect", {"timeout": 10})
        assert status == 200 and body["adapter"] == "hci1", body
        assert any("has no free link slot" in line for line in gw.log)
        hci0 = next(a for a in gw.get("/v1/adapters")[1]["adapters"] if a["id"] == "hci0")
        assert hci0["connections"] == 1 and hci0["connectionLimit"] == 1, hci0
    finally:
        gw.stop()
        os.remove(path)


def test_an_adapter_pulled_out_moves_the_link_and_both_holds_deliver_again(two):
    scanned(two, (HR, 2))
    status, body, _ = two.post(f"/v1/devices/{HR}/connect", {"timeout": 10, "autoReconnect": True})
    assert status == 200 and body["adapter"] == "hci0", body
    status, body, _ = two.post(f"/v1/devices/{HR}/characteristics/2a19/notifications")
    assert status == 200, body
    rate = SSE(two, f"types=connection,notification&device={HR}&characteristic=2a37")
    battery = SSE(two, f"types=notification,hold&device={HR}")
    adapters = SSE(two, "types=adapter")
    assert rate.wait(notification, 5), "no heart rate before the adapter was pulled"
    mark = len(rate.events)
    two.simulator("RemoveAdapter", "string:hci0")
    assert adapters.wait(lambda e: e["adapter"] == "hci0" and e["state"] == "removed", 5), adapters.events
    lost = rate.wait(connection("disconnected"), 5, mark)
    assert lost and lost["error"]["name"] == "peripheralDisconnected", rate.events[mark:]
    back = rate.wait(connection("connected"), 20, mark)
    assert back, rate.events[mark:]
    assert rate.wait(notification, 10, rate.events.index(back) + 1), "no heart rate after the move"
    device = two.get(f"/v1/devices/{HR}")[1]
    assert device["state"] == "connected" and device["adapter"] == "hci1", device
    assert "adapters" not in device, "one adapter in use: which hears it goes without saying"
    two.simulator("SetValue", "string:" + HR, "string:2a19", "array:byte:0x33", "boolean:true")
    assert battery.wait(lambda e: e.get("type") == "notification" and e["value"] == "33", 10), "no battery notification after the move"
    assert not [e for e in battery.events if e.get("type") == "hold" and e.get("state") == "failed"], battery.events
    for stream in (rate, battery, adapters):
        stream.close()


def test_an_adapter_plugged_in_is_used(two):
    adapters = SSE(two, "types=adapter,state")
    two.simulator("RemoveAdapter", "string:hci1")
    assert adapters.wait(lambda e: e.get("type") == "adapter" and e["state"] == "removed", 5)
    assert wait_for(lambda: two.get("/v1/state")[1].get("usableAdapters") is None, 5), two.get("/v1/state")[1]
    status, body, _ = two.post("/v1/scan", {})
    assert status == 200, body
    assert wait_for(lambda: listed(two, HR) is not None, 10)
    assert listed(two, SERIAL) is None, "only hci1 hears the serial module"
    two.simulator("AddAdapter", "string:hci1")
    added = adapters.wait(lambda e: e.get("type") == "adapter" and e["state"] == "added", 5)
    assert added and added["adapter"] == "hci1", adapters.events
    # The scan runs on the adapter that came, and hears what only it hears.
    assert wait_for(lambda: listed(two, SERIAL) is not None, 10), "the plugged-in adapter was not used"
    assert heard_by(listed(two, SERIAL)) == {"hci1": -50}
    assert wait_for(lambda: two.get("/v1/state")[1].get("usableAdapters") == 2, 5), two.get("/v1/state")[1]
    adapters.close()


def test_the_esphome_proxy_offers_the_slots_of_the_adapters_in_use():
    """--esphome-connections 3 on two adapters that take one link each: the proxy offers 3 until
    the adapters' limits are learnt (a refusal teaches it), then their sum, 2; an adapter pulled
    out takes its slot with it."""
    from test_esphome_bluetooth import FreeSlots, Link, client_of, run
    from esphome_client import address_int

    path = configuration(hci0_limit=1, hci1_limit=1)
    gw = Gateway(["--simulate", path, "--esphome-api", "127.0.0.1:0", "--esphome-connections", "3"])
    gw.key = None
    try:
        assert wait_for(lambda: all(gw.get(f"/v1/devices/{a}")[0] == 200 for a in (HR, SERIAL, SECURE)), 10)

        async def scenario():
            api = await client_of(gw)
            free = FreeSlots(api)
            await free.until((3, 3, []))
            assert (await Link(api, HR).connect())[0] is True
            assert listed(gw, HR)["adapter"] == "hci0", "the nearer adapter"
            # hci0 is full: it refuses, and the link goes to hci1; hci0's limit is learnt.
            assert (await Link(api, SECURE).connect())[0] is True
            assert listed(gw, SECURE)["adapter"] == "hci1"
            # Only hci1 hears the serial module, and it is full too: refused; both limits are known.
            assert (await Link(api, SERIAL).connect())[0] is False
            await free.until((0, 2, sorted([address_int(HR), address_int(SECURE)])))
            # hci1 pulled out: its link is lost and its slot goes with it.
            gw.simulator("RemoveAdapter", "string:hci1")
            await free.until((0, 1, [address_int(HR)]))
            await api.disconnect()

        run(scenario())
    finally:
        gw.stop()
        os.remove(path)


BTHOME = "F0:00:00:00:00:06"


@pytest.fixture
def both_hear_bthome():
    """Two adapters that both hear the BTHome sensor, hci1 better."""
    path = configuration()
    config = json.load(open(path))
    for device in config["devices"]:
        if device["address"] == BTHOME:
            device.update(rssi={"hci0": -70, "hci1": -50}, rssiJitter=0)
    json.dump(config, open(path, "w"))
    gw = Gateway(["--simulate", path])
    yield gw
    gw.stop()
    os.remove(path)


def test_a_packet_two_adapters_hear_is_told_once_through_the_one_that_hears_it_best(both_hear_bthome):
    gw = both_hear_bthome
    stream = SSE(gw, f"types=advertisement&device={BTHOME}")
    status, body, _ = gw.post("/v1/scan", {"allowDuplicates": True})
    assert status == 200, body
    # Both adapters hear it (the list says so), and from hci1's first report on, only hci1 speaks.
    assert wait_for(lambda: heard_by(listed(gw, BTHOME) or {}) == {"hci0": -70, "hci1": -50}, 10), listed(gw, BTHOME)
    first = stream.wait(lambda e: e["peripheral"]["rssi"] == -50, 10)
    assert first, stream.events
    start = stream.events.index(first)
    assert wait_for(lambda: len(stream.events) >= start + 6, 10), stream.events[start:]
    told = stream.events[start:]
    assert [e["peripheral"]["rssi"] for e in told] == [-50] * len(told), "hci0's copy of a packet was told too"
    stream.close()


def test_a_sensor_packet_two_adapters_hear_counts_once(both_hear_bthome):
    import asyncio
    import websockets
    from test_streams import subscribe

    gw = both_hear_bthome
    assert gw.post("/v1/scan", {})[0] == 200
    assert wait_for(lambda: heard_by(listed(gw, BTHOME) or {}) == {"hci0": -70, "hci1": -50}, 10), listed(gw, BTHOME)

    async def packets():
        async with websockets.connect(gw.base.replace("http", "ws") + "/v1/ws") as ws:
            await subscribe(ws, "1", types=["sensor"], device=BTHOME, everyPacket=True)
            ids = []
            while len(ids) < 5:
                msg = json.loads(await asyncio.wait_for(ws.recv(), 5))
                if msg.get("type") == "sensor":
                    ids.append(msg["sensor"]["packetId"])
            return ids

    ids = asyncio.run(packets())
    assert len(set(ids)) == len(ids), f"a packet counted twice: {ids}"
