"""Issue 35 (1): a client reads its own writes. After a route that changes a device answers — pair,
trust, connect, disconnect, gatt/refresh, bond removal — a GET of the device and one of the list,
made at once, say at least what the answer said, and the event stream tells the same. The list's
encoded body, which the gateway keeps while the list's version stays the same, is asked for just
before each request, so that a kept body older than the answer would show.

On the simulator; the twin on real BlueZ is test_read_your_writes_realbluez.py, which uses these
helpers."""
import pytest

from conftest import Gateway, wait_for
from test_reconnect import SSE

SECURE = "F0:00:00:00:00:03"  # Just Works, as in the issue
HR = "F0:00:00:00:00:01"
FIELDS = ("state", "paired", "bonded", "trusted")
TYPES = "pairing,connection,advertisement,servicesChanged"


def said(answer):
    """What an answer says about the device's state."""
    return {k: answer[k] for k in FIELDS if k in answer}


def shown(device):
    return {k: device.get(k) for k in FIELDS}


def reads_agree(gw, device, want):
    """GET the device, then the list, at once: both say `want`."""
    _, one, _ = gw.get(f"/v1/devices/{device}")
    _, listed, _ = gw.get("/v1/devices")
    entry = next((d for d in listed["devices"] if d["id"] == device), None)
    assert {k: one.get(k) for k in want} == want, f"GET /v1/devices/{device} says {shown(one)} after an answer that said {want}"
    assert entry is not None, f"{device} is not in GET /v1/devices after the answer: {listed}"
    assert {k: entry.get(k) for k in want} == want, f"GET /v1/devices lists {shown(entry)} after an answer that said {want}"


def act(gw, events, method, path, body=None):
    """Keeps the list's body (a GET), makes the request, and checks the reads that follow at once
    against its answer; the answer and where the events stood before the request."""
    assert gw.get("/v1/devices")[0] == 200
    mark = len(events.events)
    status, answer, _ = gw.request(method, path, body)
    assert status == 200, answer
    reads_agree(gw, path.split("/")[3], said(answer))
    return answer, mark


def told(events, mark, predicate, what, timeout=15):
    """The event that tells the change, from the request on; bounded."""
    found = events.wait(predicate, timeout, since=mark)
    assert found, f"no event telling {what}: {events.events[mark:]}"
    return found


def connection_told(events, mark, device, state):
    """A `connection` event with the answer's state (by this side's wish: no error), and none
    after it that says otherwise."""
    told(events, mark, lambda e: e.get("type") == "connection" and e.get("device") == device and e.get("state") == state,
         f"{device} {state}")
    mine = [e for e in events.events[mark:] if e.get("type") == "connection" and e.get("device") == device]
    assert mine[-1]["state"] == state and mine[-1].get("error") is None, mine


def advertised_agrees(events, mark, device, want):
    """An advertisement of the device heard after the change shows `want`, and so does the next
    one (nothing older comes back)."""
    def agrees(e):
        return e.get("type") == "advertisement" and e["peripheral"]["id"] == device and \
            {k: e["peripheral"].get(k) for k in want} == want
    first = told(events, mark, agrees, f"{device} advertising as {want}")
    after = events.events.index(first) + 1
    ours = lambda e: e.get("type") == "advertisement" and e["peripheral"]["id"] == device
    following = events.wait(ours, 15, since=after)
    assert following and agrees(following), f"after {shown(first['peripheral'])}: {following and shown(following['peripheral'])}"


def scan_every_advertisement(gw, devices, timeout):
    """A scan that reports every advertisement (what the events say of a device after each change
    shows), until `devices` are listed: they must be, for the list to say anything of them."""
    assert gw.post("/v1/scan", {"allowDuplicates": True})[0] == 200
    assert wait_for(lambda: set(devices) <= {d["id"] for d in gw.get("/v1/devices")[1]["devices"]}, timeout), devices


@pytest.fixture
def gw():
    gateway = Gateway(["--simulate"])
    scan_every_advertisement(gateway, [SECURE, HR], 5)
    yield gateway
    gateway.stop()


@pytest.fixture
def events(gw):
    stream = SSE(gw, f"types={TYPES}")
    yield stream
    stream.close()


