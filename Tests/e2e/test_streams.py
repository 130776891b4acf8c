"""Issue 4: live events over WebSocket and Server-Sent Events, against the simulator."""
import asyncio
import json
import os
import resource
import socket
import base64
import threading
import time
import urllib.request

import pytest
import websockets

HR = "F0:00:00:00:00:01"
SERIAL = "F0:00:00:00:00:02"


@pytest.fixture
def hr(gateway):
    gateway.discover(HR, SERIAL)
    for device in (HR, SERIAL):
        assert gateway.post(f"/v1/devices/{device}/connect", {"timeout": 10})[0] == 200
    return gateway


def ws_url(gw):
    return gw.base.replace("http://", "ws://") + "/v1/ws"


def char_path(gw, device, uuid):
    """The simulator's D-Bus path of a characteristic (BlueZ's layout: handles in the path)."""
    _, c, _ = gw.get(f"/v1/devices/{device}/characteristics/{uuid}")
    dev = "dev_" + device.replace(":", "_")
    return f"/org/bluez/hci0/{dev}/service{int(c['service'], 16):04x}/char{int(c['handle'], 16):04x}"


async def subscribe(ws, req_id="1", **selection):
    await ws.send(json.dumps({"op": "subscribe", "id": req_id, **selection}))
    while True:
        msg = json.loads(await asyncio.wait_for(ws.recv(), 5))
        if msg.get("id") == req_id:
            assert msg["op"] == "ack", msg
            return msg["subscription"]


async def notifications(ws, count, timeout):
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        msg = json.loads(await asyncio.wait_for(ws.recv(), max(deadline - time.monotonic(), 0.01)))
        if msg.get("type") == "notification":
            got.append(msg)
    return got


def test_websocket_receives_heart_rate_notifications(hr):
    async def run():
        async with websockets.connect(ws_url(hr)) as ws:
            sub = await subscribe(ws, device=HR, characteristic="2a37")
            started = time.monotonic()
            got = await notifications(ws, 3, 3.5)
            assert time.monotonic() - started <= 3.5
            assert [m["sequence"] for m in got] == [1, 2, 3]
            assert all(m["subscription"] == sub and m["characteristic"]["uuid"].startswith("00002a37") for m in got)
            assert all(m["value"].startswith("06") for m in got)
            assert got[0]["seq"] < got[1]["seq"] < got[2]["seq"]
    asyncio.run(run())


def sse_events(gw, query, count, timeout, headers=None, opened=None):
    """Reads `count` SSE events (dicts with id/event/data) from /v1/events?query; sets
    `opened` once the stream is established (the gateway subscribes the client before it
    answers)."""
    req = urllib.request.Request(gw.base + "/v1/events?" + query, headers=headers or {})
    events, current = [], {}
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        assert resp.headers["Content-Type"] == "text/event-stream"
        if opened:
            opened.set()
        deadline = time.monotonic() + timeout
        while len(events) < count and time.monotonic() < deadline:
            line = resp.readline().decode().rstrip("\n")
            if line == "":
                if "data" in current:
                    current["data"] = json.loads(current["data"])
                    events.append(current)
                current = {}
            elif not line.startswith(":") and ":" in line:
                key, value = line.split(":", 1)
                current[key] = value.strip()
    return events


def test_sse_receives_heart_rate_notifications(hr):
    started = time.monotonic()
    events = sse_events(hr, f"device={HR}&characteristic=2a37", 3, 3.5)
    assert time.monotonic() - started <= 3.6
    assert [e["data"]["sequence"] for e in events] == [1, 2, 3]
    assert all(e["event"] == "notification" and int(e["id"]) == e["data"]["seq"] for e in events)


def test_sse_last_event_id_replays(hr):
    first = sse_events(hr, f"device={HR}&characteristic=2a37", 2, 3)
    replayed = sse_events(hr, f"device={HR}&characteristic=2a37", 1, 3, headers={"Last-Event-ID": first[0]["id"]})
    assert int(replayed[0]["id"]) == int(first[1]["id"])


def test_hundred_websocket_clients_share_one_bluez_subscription(hr):
    path = char_path(hr, HR, "2a37")
    hr.simulator("ResetCounters")

    async def run():
        clients = [await websockets.connect(ws_url(hr)) for _ in range(100)]
        for ws in clients:
            await subscribe(ws, device=HR, characteristic="2a37")
        assert hr.call_count("StartNotify", path) == 1
        results = await asyncio.gather(*(notifications(ws, 3, 5) for ws in clients))
        # Every client saw the same notifications (the same hub sequence numbers).
        window = [m["seq"] for m in results[0]]
        for got in results:
            assert [m["seq"] for m in got] == window
        assert hr.call_count("StopNotify", path) == 0
        for ws in clients[:-1]:
            await ws.close()
        await asyncio.sleep(0.3)
        assert hr.call_count("StopNotify", path) == 0
        await clients[-1].close()
    asyncio.run(run())
    from conftest import wait_for
    assert wait_for(lambda: hr.call_count("StopNotify", path) == 1, 5)


