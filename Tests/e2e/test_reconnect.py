"""Issue 11: devices kept connected (autoReconnect) come back after a link loss or a bluetoothd
restart, and the same SSE and WebSocket streams see it happen and keep receiving notifications."""
import asyncio
import json
import threading
import time
import urllib.request

import websockets

from conftest import wait_for

HR = "F0:00:00:00:00:01"


class Events:
    """Events a reader thread collects, each with its arrival time (`at`, monotonic);
    `wait(predicate)` waits for a matching one."""

    def __init__(self):
        self.events, self.at, self.cond = [], [], threading.Condition()

    def add(self, event):
        with self.cond:
            self.events.append(event)
            self.at.append(time.monotonic())
            self.cond.notify_all()

    def wait(self, predicate, timeout, since=0):
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for e in self.events[since:]:
                    if predicate(e):
                        return e
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)


class SSE(Events):
    """An SSE stream read on a thread of its own."""

    def __init__(self, gw, query):
        super().__init__()
        self.resp = urllib.request.urlopen(gw.base + "/v1/events?" + query, timeout=60)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        current = {}
        try:
            for raw in self.resp:
                line = raw.decode().rstrip("\n")
                if line == "":
                    if "data" in current:
                        self.add(json.loads(current["data"]))
                    current = {}
                elif not line.startswith(":") and ":" in line:
                    key, value = line.split(":", 1)
                    current[key] = value.strip()
        except Exception:
            pass

    def close(self):
        self.resp.close()


async def ws_collect(ws, into):
    try:
        async for msg in ws:
            into.append(json.loads(msg))
    except websockets.ConnectionClosed:
        pass


async def ws_wait(got, predicate, timeout, since=0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for e in got[since:]:
            if predicate(e):
                return e
        await asyncio.sleep(0.02)
    return None


def connection(state):
    return lambda e: e.get("type") == "connection" and e.get("state") == state


def notification(e):
    return e.get("type") == "notification"


def states(events):
    return [e["state"] for e in events if e.get("type") == "connection"]


def kept_hr(gateway):
    gateway.discover(HR)
    status, body, _ = gateway.post(f"/v1/devices/{HR}/connect", {"timeout": 10, "autoReconnect": True})
    assert status == 200, body
    assert body["reconnect"] == {"autoReconnect": True, "attempt": 0}


async def streams_survive(gateway, fault, *args, loss_state_timeout=10, back_timeout=30):
    """Subscribes over WebSocket and SSE, injects `fault`, and checks both streams see the
    disconnection, the attempts and the connection, then notifications again."""
    kept_hr(gateway)
    sse = SSE(gateway, f"types=connection,notification&device={HR}&characteristic=2a37")
    got = []
    async with websockets.connect(gateway.base.replace("http://", "ws://") + "/v1/ws") as ws:
        collector = asyncio.create_task(ws_collect(ws, got))
        await ws.send(json.dumps({"op": "subscribe", "id": "1", "types": ["connection", "notification"],
                                  "device": HR, "characteristic": "2a37"}))
        assert await ws_wait(got, notification, 5), "no notification before the fault"
        assert sse.wait(notification, 5), "no SSE notification before the fault"
        ws_mark, sse_mark = len(got), len(sse.events)
        gateway.simulator(fault, *args)
        lost = await ws_wait(got, connection("disconnected"), loss_state_timeout, ws_mark)
        assert lost and lost["error"]["name"] == "peripheralDisconnected", got[ws_mark:]
        back = await ws_wait(got, connection("connected"), back_timeout, ws_mark)
        assert back, f"not reconnected: {got[ws_mark:]}"
        after = got.index(back)
        assert await ws_wait(got, notification, 10, after + 1), "no notification after the reconnection"
        # In order: lost, one or more announced attempts, connected.
        seq = states(got[ws_mark:after + 1])
        assert seq[0] == "disconnected" and seq[-1] == "connected" and "reconnecting" in seq, seq
        attempts = [e for e in got[ws_mark:after] if e.get("state") == "reconnecting"]
        assert attempts[0]["attempt"] == 1 and 0 <= attempts[0]["retryIn"] <= 5, attempts[0]
        # The same on the SSE stream, which stayed open.
        sse_back = sse.wait(connection("connected"), 10, sse_mark)
        assert sse_back, sse.events[sse_mark:]
        assert sse.wait(notification, 10, sse.events.index(sse_back) + 1), "no SSE notification after the reconnection"
        assert states(sse.events[sse_mark:sse.events.index(sse_back) + 1]) == seq
        collector.cancel()
    sse.close()
    return seq


def test_link_loss_is_reconnected_on_the_same_streams(gateway):
    seq = asyncio.run(streams_survive(gateway, "DropLink", "string:" + HR))
    assert seq == ["disconnected", "reconnecting", "connected"], seq


def test_bluetoothd_gone_for_5_s_then_everything_is_restored(gateway):
    started = time.monotonic()
    states_seen = []

    def state_events():
        with urllib.request.urlopen(gateway.base + "/v1/events?types=state", timeout=40) as resp:
            for raw in resp:
                line = raw.decode()
                if line.startswith("data:"):
                    states_seen.append(json.loads(line[5:])["state"])
                    if states_seen[-1] == "poweredOn" and "unsupported" in states_seen:
                        return

    t = threading.Thread(target=state_events, daemon=True)
    t.start()
    asyncio.run(streams_survive(gateway, "Restart", "uint32:5000", back_timeout=40))
    t.join(5)
    assert "unsupported" in states_seen and states_seen[-1] == "poweredOn", states_seen
    assert time.monotonic() - started < 40


def test_a_request_while_reconnecting_says_so(gateway):
    kept_hr(gateway)
    gateway.simulator("SetFault", "string:" + HR, 'string:{"connectError": {"message": "le-connection-abort-by-remote", "count": 1}}')
    gateway.simulator("DropLink", "string:" + HR)
    assert wait_for(lambda: gateway.get(f"/v1/devices/{HR}")[1]["state"] == "disconnected", 5)
    status, body, _ = gateway.get(f"/v1/devices/{HR}/characteristics/2a19/value")
    assert status == 409 and body["error"]["name"] == "notConnected", body
    assert "reconnecting (attempt" in body["error"]["message"], body
    device = gateway.get(f"/v1/devices/{HR}")[1]
    assert device["reconnect"]["attempt"] >= 1 and device["reconnect"]["lastError"]["name"] == "peripheralDisconnected", device
    # The first attempt (1-5 s) is refused, the second (8-12 s after it) connects.
    back = lambda: (lambda d: d["state"] == "connected" and d["reconnect"]["attempt"] == 0)(gateway.get(f"/v1/devices/{HR}")[1])
    assert wait_for(back, 25), gateway.get(f"/v1/devices/{HR}")[1].get("reconnect")


def test_an_explicit_disconnect_is_never_retried(gateway):
    kept_hr(gateway)
    events = SSE(gateway, f"types=connection&device={HR}")
    status, body, _ = gateway.post(f"/v1/devices/{HR}/disconnect")
    assert status == 200 and "reconnect" not in body, body
    assert events.wait(connection("disconnected"), 5)
    # Absence has no event: wait past the longest first delay (5 s).
    time.sleep(6)
    assert [e["state"] for e in events.events] == ["disconnected"], events.events
    assert gateway.get(f"/v1/devices/{HR}")[1]["state"] == "disconnected"
    events.close()
