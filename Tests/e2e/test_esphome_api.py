"""The ESPHome native API (--esphome-api) against the client Home Assistant uses, aioesphomeapi:
hello, device info with the Bluetooth proxy's features and the adapter's address, the entity
list, pings, time and disconnect, plaintext and over Noise; a wrong key fails the client's own
way and the next client is served; a client that sends garbage is dropped and gattway serves on.
The Bluetooth messages are test_esphome_bluetooth.py's."""
import asyncio
import base64
import re
import socket
import subprocess
import time

import pytest
from aioesphomeapi import BluetoothProxyFeature
from aioesphomeapi.api_pb2 import GetTimeRequest, GetTimeResponse
from aioesphomeapi.core import (
    EncryptionPlaintextAPIError,
    InvalidEncryptionKeyAPIError,
    RequiresEncryptionAPIError,
)

from conftest import Gateway, binary, wait_for
from esphome_client import connected, esphome_port

KEY = base64.b64encode(bytes(range(32))).decode()
OTHER_KEY = base64.b64encode(bytes(range(100, 132))).decode()
NODE = "e2e-proxy"


def adapter_address(gw):
    status, body, _ = gw.get("/v1/adapters")
    assert status == 200, body
    return next(a["address"] for a in body["adapters"] if a["selected"])


@pytest.fixture
def plain():
    gw = Gateway(["--simulate", "--gateway-id", NODE, "--esphome-api", "127.0.0.1:0"])
    yield gw
    gw.stop()


@pytest.fixture
def keyed():
    gw = Gateway(["--simulate", "--gateway-id", NODE, "--esphome-api", "0", "--esphome-key", KEY])
    yield gw
    gw.stop()


async def check_conversation(gw, key=None):
    """The whole non-Bluetooth conversation a proxy holds with Home Assistant."""
    port = esphome_port(gw)
    address = adapter_address(gw)
    compact = address.replace(":", "").lower()
    # The client checks the node name (hello, and the Noise server hello) and, under Noise, the
    # MAC of the server hello, as Home Assistant does once it knows the device.
    client = await connected(port, key, expected_name=NODE, expected_mac=compact if key else None, keepalive=0.25)
    try:
        assert (client.api_version.major, client.api_version.minor) == (1, 10)
        info = await client.device_info()
        assert info.name == NODE
        assert info.model == "gattway"
        assert info.project_name == "gattway.gattway" and info.project_version == "0.1.0"
        assert info.esphome_version == "2025.11.0"
        assert info.mac_address == address and info.bluetooth_mac_address == address
        assert info.uses_password is False
        assert info.api_encryption_supported is (key is not None)
        flags = info.bluetooth_proxy_feature_flags_compat(client.api_version)
        assert flags == 127
        for feature in (BluetoothProxyFeature.PASSIVE_SCAN, BluetoothProxyFeature.ACTIVE_CONNECTIONS,
                        BluetoothProxyFeature.REMOTE_CACHING, BluetoothProxyFeature.PAIRING,
                        BluetoothProxyFeature.CACHE_CLEARING, BluetoothProxyFeature.RAW_ADVERTISEMENTS,
                        BluetoothProxyFeature.FEATURE_STATE_AND_MODE):
            assert flags & feature, feature
        assert await client.list_entities_services() == ([], [])
        # Keepalive pings every 0.25 s, the pong awaited 1.1 s: the connection survives only if
        # gattway answers them.
        await asyncio.sleep(1.5)
        assert (await client.device_info()).name == NODE
        # The time, asked as a device asks its client (no public call for it in aioesphomeapi).
        answer = await client._get_connection().send_message_await_response(GetTimeRequest(), GetTimeResponse)
        assert abs(answer.epoch_seconds - time.time()) < 5
    finally:
        await client.disconnect()
    assert wait_for(lambda: any("(gattway e2e): disconnected" in line for line in gw.log), 5), gw.log


def test_plaintext_device_info_entities_ping_time_disconnect(plain):
    asyncio.run(check_conversation(plain))
    assert any(re.search(r"esphome: 127\.0\.0\.1:\d+: hello from gattway e2e \(API 1\.\d+\)", line) for line in plain.log)


def test_noise_the_same_and_a_wrong_key_fails_as_the_client_says(keyed):
    asyncio.run(check_conversation(keyed, KEY))

    async def wrong_then_right():
        with pytest.raises(InvalidEncryptionKeyAPIError):
            await connected(esphome_port(keyed), OTHER_KEY)
        with pytest.raises(RequiresEncryptionAPIError):
            await connected(esphome_port(keyed))  # no key at all
        client = await connected(esphome_port(keyed), KEY)
        assert (await client.device_info()).name == NODE
        await client.disconnect()

    asyncio.run(wrong_then_right())
    assert wait_for(lambda: any("has another encryption key" in line for line in keyed.log), 5)
    assert wait_for(lambda: any("sent a plaintext frame, and this server wants encryption" in line for line in keyed.log), 5)


def test_a_key_against_a_plaintext_server_fails_as_the_client_says(plain):
    async def attempt():
        with pytest.raises(EncryptionPlaintextAPIError):
            await connected(esphome_port(plain), KEY)

    asyncio.run(attempt())
    assert wait_for(lambda: any("sent an encrypted frame, and this server has no key" in line for line in plain.log), 5)


def test_garbage_is_dropped_and_gattway_serves_on(plain):
    port = esphome_port(plain)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    assert answer == b"\x00Bad indicator byte"  # ESPHome's answer, then the close
    assert wait_for(lambda: any("sent a frame beginning with 0x47, not 0x00" in line for line in plain.log), 5)

    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"\x00\x02\x01\x0a\x10")  # a hello whose 16-byte string is not there
        assert sock.recv(4096) == b""
    assert wait_for(lambda: any("that is not protobuf" in line for line in plain.log), 5)

    async def still_served():
        client = await connected(port)
        assert (await client.device_info()).name == NODE
        await client.disconnect()

    asyncio.run(still_served())
    status, _, _ = plain.get("/v1/state")
    assert status == 200


@pytest.mark.parametrize("args, says", [
    (["--esphome-api", "0.0.0.0:0"], "without a key would let anyone who reaches it use every device"),
    (["--esphome-api", "[::]:6053"], "--esphome-api [::]:6053 without a key"),
    (["--esphome-api", "0", "--esphome-key", "c2hvcnQ="], "--esphome-key takes 32 bytes in base64"),
    (["--esphome-key", KEY], "give --esphome-api [HOST:]PORT too"),
    (["--esphome-api", "host:port"], "--esphome-api takes [HOST:]PORT"),
])
def test_options_that_are_refused(args, says):
    out = subprocess.run([binary("gattway"), "--simulate", *args], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2, out.stderr
    assert says in out.stderr


def test_the_key_can_come_from_the_environment():
    gw = Gateway(["--simulate", "--gateway-id", NODE, "--esphome-api", "127.0.0.1:0"], env={"GATTWAY_ESPHOME_KEY": KEY})
    try:
        assert any("Noise-encrypted" in line for line in gw.log)

        async def attempt():
            client = await connected(esphome_port(gw), KEY)
            assert (await client.device_info()).name == NODE
            await client.disconnect()

        asyncio.run(attempt())
    finally:
        gw.stop()
