"""gattway as a Home Assistant Bluetooth proxy (--esphome-api), against aioesphomeapi, the client
Home Assistant's ESPHome integration runs, plaintext and over Noise: raw advertisements (every
one the simulator sends, as it sends it), scanner state, connections through the same core as
REST (slots, connections-free), services, reads, writes, notifications, pairing, cache clearing,
and the errors as the API carries them."""
import asyncio
import base64
import json
import socket
import time

import pytest
from aioesphomeapi import BluetoothProxyFeature, BluetoothScannerMode, BluetoothScannerState
from aioesphomeapi.core import BluetoothGATTAPIError

from conftest import Gateway, wait_for
from esphome_client import address_int, ad_structures, connected, esphome_port, service_data

KEY = base64.b64encode(bytes(range(32))).decode()
HR, SERIAL, SECURE = "F0:00:00:00:00:01", "F0:00:00:00:00:02", "F0:00:00:00:00:03"
EDDYSTONE, BTHOME, RUUVI = "F0:00:00:00:00:05", "F0:00:00:00:00:06", "F0:00:00:00:00:0B"
UNKNOWN = "F0:00:00:00:FF:FF"
FEATURES = BluetoothProxyFeature.ACTIVE_CONNECTIONS | BluetoothProxyFeature.REMOTE_CACHING


def start(extra=(), key=None):
    """gattway --simulate with the API, once the watch has heard the devices the tests connect
    (Home Assistant connects only devices it heard through the proxy: BlueZ knows them)."""
    args = ["--simulate", "--esphome-api", "127.0.0.1:0", *extra]
    gw = Gateway(args + (["--esphome-key", key] if key else []))
    gw.key = key
    assert wait_for(lambda: all(gw.get(f"/v1/devices/{a}")[0] == 200 for a in (HR, SERIAL, SECURE)), 10)
    return gw


@pytest.fixture(params=["plaintext", "noise"])
def proxy(request):
    gw = start(key=KEY if request.param == "noise" else None)
    yield gw
    gw.stop()


def run(coroutine, timeout=90):
    return asyncio.run(asyncio.wait_for(coroutine, timeout))


