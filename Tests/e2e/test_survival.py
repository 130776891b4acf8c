"""Survival: one gattway process through 50 000 notifications and 5 000 REST reads, bounded in
time. The process must stay up, deliver every notification in order (or say what it dropped),
keep answering reads, and not grow: before the fix a closure slot nested one frame deeper per
event and the process died of a stack overflow after about 15 000 events."""
import asyncio
import json
import os
import tempfile
import threading
import time

import websockets

from conftest import Gateway, wait_for

DEVICE = "F0:00:00:00:00:21"
NOTIFICATIONS = 50_000
READS = 5_000


def config():
    counter = lambda uuid: {"uuid": uuid, "flags": ["read", "notify"], "value": "0000000000000000",
                            "generator": "counter", "notifyIntervalMs": 1}
    return {"devices": [{"address": DEVICE, "name": "Survival", "uuids": ["feed"], "advertisingIntervalMs": 100,
                         "services": [{"uuid": "feed", "characteristics": [counter("fe01"), counter("fe02")]}]}]}


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024


def test_fifty_thousand_notifications_and_reads_in_one_process():
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(config(), f)
    # As fast as reads go: no --rate-limit (this is the core under load, not the limits).
    gw = Gateway(["--simulate", f.name, "--rate-limit", "0"])
    try:
        gw.discover(DEVICE)
        assert gw.post(f"/v1/devices/{DEVICE}/connect", {"timeout": 10})[0] == 200
        reads = {"done": 0, "failed": 0}
        stop = threading.Event()

        def reader():
            while reads["done"] < READS and not stop.is_set():
                status, body, _ = gw.get(f"/v1/devices/{DEVICE}/characteristics/fe01/value")
                reads["done" if status == 200 and len(body["value"]) == 16 else "failed"] += 1
        thread = threading.Thread(target=reader, daemon=True)

        async def listen():
            url = gw.base.replace("http://", "ws://") + "/v1/ws"
            received = {"fe01": 0, "fe02": 0}
            last = {}
            dropped = 0
            rss = []
            async with websockets.connect(url, max_queue=None) as ws:
                for i, uuid in enumerate(("fe01", "fe02")):
                    await ws.send(json.dumps({"op": "subscribe", "id": str(i), "device": DEVICE, "characteristic": uuid}))
                thread.start()
                deadline = time.monotonic() + 150
                while sum(received.values()) < NOTIFICATIONS:
                    assert time.monotonic() < deadline, f"only {received} notifications in 150 s"
                    msg = json.loads(await asyncio.wait_for(ws.recv(), 10))
                    if msg.get("type") == "dropped":
                        dropped += msg["count"]
                    elif msg.get("type") == "notification":
                        uuid = msg["characteristic"]["uuid"][4:8]
                        received[uuid] += 1
                        seq = msg["sequence"]
                        assert seq > last.get(uuid, 0), "notifications out of order"
                        last[uuid] = seq
                        total = sum(received.values())
                        if total % 5_000 == 0:
                            rss.append(rss_mb(gw.proc.pid))
            return received, last, dropped, rss

        received, last, dropped, rss = asyncio.run(listen())
        stop.set()
        thread.join(30)
        assert gw.proc.poll() is None, "gattway died"
        # Every notification counted: received, or reported dropped (sequence gaps).
        assert sum(last.values()) - sum(received.values()) <= dropped
        assert reads["failed"] == 0 and reads["done"] > 0
        # Flat memory: the last samples within 8 MB of the ones after warm-up.
        assert max(rss[-3:]) - min(rss[1:4]) < 8, rss
        print(f"\n[survival] {sum(received.values())} notifications, {dropped} dropped, {reads['done']} reads,"
              f" RSS {rss[1]:.1f} → {rss[-1]:.1f} MB")
        assert gw.get("/v1/state")[0] == 200
    finally:
        gw.stop()
        os.unlink(f.name)
