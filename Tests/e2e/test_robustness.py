"""What a hostile bus peer or a changing adapter must not break."""
import asyncio
import subprocess

from conftest import wait_for

HR = "F0:00:00:00:00:01"


def test_forged_signals_from_other_peers_are_ignored(gateway):
    """Any peer can send a signal straight to gattway's connection (no match rule stops a
    unicast). Only bluetoothd's own signals may change what gattway believes."""
    from dbus_fast.aio import MessageBus
    from dbus_fast import Message, MessageType, Variant

    async def forge():
        bus = await MessageBus(bus_address=gateway.bus).connect()
        names = (await bus.call(Message(destination="org.freedesktop.DBus", path="/org/freedesktop/DBus",
                                        interface="org.freedesktop.DBus", member="ListNames"))).body[0]
        owner = (await bus.call(Message(destination="org.freedesktop.DBus", path="/org/freedesktop/DBus",
                                        interface="org.freedesktop.DBus", member="GetNameOwner", signature="s",
                                        body=["org.bluez"]))).body[0]
        for name in names:
            if name.startswith(":") and name not in (owner, bus.unique_name):
                await bus.send(Message(message_type=MessageType.SIGNAL, destination=name, path="/org/bluez/hci0",
                                       interface="org.freedesktop.DBus.Properties", member="PropertiesChanged",
                                       signature="sa{sv}as",
                                       body=["org.bluez.Adapter1", {"Powered": Variant("b", False)}, []]))
        # A round trip to the bus after the sends: they have been delivered.
        await bus.call(Message(destination="org.freedesktop.DBus", path="/org/freedesktop/DBus",
                               interface="org.freedesktop.DBus", member="GetId"))
        bus.disconnect()
    asyncio.run(forge())
    assert gateway.get("/v1/state")[1]["state"] == "poweredOn"


def test_scanning_restarts_after_the_adapter_power_cycles(gateway):
    gateway.discover(HR)

    def set_powered(on):
        out = subprocess.run(["dbus-send", "--bus=" + gateway.bus, "--print-reply", "--dest=org.bluez", "/org/bluez/hci0",
                              "org.freedesktop.DBus.Properties.Set", "string:org.bluez.Adapter1", "string:Powered",
                              f"variant:boolean:{'true' if on else 'false'}"], capture_output=True, text=True, timeout=10)
        assert out.returncode == 0, out.stderr
    set_powered(False)
    assert wait_for(lambda: gateway.get("/v1/state")[1]["state"] == "poweredOff", 5)
    assert not gateway.get("/v1/adapters")[1]["adapters"][0]["discovering"]
    assert gateway.get("/v1/scan")[1]["scanning"] is True  # the scan is kept, to run again
    set_powered(True)
    assert wait_for(lambda: gateway.get("/v1/state")[1]["state"] == "poweredOn", 5)
    # Discovering again without a new POST /v1/scan.
    assert wait_for(lambda: gateway.get("/v1/adapters")[1]["adapters"][0]["discovering"], 5)
    assert wait_for(lambda: any(d["id"] == HR for d in gateway.get("/v1/devices")[1]["devices"]), 5)


def test_a_scan_stopped_behind_gattways_back_is_restarted(gateway):
    gateway.discover(HR)
    gateway.simulator("EndDiscovery")
    # First that gattway saw it end (under load the adapter may still read discovering before
    # that), then that it runs again.
    assert wait_for(lambda: any("discovery ended (BlueZ stopped discovering" in line for line in gateway.log), 5), gateway.log[-20:]
    assert wait_for(lambda: gateway.get("/v1/adapters")[1]["adapters"][0]["discovering"], 5)
    assert gateway.get("/v1/scan")[1]["scanning"] is True


