"""Issue 34, the simulator's side: `gattway-sim --adapters 2` serves GattManager1 and
LEAdvertisingManager1 as bluetoothd 5.66 does. A dbus-fast client plays the peripheral (a GATT
application and an advertisement registered on hci0, as gattway's BlueZ side or any BlueZ
peripheral program would); bleak, unchanged, on hci1 is the remote central: it scans the
advertisement with its data, connects, reads, writes and gets notifications, each reaching the
application's objects with bluetoothd's options. Simulator only: real BlueZ needs two controllers
and is covered by the peripheral role's realbluez test."""
import asyncio
import os
import subprocess
import threading

import pytest

from conftest import Gateway, binary, wait_for
from targets import current

pytestmark = pytest.mark.skipif(current()["name"] != "simulator", reason="the simulator's peripheral role (GATTWAY_TARGET=simulator)")

bleak = pytest.importorskip("bleak")
dbus_fast = pytest.importorskip("dbus_fast")
from dbus_fast import BusType, Message, MessageType, Variant  # noqa: E402
from dbus_fast.aio import MessageBus  # noqa: E402
from dbus_fast.service import PropertyAccess, ServiceInterface, dbus_method, dbus_property  # noqa: E402

HCI0, HCI1 = "00:1A:7D:DA:71:13", "00:1A:7D:DA:71:14"
SERVICE = "5a1e0001-0000-4000-8000-00805f9b34fb"
CHAR = "5a1e0002-0000-4000-8000-00805f9b34fb"
APP = "/test/app"


class Attribute(ServiceInterface):
    """An object of the application: bluetoothd tells it its handle with Properties.Set."""

    def __init__(self, interface):
        super().__init__(interface)
        self.handle = 0

    @dbus_property()
    def Handle(self) -> "q":
        return self.handle

    @Handle.setter
    def Handle(self, value: "q"):
        self.handle = value


class Service(Attribute):
    def __init__(self):
        super().__init__("org.bluez.GattService1")

    @dbus_property(access=PropertyAccess.READ)
    def UUID(self) -> "s":
        return SERVICE

    @dbus_property(access=PropertyAccess.READ)
    def Primary(self) -> "b":
        return True


class Characteristic(Attribute):
    """Reads answer "hello"; writes and subscriptions are recorded; `notify` changes Value."""

    def __init__(self):
        super().__init__("org.bluez.GattCharacteristic1")
        self.value = b"hello"
        self.calls = []

    @dbus_property(access=PropertyAccess.READ)
    def UUID(self) -> "s":
        return CHAR

    @dbus_property(access=PropertyAccess.READ)
    def Service(self) -> "o":
        return APP + "/service0"

    @dbus_property(access=PropertyAccess.READ)
    def Flags(self) -> "as":
        return ["read", "write", "notify"]

    @dbus_property(access=PropertyAccess.READ)
    def Value(self) -> "ay":
        return self.value

    @dbus_method()
    def ReadValue(self, options: "a{sv}") -> "ay":
        self.calls.append(("read", {k: v.value for k, v in options.items()}))
        return self.value

    @dbus_method()
    def WriteValue(self, value: "ay", options: "a{sv}"):
        self.calls.append(("write", bytes(value), {k: v.value for k, v in options.items()}))

    @dbus_method()
    def StartNotify(self):
        self.calls.append(("StartNotify",))

    @dbus_method()
    def StopNotify(self):
        self.calls.append(("StopNotify",))

    def notify(self, value):
        self.value = value
        self.emit_properties_changed({"Value": value})


class Advertisement(ServiceInterface):
    def __init__(self):
        super().__init__("org.bluez.LEAdvertisement1")
        self.released = False

    @dbus_property(access=PropertyAccess.READ)
    def Type(self) -> "s":
        return "peripheral"

    @dbus_property(access=PropertyAccess.READ)
    def LocalName(self) -> "s":
        return "sim-periph"

    @dbus_property(access=PropertyAccess.READ)
    def ServiceUUIDs(self) -> "as":
        return [SERVICE]

    @dbus_property(access=PropertyAccess.READ)
    def Discoverable(self) -> "b":
        # LE General Discoverable: listed by a discovery without a filter (gattway's scan) too.
        return True

    @dbus_property(access=PropertyAccess.READ)
    def ManufacturerData(self) -> "a{qv}":
        return {0xFFFF: Variant("ay", b"\x01\x02")}

    @dbus_method()
    def Release(self):
        self.released = True


