"""Issue 4: the WebSocket checked with a client nobody here wrote (the `websockets` package):
ping/pong, close codes, fragmented and large messages."""
import asyncio
import json

import pytest
import websockets
from websockets.exceptions import ConnectionClosed


def url(gw):
    return gw.base.replace("http://", "ws://") + "/v1/ws"


def test_ping_pong(gateway):
    async def run():
        async with websockets.connect(url(gateway)) as ws:
            latency = await asyncio.wait_for(await ws.ping(b"gattway"), 5)
            assert latency >= 0
    asyncio.run(run())


def test_fragmented_message_is_reassembled(gateway):
    async def run():
        async with websockets.connect(url(gateway)) as ws:
            parts = ['{"op": "fly', '", "id": ', '"frag"}']
            await ws.send(iter(parts))
            reply = json.loads(await asyncio.wait_for(ws.recv(), 5))
            assert reply["id"] == "frag" and "unknown op" in reply["error"]["message"]
    asyncio.run(run())


def test_large_message_within_limit(gateway):
    async def run():
        async with websockets.connect(url(gateway), max_size=None) as ws:
            big = json.dumps({"op": "fly", "id": "x" * 60000})
            await ws.send(big)
            reply = json.loads(await asyncio.wait_for(ws.recv(), 5))
            assert reply["id"] == "x" * 60000
    asyncio.run(run())


def test_oversize_message_closes_with_1009(gateway):
    async def run():
        async with websockets.connect(url(gateway), max_size=None) as ws:
            await ws.send("x" * (70 * 1024))
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), 5)
            assert closed.value.rcvd.code == 1009
    asyncio.run(run())


def test_invalid_utf8_and_unmasked_frames_are_closed(gateway):
    """Below the library's own checks: a raw socket sends what a good client never would."""
    import os
    from test_streams import raw_websocket

    def close_code_after(frame):
        sock = raw_websocket(gateway)
        sock.sendall(frame)
        sock.settimeout(5)
        data = b""
        while len(data) < 4:
            chunk = sock.recv(64)
            if not chunk:
                break
            data += chunk
        sock.close()
        assert data[0] == 0x88, data  # a close frame
        return int.from_bytes(data[2:4], "big")

    mask = os.urandom(4)
    bad = b"\xff\xfe"
    assert close_code_after(bytes([0x81, 0x80 | len(bad)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(bad))) == 1007
    assert close_code_after(bytes([0x81, 0x02]) + b"hi") == 1002  # unmasked client frame


def test_clean_close_is_echoed(gateway):
    async def run():
        ws = await websockets.connect(url(gateway))
        await ws.close(code=4000, reason="bye")
        assert ws.protocol.close_rcvd is not None and ws.protocol.close_rcvd.code == 4000
    asyncio.run(run())
