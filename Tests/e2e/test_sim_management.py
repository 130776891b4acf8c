"""Issue 36, the simulator's side: `gattway-sim --management-socket PATH` serves the kernel's
Bluetooth management events for its adapters on a Unix SOCK_SEQPACKET socket, one frame per
packet as the kernel frames them (mgmt-api.txt): read here from outside, as any client would,
with Python's socket module. Simulator only (the real kernel's socket is the lab's)."""
import asyncio
import json
import os
import select
import signal
import socket
import struct
import subprocess
import threading

import pytest

from conftest import binary
from targets import current

pytestmark = pytest.mark.skipif(current()["name"] != "simulator", reason="the simulator's management stream (GATTWAY_TARGET=simulator)")

dbus_fast = pytest.importorskip("dbus_fast")
from dbus_fast import Message, MessageType  # noqa: E402
from dbus_fast.aio import MessageBus  # noqa: E402

DEVICE = "C0:FF:EE:00:00:01"
CONFIG = {"devices": [{"address": DEVICE, "addressType": "random", "name": "Mgmt", "rssi": -60, "rssiJitter": 0,
                       "advertisingIntervalMs": 50, "manufacturerData": {"0x0059": "010203"}, "connectDelayMs": 5}]}


@pytest.fixture
def sim(tmp_path):
    """gattway-sim with the management socket; (bus address, socket path, process)."""
    config = tmp_path / "devices.json"
    config.write_text(json.dumps(CONFIG))
    path = str(tmp_path / "mgmt.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)  # a stale socket file, left by an earlier run
    listener.close()
    proc = subprocess.Popen([binary("gattway-sim"), "--config", str(config), "--management-socket", path],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline().strip()
    assert first.startswith("DBUS_SYSTEM_BUS_ADDRESS="), first + proc.stderr.read()
    log = []
    reader = threading.Thread(target=lambda: log.extend(proc.stdout), daemon=True)
    reader.start()
    yield first.split("=", 1)[1], path, proc, (reader, log)
    if proc.poll() is None:
        proc.terminate()
        proc.wait(10)


def frames(client, count, code, timeout=5.0):
    """The next `count` frames with event `code` (others skipped): (index, parameters)."""
    found = []
    while len(found) < count:
        ready, _, _ = select.select([client], [], [], timeout)
        assert ready, f"no frame 0x{code:04x} within {timeout} s"
        packet = client.recv(65541)
        event, index, length = struct.unpack_from("<HHH", packet)
        assert length == len(packet) - 6, "one frame per packet, its length the header's"
        if event == code:
            found.append((index, packet[6:]))
    return found


async def connect(address):
    return await MessageBus(bus_address=address).connect()


async def call(bus, path, interface, member, signature="", body=()):
    reply = await bus.call(Message(destination="org.bluez", path=path, interface=interface, member=member,
                                   signature=signature, body=list(body)))
    assert reply.message_type == MessageType.METHOD_RETURN, reply.body
    return reply.body


def test_clients_read_device_found_and_link_events(sim):
    address, path, proc, (reader, log) = sim
    clients = []
    for _ in range(2):
        client = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        client.connect(path)
        clients.append(client)
    loop = asyncio.new_event_loop()
    bus = loop.run_until_complete(connect(address))
    # Discovery is per D-Bus client: this connection keeps it running while the frames are read.
    loop.run_until_complete(call(bus, "/org/bluez/hci0", "org.bluez.Adapter1", "StartDiscovery"))
    wire = bytes.fromhex(DEVICE.replace(":", ""))[::-1]
    for client in clients:
        for index, params in frames(client, 3, 0x0012):
            assert index == 0
            assert params[:6] == wire and params[6] == 0x02  # LE random
            rssi, flags, length = struct.unpack_from("<bIH", params, 7)
            assert (rssi, flags) == (-60, 0)
            assert params[14:] == bytes.fromhex("020106" "05094d676d74" "06ff5900010203")
            assert length == len(params) - 14

    device = "/org/bluez/hci0/dev_" + DEVICE.replace(":", "_")
    loop.run_until_complete(call(bus, device, "org.bluez.Device1", "Connect"))
    (index, params), = frames(clients[0], 1, 0x000B)
    assert (index, params[:7], struct.unpack_from("<IH", params, 7)) == (0, wire + b"\x02", (0x08, 0))
    loop.run_until_complete(call(bus, device, "org.bluez.Device1", "Disconnect"))
    (index, params), = frames(clients[0], 1, 0x000C)
    assert (index, params) == (0, wire + b"\x02\x02")  # terminated by the local host
    # The second client, which read nothing since, got them too.
    assert [f[1][7] for f in frames(clients[1], 1, 0x000C)] == [0x02]
    bus.disconnect()
    loop.close()

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0
    reader.join(10)
    assert not os.path.exists(path), "the socket file is removed on exit"
    assert any("management socket:" in line and "2 clients" in line for line in log), log[-5:]
    for client in clients:
        client.close()