@pytest.fixture
def sim_bus():
    """A `gattway-sim --adapters 2` on a private bus; its address."""
    proc = subprocess.Popen([binary("gattway-sim"), "--adapters", "2"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    first = proc.stdout.readline().strip()
    assert first.startswith("DBUS_SYSTEM_BUS_ADDRESS="), first
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()  # keep the log flowing
    yield first.split("=", 1)[1]
    proc.terminate()
    proc.wait(10)


def until(predicate, timeout=5.0):
    """bluetoothd tells the application StartNotify/StopNotify without waiting: it may come
    after the central's call returned."""
    return wait_for(predicate, timeout, interval=0.02)


class Peripheral:
    """The application and advertisement, registered on hci0 of the bus at `address`, served by
    a dbus-fast connection on an event loop of its own (so that a central in this thread, bleak
    or gattway over REST, can use them meanwhile)."""

    def __init__(self, address):
        self.service, self.characteristic, self.advertisement = Service(), Characteristic(), Advertisement()
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.bus = self.run(self.start(address))

    def run(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(15)

    async def start(self, address):
        bus = await MessageBus(bus_address=address).connect()
        bus.export(APP + "/service0", self.service)
        bus.export(APP + "/service0/char0", self.characteristic)
        bus.export("/test/adv", self.advertisement)
        for manager, member, path in (("org.bluez.GattManager1", "RegisterApplication", APP),
                                      ("org.bluez.LEAdvertisingManager1", "RegisterAdvertisement", "/test/adv")):
            reply = await bus.call(Message(destination="org.bluez", path="/org/bluez/hci0", interface=manager, member=member,
                                           signature="oa{sv}", body=[path, {}]))
            assert reply.message_type == MessageType.METHOD_RETURN, reply.body
        return bus

    def notify(self, value):
        self.loop.call_soon_threadsafe(self.characteristic.notify, value)

    def stop(self):
        self.loop.call_soon_threadsafe(self.bus.disconnect)
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture
def peripheral(sim_bus):
    app = Peripheral(sim_bus)
    yield app
    app.stop()


async def central(app):
    # bluetoothd told the handles (Properties.Set) before it answered.
    assert (app.service.handle, app.characteristic.handle) == (0x000A, 0x000C)
    characteristic = app.characteristic
    heard = {}

    def match(device, adv):
        if device.address == HCI0:
            heard["adv"] = adv
            return True
        return False

    device = await bleak.BleakScanner.find_device_by_filter(match, timeout=10, bluez={"adapter": "hci1"})
    assert device is not None, "hci1 did not hear hci0's advertisement"
    adv = heard["adv"]
    assert adv.local_name == "sim-periph"
    assert SERVICE in adv.service_uuids
    assert adv.manufacturer_data == {0xFFFF: b"\x01\x02"}

    received = asyncio.Queue()
    async with bleak.BleakClient(device) as client:
        assert bytes(await client.read_gatt_char(CHAR)) == b"hello"
        read = characteristic.calls[-1]
        assert read[0] == "read" and read[1]["device"] == "/org/bluez/hci0/dev_" + HCI1.replace(":", "_"), read
        assert read[1]["link"] == "LE" and read[1]["mtu"] > 23, read
        await client.write_gatt_char(CHAR, b"\x01\x02", response=True)
        assert characteristic.calls[-1][:2] == ("write", b"\x01\x02") and characteristic.calls[-1][2]["type"] == "request"
        await client.start_notify(CHAR, lambda _, data: received.put_nowait(bytes(data)))
        assert until(lambda: ("StartNotify",) in characteristic.calls), characteristic.calls
        for value in (b"21.5", b"21.6"):
            app.notify(value)
        got = [await asyncio.wait_for(received.get(), 5) for _ in range(2)]
        assert got == [b"21.5", b"21.6"], got
        await client.stop_notify(CHAR)
    assert until(lambda: ("StopNotify",) in characteristic.calls), characteristic.calls


def test_bleak_on_another_adapter_reaches_a_registered_application(sim_bus, peripheral, monkeypatch):
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", sim_bus)
    asyncio.run(asyncio.wait_for(central(peripheral), 60))


@pytest.fixture
def gateway_on_hci1():
    """gattway with the simulator's two adapters, using hci1 only (hci0 is the peripheral)."""
    from test_adapters import configuration

    path = configuration()
    gw = Gateway(["--simulate", path, "--adapter", "hci1"])
    yield gw
    gw.stop()
    os.remove(path)


def test_gattways_own_central_on_another_adapter_reaches_it(gateway_on_hci1):
    from test_reconnect import SSE

    gw = gateway_on_hci1
    app = Peripheral(gw.bus)
    try:
        gw.discover(HCI0, timeout=10)
        device = gw.get(f"/v1/devices/{HCI0}")[1]
        assert device.get("name") == "sim-periph", device
        status, body, _ = gw.post(f"/v1/devices/{HCI0}/connect", {"timeout": 10})
        assert status == 200 and body["state"] == "connected", body
        assert gw.get(f"/v1/devices/{HCI0}/characteristics/{CHAR}/value?format=utf8")[1]["value"] == "hello"
        status, body, _ = gw.request("PUT", f"/v1/devices/{HCI0}/characteristics/{CHAR}/value",
                                     {"value": "0102", "withResponse": True})
        assert status == 200, body
        assert app.characteristic.calls[-1][:2] == ("write", b"\x01\x02"), app.characteristic.calls
        # Left open: closing an SSE stream waits for its next keep-alive; gattway's stop ends it.
        events = SSE(gw, f"types=notification&device={HCI0}")
        status, body, _ = gw.post(f"/v1/devices/{HCI0}/characteristics/{CHAR}/notifications")
        assert status == 200, body
        assert until(lambda: ("StartNotify",) in app.characteristic.calls), app.characteristic.calls
        app.notify(b"\x21")
        assert events.wait(lambda e: e.get("type") == "notification" and e["value"] == "21", 5), events.events
        status, body, _ = gw.post(f"/v1/devices/{HCI0}/disconnect", {})
        assert status == 200, body
        assert until(lambda: ("StopNotify",) in app.characteristic.calls), app.characteristic.calls
    finally:
        app.stop()
