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
    assert gateway.get("/v1/scan")[1]["scanning"] is False
    set_powered(True)
    assert wait_for(lambda: gateway.get("/v1/state")[1]["state"] == "poweredOn", 5)
    status, body, _ = gateway.post("/v1/scan", {})
    assert status == 200, body
    assert wait_for(lambda: gateway.get("/v1/adapters")[1]["adapters"][0]["discovering"], 5)
    assert wait_for(lambda: any(d["id"] == HR for d in gateway.get("/v1/devices")[1]["devices"]), 5)


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