async def eventually(predicate, timeout=5):
    """Polls `predicate` without blocking the loop (the client's callbacks run meanwhile)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def client_of(gw):
    return await connected(esphome_port(gw), gw.key)


def uuid16(uuid):
    return uuid[4:8]


class Link:
    """One device connected through the proxy: the connection callbacks, its services."""

    def __init__(self, api, address):
        self.api, self.address, self.states = api, address_int(address), []

    async def connect(self):
        await self.api.bluetooth_device_connect(self.address, lambda c, m, e: self.states.append((c, m, e)), timeout=30,
                                                feature_flags=FEATURES, address_type=0)
        return self.states[-1]

    async def services(self):
        self.tree = (await self.api.bluetooth_gatt_get_services(self.address)).services
        return self.tree

    def characteristic(self, short):
        return next(c for s in self.tree for c in s.characteristics if uuid16(c.uuid) == short)

    async def subscribe(self, short, received):
        """As bleak-esphome starts notifications: the request, then the CCCD written by the client."""
        c = self.characteristic(short)
        stop, _ = await self.api.bluetooth_gatt_start_notify(self.address, c.handle, lambda h, d: received.append(bytes(d)))
        cccd = next(d.handle for d in c.descriptors if uuid16(d.uuid) == "2902")
        await self.api.bluetooth_gatt_write_descriptor(self.address, cccd, b"\x01\x00")
        return stop


class FreeSlots:
    def __init__(self, api):
        self.seen = []
        api.subscribe_bluetooth_connections_free(lambda free, limit, allocated: self.seen.append((free, limit, sorted(allocated))))

    async def until(self, expected, timeout=5):
        deadline = time.monotonic() + timeout
        while not self.seen or self.seen[-1] != expected:
            assert time.monotonic() < deadline, f"connections free {self.seen[-1:]} and not {expected}"
            await asyncio.sleep(0.05)


def rest_state(gw, address):
    status, body, _ = gw.get(f"/v1/devices/{address}")
    return body["state"] if status == 200 else None


async def observe_advertisements(bus_address, address, seen):
    """What the simulator emits for one device, as a plain D-Bus client sees it: (time, RSSI,
    service data) of each PropertiesChanged that carries an RSSI (an advertisement)."""
    from dbus_fast import Message, MessageType
    from dbus_fast.aio import MessageBus

    bus = await MessageBus(bus_address=bus_address).connect()
    path = "/org/bluez/hci0/dev_" + address.replace(":", "_")
    await bus.call(Message(destination="org.freedesktop.DBus", path="/org/freedesktop/DBus", interface="org.freedesktop.DBus",
                           member="AddMatch", signature="s",
                           body=[f"type='signal',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged',path='{path}'"]))

    def handler(msg):
        if msg.message_type == MessageType.SIGNAL and msg.member == "PropertiesChanged" and msg.path == path:
            _, changed, _ = msg.body
            if "RSSI" in changed:
                sd = {int(k[4:8], 16): bytes(v.value) for k, v in changed.get("ServiceData", type("V", (), {"value": {}})).value.items()}
                seen.append((time.monotonic(), changed["RSSI"].value, sd))

    bus.add_message_handler(handler)
    return bus


def test_raw_advertisements_every_one_as_the_simulator_sends_it(proxy):
    async def scenario():
        emitted = []
        bus = await observe_advertisements(proxy.bus, BTHOME, emitted)
        api = await client_of(proxy)
        states, reports = [], []
        api.subscribe_bluetooth_scanner_state(states.append)
        api.subscribe_bluetooth_le_raw_advertisements(
            lambda r: reports.extend((time.monotonic(), a.address, a.address_type, a.rssi, bytes(a.data)) for a in r.advertisements))
        # A payload of our own, advertised from the Eddystone beacon's next advertisement on.
        proxy.simulator("SetServiceData", "string:" + EDDYSTONE, "string:feaa", "array:byte:0x10,0xf1,0x00,0x67,0x61,0x74,0x74")
        await asyncio.sleep(5)
        await api.disconnect()
        bus.disconnect()
        return states, reports, emitted

    states, reports, emitted = run(scenario())
    # The scanner's state at once after subscribing (bleak-esphome waits for it): running, and
    # active, as BlueZ 5.66 scans.
    assert states and states[0].state == BluetoothScannerState.RUNNING
    assert states[0].mode == BluetoothScannerMode.ACTIVE and states[0].configured_mode == BluetoothScannerMode.ACTIVE

    heard = {a for _, a, _, _, _ in reports}
    for n in range(1, 0x0F):
        assert address_int(f"F0:00:00:00:00:{n:02X}") in heard, f"F0:00:00:00:00:{n:02X} never came"
    for _, address, address_type, _, data in reports:
        ad_structures(data)  # well formed
        assert address_type == (1 if address == address_int(RUUVI) else 0)

    # The BTHome sensor: every advertisement the simulator sent while subscribed, duplicates
    # included, in order, with its RSSI and its service data byte for byte.
    mine = [(rssi, service_data(data).get(0xFCD2)) for _, a, _, rssi, data in reports if a == address_int(BTHOME)]
    sent = [(rssi, sd.get(0xFCD2)) for _, rssi, sd in emitted]
    assert len(mine) >= 4, mine
    assert all(sd is not None for _, sd in mine)
    starts = [i for i in range(len(sent)) if sent[i:i + len(mine)] == mine]
    assert starts, f"the proxy's reports are not a run of what the simulator sent:\n{mine}\n{sent}"
    # None missing inside the window: at most the first (before the subscription) and the
    # last (in the batch after the disconnect) of the simulator's are not among them.
    assert len(sent) - len(mine) <= 2, (len(sent), len(mine))

    eddystone = [service_data(d).get(0xFEAA) for _, a, _, _, d in reports if a == address_int(EDDYSTONE)]
    assert bytes([0x10, 0xF1, 0x00, 0x67, 0x61, 0x74, 0x74]) in eddystone
    names = {a: v for _, a, _, _, d in reports for t, v in ad_structures(d) if t == 0x09}
    assert names[address_int(BTHOME)] == b"Sim BTHome"


def test_connect_services_read_notify_disconnect(proxy):
    async def scenario():
        api = await client_of(proxy)
        free = FreeSlots(api)
        await free.until((3, 3, []))
        link = Link(api, HR)
        connected_state = await link.connect()
        assert connected_state[0] is True and connected_state[2] == 0 and connected_state[1] >= 23
        await free.until((2, 3, [address_int(HR)]))
        # The same core as REST: the device HA connected is connected there.
        assert rest_state(proxy, HR) == "connected"

        tree = await link.services()
        assert {uuid16(s.uuid) for s in tree} >= {"180d", "180f", "180a"}
        c37 = link.characteristic("2a37")
        assert c37.properties & 0x10 and any(uuid16(d.uuid) == "2902" for d in c37.descriptors)
        # The handles are the ATT handles gattway reports.
        status, body, _ = proxy.get(f"/v1/devices/{HR}/characteristics/2a37")
        assert status == 200 and int(body["handle"], 16) == c37.handle

        battery = await api.bluetooth_gatt_read(link.address, link.characteristic("2a19").handle)
        assert len(battery) == 1 and 0 < battery[0] <= 100

        beats = []
        stop = await link.subscribe("2a37", beats)
        await asyncio.sleep(2.6)
        assert len(beats) >= 2 and all(b[0] == 0x06 and len(b) == 2 for b in beats), beats
        status, body, _ = proxy.get("/v1/devices/" + HR + "/characteristics/2a37")
        assert body["isNotifying"] is True
        await stop()
        assert wait_for(lambda: proxy.get(f"/v1/devices/{HR}/characteristics/2a37")[1]["isNotifying"] is False, 5)
        count = len(beats)
        await asyncio.sleep(1.5)
        assert len(beats) <= count + 1, "notifications go on after stop"

        await api.bluetooth_device_disconnect(link.address)
        assert link.states[-1][0] is False and link.states[-1][2] == 0
        await free.until((3, 3, []))
        assert wait_for(lambda: rest_state(proxy, HR) == "disconnected", 5)
        await api.disconnect()

    run(scenario())


def test_write_with_and_without_response_and_the_echo(proxy):
    async def scenario():
        api = await client_of(proxy)
        link = Link(api, SERIAL)
        state = await link.connect()
        assert state[:2] == (True, 185), "the serial module's MTU"
        await link.services()
        echoes = []
        await link.subscribe("ffe1", echoes)
        ffe1 = link.characteristic("ffe1").handle
        await api.bluetooth_gatt_write(link.address, ffe1, b"hello gattway", response=True)
        assert await eventually(lambda: b"hello gattway" in echoes), echoes
        await api.bluetooth_gatt_write(link.address, ffe1, b"no answer", response=False)
        assert await eventually(lambda: b"no answer" in echoes), echoes
        # A read of a characteristic it holds comes as the read's answer only, not as a notification.
        before = len(echoes)
        value = await api.bluetooth_gatt_read(link.address, ffe1)
        assert bytes(value) == b"no answer"
        await asyncio.sleep(0.5)
        assert len(echoes) == before, echoes[before:]
        await api.disconnect()

    run(scenario())


def test_errors_as_the_api_carries_them(proxy):
    async def scenario():
        api = await client_of(proxy)
        # An address the adapter does not know: not connected, "failed to establish".
        unknown = Link(api, UNKNOWN)
        assert await unknown.connect() == (False, 0, 0x3E)
        # Not connected: ESPHome's -1.
        with pytest.raises(BluetoothGATTAPIError) as refused:
            await api.bluetooth_gatt_read(address_int(HR), 0x1D, timeout=5)
        assert refused.value.error.error == -1 and refused.value.error.handle == 0x1D

        proxy.simulator("SetFault", "string:" + HR, 'string:{"attErrors": [{"uuid": "2a19", "operation": "read", "code": "0x0e"}]}')
        link = Link(api, HR)
        assert (await link.connect())[0] is True
        await link.services()
        battery = link.characteristic("2a19").handle
        with pytest.raises(BluetoothGATTAPIError) as att:
            await api.bluetooth_gatt_read(link.address, battery, timeout=10)
        assert att.value.error.error == 0x0E and att.value.error.handle == battery
        # The device's own application error: 2A39 takes only 01.
        with pytest.raises(BluetoothGATTAPIError) as app:
            await api.bluetooth_gatt_write(link.address, link.characteristic("2a39").handle, b"\x02", response=True, timeout=10)
        assert app.value.error.error == 0x80
        # A handle the device does not have.
        with pytest.raises(BluetoothGATTAPIError) as invalid:
            await api.bluetooth_gatt_read(link.address, 0x7777, timeout=10)
        assert invalid.value.error.error == 0x01
        # A characteristic without the property: refused before it reaches the device.
        with pytest.raises(BluetoothGATTAPIError) as property_missing:
            await api.bluetooth_gatt_read(link.address, link.characteristic("2a39").handle, timeout=10)
        assert property_missing.value.error.error == 0x02
        await api.disconnect()

    run(scenario())


def test_slots_link_loss_and_a_client_that_goes():
    gw = start(["--esphome-connections", "1"])
    try:
        async def scenario():
            api = await client_of(gw)
            free = FreeSlots(api)
            await free.until((1, 1, []))
            hr, serial = Link(api, HR), Link(api, SERIAL)
            assert (await hr.connect())[0] is True
            await free.until((0, 1, [address_int(HR)]))
            # No slot free: not connected, no error code (as ESPHome answers).
            assert await serial.connect() == (False, 0, 0)
            assert rest_state(gw, SERIAL) != "connected"

            # The link lost: the client is told, with the reason, and the slot is free again.
            gw.simulator("DropLink", "string:" + HR)
            await eventually(lambda: hr.states[-1][0] is False)
            assert hr.states[-1][0] is False and hr.states[-1][2] != 0, hr.states
            await free.until((1, 1, []))

            # A client that goes away: its device is disconnected, its slot freed.
            other = await client_of(gw)
            assert (await Link(other, SERIAL).connect())[0] is True
            await free.until((0, 1, [address_int(SERIAL)]))
            assert rest_state(gw, SERIAL) == "connected"
            await other.disconnect()
            await free.until((1, 1, []))
            assert wait_for(lambda: rest_state(gw, SERIAL) == "disconnected", 5)
            await api.disconnect()

        run(scenario())
    finally:
        gw.stop()


def test_one_core_with_rest(proxy):
    """A device REST connected is taken as it is; one gattway keeps connected stays connected
    when Home Assistant lets it go."""
    async def scenario():
        status, body, _ = proxy.post(f"/v1/devices/{SERIAL}/connect", {"autoReconnect": True})
        assert status == 200, body
        api = await client_of(proxy)
        link = Link(api, SERIAL)
        started = time.monotonic()
        assert (await link.connect())[:2] == (True, 185)
        assert time.monotonic() - started < 1, "connected already"
        await api.bluetooth_device_disconnect(link.address)
        await asyncio.sleep(0.5)
        assert rest_state(proxy, SERIAL) == "connected", "kept by REST"
        status, _, _ = proxy.post(f"/v1/devices/{SERIAL}/disconnect")
        assert status == 200
        await api.disconnect()

    run(scenario())


def test_pairing_unpairing_and_clearing_the_cache(proxy):
    async def scenario():
        api = await client_of(proxy)
        # Pairing needs the device connected through the proxy.
        refused = await api.bluetooth_device_pair(address_int(SECURE))
        assert refused.paired is False and refused.error == -1

        secure = Link(api, SECURE)
        assert (await secure.connect())[0] is True
        paired = await api.bluetooth_device_pair(secure.address)
        assert paired.paired is True and paired.error == 0
        status, body, _ = proxy.get(f"/v1/devices/{SECURE}")
        assert body["paired"] is True
        await secure.services()
        value = await api.bluetooth_gatt_read(secure.address, next(
            c.handle for s in secure.tree for c in s.characteristics if c.uuid.endswith("56789abc0001")))
        assert bytes(value) == b"secret-jw"
        # The cache of a paired device goes only with its bond: refused, with the reason's code.
        cleared = await api.bluetooth_device_clear_cache(secure.address)
        assert cleared.success is False and cleared.error != 0
        # Unpairing: BlueZ forgets the bond (and drops the link, which the client hears after the answer).
        unpaired = await api.bluetooth_device_unpair(secure.address)
        assert unpaired.success is True
        assert await eventually(lambda: secure.states[-1][0] is False), secure.states

        # Clearing the cache of a connected device: its services found anew, connected again.
        hr = Link(api, HR)
        assert (await hr.connect())[0] is True
        cleared = await api.bluetooth_device_clear_cache(hr.address)
        assert cleared.success is True and cleared.error == 0
        await asyncio.sleep(0.5)
        assert hr.states[-1][0] is True, "still connected for the client"
        await hr.services()
        assert len(await api.bluetooth_gatt_read(hr.address, hr.characteristic("2a19").handle)) == 1
        await api.disconnect()

    run(scenario(), timeout=120)


def varint(n):
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out


def plaintext_frame(message_type, payload):
    return b"\0" + varint(len(payload)) + varint(message_type) + payload


def test_a_client_that_does_not_read_loses_advertisements_not_its_connection_nor_the_others(tmp_path):
    """100 devices every 50 ms with 200-byte manufacturer data (about 450 KB of advertisements a
    second): a client that subscribes and never reads fills its socket, then
    its 256 KiB; from then on it loses advertisements (logged, counted) and keeps its connection,
    while another client gets them all the while; once it reads again, they come again."""
    config = {"devices": [{"address": f"F1:00:00:00:00:{d:02X}", "name": f"Adv {d}", "connectable": False,
                           "advertisingIntervalMs": 50, "manufacturerData": {"0xFFFF": "00" * 200}, "advertisingCounter": True}
                          for d in range(100)]}
    (tmp_path / "devices.json").write_text(json.dumps(config))
    gw = Gateway(["--simulate", str(tmp_path / "devices.json"), "--esphome-api", "127.0.0.1:0"])
    gw.key = None
    slow = socket.socket()
    try:
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.connect(("127.0.0.1", esphome_port(gw)))
        # Hello (client_info "slow", API 1.10), then subscribe to raw advertisements; never read.
        slow.sendall(plaintext_frame(1, b"\x0a\x04slow\x10\x01\x18\x0a") + plaintext_frame(66, b"\x08\x01"))

        async def scenario():
            api = await client_of(gw)
            arrivals = []
            api.subscribe_bluetooth_le_raw_advertisements(lambda r: arrivals.extend([time.monotonic()] * len(r.advertisements)))
            assert await eventually(lambda: any("slow" in line and "reads too slowly" in line for line in gw.log), 40), \
                "\n".join(gw.log[-20:])
            dropping = time.monotonic()
            await asyncio.sleep(3)
            before = sum(dropping - 3 <= t < dropping for t in arrivals)
            after = sum(t >= dropping for t in arrivals)
            await api.disconnect()
            return before, after

        before, after = run(scenario())
        # The other client was not held up: about 2 000 a second before and after the slow one
        # began to lose advertisements (a loaded machine may deliver fewer; none would be a stall).
        assert after >= 1500 and after >= 0.5 * before, (before, after)
        assert not any("does not read what it is sent" in line for line in gw.log), "the slow client was ended"
        # It reads again: what waited, then advertisements as they come (about 450 KB a second).
        slow.settimeout(2)
        chunks, start = [], time.monotonic()
        while time.monotonic() - start < 10:
            chunks.append((time.monotonic() - start, len(slow.recv(1 << 20))))
        assert sum(n for t, n in chunks if t >= 7) > 300_000, chunks[-20:]
    finally:
        slow.close()
        gw.stop()