def pair_agrees(gw, events, device, body=None):
    """`POST …/pair` (Just Works): paired, the reads say so, and a `pairing` event tells it."""
    answer, mark = act(gw, events, "POST", f"/v1/devices/{device}/pair", body)
    assert answer["paired"] is True, answer
    told(events, mark, lambda e: e.get("type") == "pairing" and e.get("device") == device and e.get("state") == "paired",
         "the pairing")
    return answer


def test_pair(gw, events):
    assert pair_agrees(gw, events, SECURE)["bonded"] is True


def trust_agrees(gw, events, device, trusted):
    """`POST …/trust` (from the other value): the reads, and the device's next advertisements."""
    act(gw, events, "POST", f"/v1/devices/{device}/trust", {"trusted": not trusted})
    answer, mark = act(gw, events, "POST", f"/v1/devices/{device}/trust", {"trusted": trusted})
    assert answer["trusted"] is trusted, answer
    advertised_agrees(events, mark, device, {"trusted": trusted})


def connect_then_disconnect_agree(gw, events, device, timeout):
    answer, mark = act(gw, events, "POST", f"/v1/devices/{device}/connect", {"timeout": timeout})
    assert answer["state"] == "connected", answer
    connection_told(events, mark, device, "connected")
    answer, mark = act(gw, events, "POST", f"/v1/devices/{device}/disconnect")
    assert answer["state"] == "disconnected", answer
    connection_told(events, mark, device, "disconnected")


@pytest.mark.parametrize("trusted", [True, False])
def test_trust(gw, events, trusted):
    trust_agrees(gw, events, SECURE, trusted)


def test_connect_then_disconnect(gw, events):
    connect_then_disconnect_agree(gw, events, SECURE, 10)


def test_connect_when_bluez_does_not_signal_it(gw, events):
    """As real bluetoothd was seen to do: Connect returns, the Connected=true signal never comes."""
    gw.simulator("SetFault", "string:" + SECURE, 'string:{"suppressConnectedSignal": true}')
    answer, mark = act(gw, events, "POST", f"/v1/devices/{SECURE}/connect", {"timeout": 10})
    assert answer["state"] == "connected", answer
    connection_told(events, mark, SECURE, "connected")


@pytest.mark.parametrize("connected", [True, False], ids=["connected", "disconnected"])
def test_bond_removal(gw, events, connected):
    """The issue's case: paired (which leaves the device connected), then `DELETE …/bond`. BlueZ
    forgets the device, which stays listed (stale) until it is heard again: unpaired."""
    act(gw, events, "POST", f"/v1/devices/{SECURE}/pair")
    act(gw, events, "POST", f"/v1/devices/{SECURE}/trust", {"trusted": True})
    if not connected:
        act(gw, events, "POST", f"/v1/devices/{SECURE}/disconnect")
    answer, mark = act(gw, events, "DELETE", f"/v1/devices/{SECURE}/bond")
    assert answer == {"device": SECURE, "paired": False, "bonded": False}, answer
    # Forgotten by BlueZ, trust included.
    reads_agree(gw, SECURE, {"trusted": False})
    advertised_agrees(events, mark, SECURE, {"paired": False, "bonded": False, "trusted": False})


def services(body):
    return [(s["handle"], s["uuid"], [c["handle"] for c in s.get("characteristics", [])]) for s in body["services"]]


def refresh_agrees(gw, events, device, body, want):
    """`POST …/gatt/refresh`: the table answered is the one `GET …/gatt` shows at once, the device
    shows `want` (or what `want()` says once the answer came), and a `servicesChanged` event tells it."""
    answer, mark = act(gw, events, "POST", f"/v1/devices/{device}/gatt/refresh", body)
    status, table, _ = gw.get(f"/v1/devices/{device}/gatt")
    assert status == 200 and services(table) == services(answer), (table, answer)
    reads_agree(gw, device, want() if callable(want) else want)
    told(events, mark, lambda e: e.get("type") == "servicesChanged" and e.get("device") == device, "the new table")


def test_refresh_of_a_connected_device(gw, events):
    act(gw, events, "POST", f"/v1/devices/{HR}/connect", {"timeout": 10})
    refresh_agrees(gw, events, HR, {}, {"state": "connected"})


def test_refresh_that_drops_the_bond(gw, events):
    act(gw, events, "POST", f"/v1/devices/{SECURE}/pair")
    refresh_agrees(gw, events, SECURE, {"dropBond": True}, {"paired": False, "bonded": False, "trusted": False})
