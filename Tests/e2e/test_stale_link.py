"""Issue 31 on the simulator: a kept device whose link is lost while the adapter's kernel keeps a
stale one (every Connect then fails at once with "Input/output error" while the device advertises
as ever, as measured with the lab's emulated controllers; the simulator's `staleLink` fault) is
connected again by itself: two connects in a row that fail so reset the adapter, and both holds
deliver again. Without the reset it never comes back: every attempt fails the same way."""
import asyncio
import time

from conftest import wait_for
from test_diagnostics import metrics
from test_reconnect import HR, SSE, connection, kept_hr, notification

BATTERY = "2a19"
HEART_RATE = "2a37"
# Two failed connects (each 1-5 s after the last failure), the reset, one more attempt once the
# device is heard again: well within this.
BACK = 30


def resets(gateway):
    samples, _ = metrics(gateway)
    return samples.get(("gattway_adapter_resets_total", ""))


def test_a_stale_link_is_cleared_by_resetting_the_adapter_and_both_holds_deliver(gateway):
    kept_hr(gateway)
    # The second hold, over REST (the battery notifies every 5 s; SetValue makes it notify now).
    status, body, _ = gateway.post(f"/v1/devices/{HR}/characteristics/{BATTERY}/notifications")
    assert status == 200, body
    # The first hold: an SSE stream of the heart rate (with its device's connection and the
    # adapter's state); another stream sees every notification of the device (the battery's).
    events = SSE(gateway, f"types=connection,notification&device={HR}&characteristic={HEART_RATE}")
    battery = SSE(gateway, f"types=notification&device={HR}")
    adapter = SSE(gateway, "types=state")
    assert events.wait(lambda e: notification(e) and e["characteristic"]["uuid"].startswith("00002a37"), 5), "no heart rate before the fault"
    assert resets(gateway) == 0
    mark = len(events.events)
    gateway.simulator("SetFault", "string:" + HR, 'string:{"staleLink": true}')
    lost = events.wait(connection("disconnected"), 5, mark)
    assert lost and lost["error"]["name"] == "peripheralDisconnected", events.events[mark:]
    started = time.monotonic()
    back = events.wait(connection("connected"), BACK, mark)
    seen = [(e.get("type"), e.get("state"), (e.get("error") or {}).get("name")) for e in events.events[mark:]]
    assert back, f"not connected again within {BACK} s: {seen}; {gateway.get(f'/v1/devices/{HR}')[1].get('reconnect')}"
    took = time.monotonic() - started
    after = events.events.index(back)
    # The adapter went off and on on the way, once; the failed attempts said why, in real codes.
    states = [e["state"] for e in adapter.events]
    assert "poweredOff" in states and states[-1] == "poweredOn", states
    assert resets(gateway) == 1
    failures = [e["error"] for e in events.events[mark:after]
                if e.get("type") == "connection" and e.get("state") == "reconnecting" and e.get("attempt", 0) > 1]
    assert len(failures) >= 2 and all(f["name"] == "connectionFailed" and f["code"] == 10 for f in failures[:2]), failures
    assert "Input/output error" in failures[0].get("detail", ""), failures[0]
    assert "the adapter (hci0) was reset" in failures[1]["message"], failures[1]
    recorded = [e for e in gateway.get("/v1/errors")[1]["errors"] if e["operation"] == "reconnect" and e["device"] == HR]
    assert recorded and recorded[0]["error"]["name"] == "connectionFailed", recorded
    # Both holds deliver: the heart rate on its own, the battery when it changes.
    assert events.wait(lambda e: notification(e) and e["characteristic"]["uuid"].startswith("00002a37"), 10, after + 1), \
        "no heart rate after the reconnection"
    gateway.simulator("SetValue", "string:" + HR, "string:" + BATTERY, "array:byte:0x2a", "boolean:true")
    assert battery.wait(lambda e: e["characteristic"]["uuid"].startswith("00002a19") and e["value"] == "2a", 10), \
        "no battery notification after the reconnection"
    print(f"\n[stale link] connected again {took:.1f} s after the loss, the adapter reset once")
    device = gateway.get(f"/v1/devices/{HR}")[1]
    assert wait_for(lambda: gateway.get(f"/v1/devices/{HR}")[1]["reconnect"] == {"autoReconnect": True, "attempt": 0}, 5), device
    for stream in (events, battery, adapter):
        stream.close()


def test_a_serial_port_holding_through_a_stale_link_echoes_again(gateway):
    """The serial door's link, made again by itself for a client that holds through link loss,
    meets the same stale link: its attempts (each once the module is heard) fail as the kept
    device's did, the adapter is reset, and the echo comes back."""
    from test_serial import HM10, connected, receive_bytes, ws_url
    from websockets.sync.client import connect as ws_connect

    connected(gateway)
    with ws_connect(ws_url(gateway, HM10, write=True, onLinkLoss="hold")) as holding:
        holding.send("before")
        assert receive_bytes(holding, 6) == b"before"
        gateway.simulator("SetFault", "string:" + HM10, 'string:{"staleLink": true}')
        assert wait_for(lambda: gateway.get(f"/v1/devices/{HM10}")[1]["state"] == "disconnected", 5)
        started = time.monotonic()
        holding.send("after the stale link")
        assert receive_bytes(holding, 20, timeout=45) == b"after the stale link"
        print(f"\n[stale link] serial port echoing again {time.monotonic() - started:.1f} s after the loss")
    assert resets(gateway) == 1
    assert any("connecting again failed" in line and "connectionFailed" in line for line in gateway.log), "the failed attempts were logged"


def test_a_proxy_client_connects_again_through_a_stale_link():
    """The ESPHome proxy's clients connect again by themselves (Home Assistant retries, as
    bleak-retry-connector does): their connects through gattway meet the stale link, the second
    failure resets the adapter, and the next connect succeeds."""
    from test_esphome_bluetooth import HR as PROXIED, Link, client_of, run, start

    gw = start()
    try:
        async def scenario():
            api = await client_of(gw)
            link = Link(api, PROXIED)
            assert (await link.connect())[0] is True
            gw.simulator("SetFault", "string:" + PROXIED, 'string:{"staleLink": true}')
            deadline = time.monotonic() + 5
            while link.states[-1][0] is not False:
                assert time.monotonic() < deadline, link.states
                await asyncio.sleep(0.05)
            results = []
            for _ in range(4):  # a client's retries
                await asyncio.sleep(1)
                results.append(await link.connect())
                if results[-1][0] is True:
                    break
            assert results[-1][0] is True, results
            assert [r[0] for r in results[:2]] == [False, False] and all(r[2] != 0 for r in results[:2]), results
            await api.disconnect()

        run(scenario())
        assert resets(gw) == 1
    finally:
        gw.stop()