def test_abrupt_disconnect_releases_the_subscription(hr):
    path = char_path(hr, HR, "2a37")
    hr.simulator("ResetCounters")
    sock = raw_websocket(hr)
    frame_send(sock, json.dumps({"op": "subscribe", "id": "1", "device": HR, "characteristic": "2a37"}))
    sock.recv(4096)
    assert hr.call_count("StartNotify", path) == 1
    sock.close()  # no close frame
    from conftest import wait_for
    assert wait_for(lambda: hr.call_count("StopNotify", path) == 1, 5)


def raw_websocket(gw):
    host, port = gw.base.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall((f"GET /v1/ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101")
    return sock


def frame_send(sock, text):
    payload = text.encode()
    mask = os.urandom(4)
    header = bytes([0x81])
    n = len(payload)
    header += bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + n.to_bytes(2, "big")
    sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])


def test_a_stalled_sse_client_is_told_how_many_events_it_lost(hr):
    """An SSE client that stops reading while notifications pour in loses the oldest; once it
    reads again it gets `event: dropped` (no `id:`) with their count, then newer events."""
    from test_diagnostics import metrics
    import http.client
    host, port = hr.base.removeprefix("http://").split(":")
    stalled = http.client.HTTPConnection(host, int(port), timeout=30)
    stalled.sock = socket.socket()
    stalled.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: the window stays small
    stalled.sock.connect((host, int(port)))
    stalled.request("GET", f"/v1/events?device={SERIAL}&characteristic=ffe1")
    resp = stalled.getresponse()
    assert resp.status == 200

    def lost():
        return metrics(hr)[0].get(("gattway_events_total", 'what="dropped"'), 0)
    # Echoes of writes without response, in bursts (within the 64 commands a socket may have
    # waiting), until the gateway has dropped some for it.
    from websockets.sync.client import connect as ws_connect
    with ws_connect(ws_url(hr), open_timeout=10) as writer:
        for burst in range(400):
            for i in range(32):
                writer.send(json.dumps({"op": "write", "id": f"{burst}.{i}", "device": SERIAL, "characteristic": "ffe1",
                                        "value": "ab" * 180, "withResponse": False}))
            for _ in range(32):
                assert json.loads(writer.recv(timeout=10))["op"] == "result"
            if burst % 4 == 3 and lost():
                break
    assert lost(), "the stalled client lost nothing"
    fields = {}
    while True:
        line = resp.readline().decode().rstrip("\n")
        assert line or fields, "the stream ended"
        if line == "":
            if fields.get("event") == "dropped":
                break
            fields = {}
        elif not line.startswith(":"):
            key, _, value = line.partition(": ")
            fields[key] = value
    assert "id" not in fields, fields
    assert json.loads(fields["data"])["count"] >= 1, fields
    stalled.close()


def test_slow_client_does_not_delay_others_and_stays_bounded(hr):
    """One client subscribes to the serial echo and never reads; a second writes 300 values
    and must see every echo promptly. The gateway's memory must not grow with the backlog."""
    slow = raw_websocket(hr)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    frame_send(slow, json.dumps({"op": "subscribe", "id": "1", "device": SERIAL, "characteristic": "ffe1"}))
    rss_before = rss_kb(hr.proc.pid)

    async def run():
        async with websockets.connect(ws_url(hr)) as ws:
            await subscribe(ws, device=SERIAL, characteristic="ffe1", format="utf8")
            started = time.monotonic()
            latencies = []
            for i in range(300):
                sent = time.monotonic()
                payload = f"{i:04d}" + "x" * 150
                await ws.send(json.dumps({"op": "write", "id": f"w{i}", "device": SERIAL, "characteristic": "ffe1",
                                          "value": payload, "format": "utf8", "withResponse": True}))
                echoed = False
                while not echoed:
                    msg = json.loads(await asyncio.wait_for(ws.recv(), 5))
                    echoed = msg.get("type") == "notification" and msg["value"] == payload
                latencies.append(time.monotonic() - sent)
            return time.monotonic() - started, sorted(latencies)
    total, latencies = asyncio.run(run())
    rss_after = rss_kb(hr.proc.pid)
    p99 = latencies[int(len(latencies) * 0.99) - 1]
    print(f"\n300 echoes with a stalled client: {total:.2f} s, p50 {latencies[150]*1000:.1f} ms, "
          f"p99 {p99*1000:.1f} ms, gateway RSS {rss_before} -> {rss_after} KiB")
    assert p99 < 0.5, "a stalled client delayed the others"
    assert rss_after - rss_before < 30_000, "memory grew with the stalled client's backlog"
    # The stalled client, once it reads, is told how much it lost (or was disconnected).
    slow.setblocking(False)
    data = b""
    try:
        while True:
            chunk = slow.recv(65536)
            if not chunk:
                break
            data += chunk
    except BlockingIOError:
        pass
    slow.close()
    assert b'"dropped"' in data or len(data) < 300 * 150, "the stalled client was neither told of drops nor cut off"