def test_a_flooding_websocket_client_does_not_stall_the_others(gateway):
    """One client sends pings as fast as it can and never reads; another must still get
    answers promptly (the socket thread reads each socket within a budget per turn)."""
    import os
    import threading
    import time
    import json
    import websockets
    from test_streams import raw_websocket

    flooder = raw_websocket(gateway)
    stop = threading.Event()
    mask = os.urandom(4)
    payload = b"p" * 125
    frame = bytes([0x89, 0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    burst = frame * 500

    def flood():
        flooder.settimeout(0.5)
        while not stop.is_set():
            try:
                flooder.sendall(burst)
            except OSError:
                break
    t = threading.Thread(target=flood, daemon=True)
    t.start()
    time.sleep(0.5)  # the flood is under way

    async def ask():
        async with websockets.connect(gateway.base.replace("http://", "ws://") + "/v1/ws") as ws:
            started = time.monotonic()
            await ws.send(json.dumps({"op": "fly", "id": "q"}))
            reply = json.loads(await asyncio.wait_for(ws.recv(), 5))
            return reply, time.monotonic() - started
    try:
        reply, elapsed = asyncio.run(ask())
    finally:
        stop.set()
        t.join(2)
        flooder.close()
    assert reply["id"] == "q"
    assert elapsed < 2, f"the answer took {elapsed:.1f} s behind the flood"


def test_concurrent_rest_subscriptions_share_one_start_notify(gateway):
    import concurrent.futures
    gateway.discover(HR)
    assert gateway.post(f"/v1/devices/{HR}/connect", {"timeout": 10})[0] == 200
    gateway.simulator("SetFault", "string:" + HR, 'string:{"responseDelayMs": 500}')
    gateway.simulator("ResetCounters")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        replies = list(pool.map(lambda _: gateway.post(f"/v1/devices/{HR}/characteristics/2a37/notifications"), range(2)))
    assert [r[1]["isNotifying"] for r in replies] == [True, True]
    assert gateway.call_count("StartNotify", "") == 1


def write_config(tmp_path, devices, adapter=None):
    import json as _json
    path = tmp_path / "sim.json"
    path.write_text(_json.dumps({"adapter": adapter or {}, "devices": devices}))
    return str(path)


def test_allow_duplicates_reports_every_advertisement(tmp_path):
    """A beacon whose data and RSSI never change: with allowDuplicates every advertisement is
    an event (BlueZ's DuplicateData re-signals the data at each report)."""
    import threading
    from conftest import Gateway
    from test_streams import sse_events
    beacon = {"address": "F0:00:00:00:00:44", "connectable": False, "rssi": -60, "rssiJitter": 0,
              "advertisingIntervalMs": 200, "manufacturerData": {"76": "0215"}}
    gw = Gateway(["--simulate", write_config(tmp_path, [beacon])])
    try:
        result, opened = {}, threading.Event()
        t = threading.Thread(target=lambda: result.update(
            events=sse_events(gw, "types=advertisement&device=F0:00:00:00:00:44", 5, 4, opened=opened)))
        t.start()
        assert opened.wait(5)
        gw.post("/v1/scan", {"allowDuplicates": True})
        t.join(5)
        assert len(result["events"]) == 5
    finally:
        gw.stop()


def test_going_out_of_range_while_connecting_fails_the_connect(tmp_path):
    import concurrent.futures
    import time
    from conftest import Gateway
    device = {"address": "F0:00:00:00:00:45", "name": "Slow", "connectDelayMs": 1000,
              "services": [{"uuid": "180f", "characteristics": [{"uuid": "2a19", "flags": ["read"], "value": "64"}]}]}
    gw = Gateway(["--simulate", write_config(tmp_path, [device], {"connectTimeoutMs": 1000})])
    try:
        gw.discover("F0:00:00:00:00:45")
        gw.delete("/v1/scan")
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            started = time.monotonic()
            pending = pool.submit(lambda: gw.post("/v1/devices/F0:00:00:00:00:45/connect", {"timeout": 10}))
            assert wait_for(lambda: gw.get("/v1/devices/F0:00:00:00:00:45")[1]["state"] == "connecting", 2, 0.02)
            gw.simulator("SetFault", "string:F0:00:00:00:00:45", 'string:{"outOfRange": true}')
            status, body, _ = pending.result(10)
        assert status == 502 and body["error"]["name"] == "connectionFailed", body
        assert body["error"]["detail"].endswith("le-connection-abort-by-local")
        assert time.monotonic() - started < 5
    finally:
        gw.stop()


def test_devices_not_seen_are_stale_and_stay_listed_when_bluez_forgets_them(tmp_path):
    from conftest import Gateway
    near = {"address": "F0:00:00:00:00:46", "name": "Near", "advertisingIntervalMs": 100}
    away = {"address": "F0:00:00:00:00:47", "name": "Away", "advertisingIntervalMs": 100}
    gw = Gateway(["--simulate", write_config(tmp_path, [near, away], {"temporaryTimeoutSec": 1}), "--stale-after", "0.8"])
    try:
        gw.discover(near["address"], away["address"])
        gw.simulator("SetFault", "string:" + away["address"], 'string:{"outOfRange": true}')

        def listed():
            return {d["id"]: d for d in gw.get("/v1/devices")[1]["devices"]}
        # While the scan runs: the device that went away turns stale, the one advertising does not.
        assert wait_for(lambda: listed()[away["address"]].get("stale") is True, 5), listed()
        assert "stale" not in listed()[near["address"]], listed()[near["address"]]
        # BlueZ forgets an unseen temporary device (TemporaryTimeout); the list still shows it as
        # last seen.
        def bluez_knows(address):
            out = subprocess.run(["dbus-send", "--bus=" + gw.bus, "--print-reply", "--dest=org.bluez", "/",
                                  "org.freedesktop.DBus.ObjectManager.GetManagedObjects"], capture_output=True, text=True, timeout=10)
            assert out.returncode == 0, out.stderr
            return "dev_" + address.replace(":", "_") in out.stdout
        assert wait_for(lambda: not bluez_knows(away["address"]), 5)
        gone = listed()[away["address"]]
        assert gone["stale"] is True and gone["name"] == "Away" and gone["state"] == "disconnected" and gone["lastSeen"], gone
        assert gw.get(f"/v1/devices/{away['address']}")[1]["stale"] is True
    finally:
        gw.stop()