def test_write_over_websocket_echoes_as_notification(hr):
    async def run():
        async with websockets.connect(ws_url(hr)) as listener, websockets.connect(ws_url(hr)) as writer:
            await subscribe(listener, device=SERIAL, characteristic="ffe1", format="utf8")
            await writer.send(json.dumps({"op": "write", "id": "7", "device": SERIAL, "characteristic": "ffe1",
                                          "value": "hello ws", "format": "utf8", "withResponse": False}))
            reply = json.loads(await asyncio.wait_for(writer.recv(), 5))
            assert reply == {"op": "result", "id": "7", "device": SERIAL, "characteristic": reply["characteristic"], "written": 8}
            got = await notifications(listener, 1, 3)
            assert got[0]["value"] == "hello ws"
    asyncio.run(run())


def test_websocket_read_and_errors(hr):
    async def run():
        async with websockets.connect(ws_url(hr)) as ws:
            await ws.send(json.dumps({"op": "read", "id": "r", "device": HR, "characteristic": "2a19"}))
            reply = json.loads(await asyncio.wait_for(ws.recv(), 5))
            assert reply["op"] == "result" and reply["id"] == "r" and reply["length"] == 1
            await ws.send(json.dumps({"op": "subscribe", "id": "e1", "device": HR, "characteristic": "2a38"}))
            reply = json.loads(await asyncio.wait_for(ws.recv(), 5))
            assert reply["op"] == "error" and reply["id"] == "e1" and reply["error"]["domain"] == "CBATTErrorDomain"
            await ws.send("not json")
            reply = json.loads(await asyncio.wait_for(ws.recv(), 5))
            assert reply["op"] == "error" and reply["error"]["name"] == "invalidParameters"
            await ws.send(json.dumps({"op": "fly", "id": "x"}))
            reply = json.loads(await asyncio.wait_for(ws.recv(), 5))
            assert reply["op"] == "error" and "unknown op" in reply["error"]["message"]
    asyncio.run(run())


def test_scan_streams_advertisements(gateway):
    result, opened = {}, threading.Event()

    def reader():
        result["events"] = sse_events(gateway, "types=advertisement", 3, 5, opened=opened)
    t = threading.Thread(target=reader)
    t.start()
    assert opened.wait(5)  # events are not replayed without Last-Event-ID: open the stream first
    gateway.post("/v1/scan", {})
    t.join(6)
    events = result["events"]
    assert len(events) == 3
    assert all(e["event"] == "advertisement" and e["data"]["peripheral"]["id"].startswith("F0:00") for e in events)


def test_connection_events(gateway):
    gateway.discover(HR)
    result, opened = {}, threading.Event()
    t = threading.Thread(target=lambda: result.update(events=sse_events(gateway, f"types=connection&device={HR}", 2, 8, opened=opened)))
    t.start()
    assert opened.wait(5)
    gateway.post(f"/v1/devices/{HR}/connect", {"timeout": 5})
    gateway.simulator("DropLink", "string:" + HR)
    t.join(9)
    states = [(e["data"]["state"], e["data"].get("error", {}).get("name")) for e in result["events"]]
    assert states == [("connected", None), ("disconnected", "peripheralDisconnected")]


def test_sse_keepalive_and_bad_selection(gateway):
    status, body, _ = gateway.get("/v1/events?types=bogus")
    assert status == 400 and body["error"]["name"] == "invalidParameters"
    status, body, _ = gateway.get("/v1/events?characteristic=2a37")
    assert status == 400


def test_sse_sends_keepalive_comments():
    from conftest import Gateway
    gw = Gateway(["--simulate", "--keepalive", "0.3"])
    try:
        with urllib.request.urlopen(gw.base + "/v1/events?types=state", timeout=5) as resp:
            lines = [resp.readline() for _ in range(5)]
        assert b": keep-alive\n" in lines, lines
    finally:
        gw.stop()
