"""Issue 23 against real BlueZ (the realbluez VM; skipped on the simulator, where
test_pairing.py is its twin): gattway, with `--pairing-io KeyboardDisplay`, pairs with RB-Periph
through the API by passkey entry. The peripheral's side shows the passkey: a DisplayOnly agent
(realbluez_agent.py, run in the guest for these tests as bluetoothd's default agent, which the
peripheral's side uses) writes it in its log; the test reads it there, as a user reads a device's
screen, and enters it with `POST …/pairing`. The characteristic that needs an authenticated link
(…56789abc0002, ATT 0x0e before) then reads; `DELETE …/bond` closes it again. And a passkey
known up front (`--pairing-keys`): the same read pairs by itself.

In the lab one bluetoothd serves both adapters: gattway's `Pair` uses gattway's agent for hci0,
the peripheral's side (hci1) the default agent."""
import json
import os
import re
import time

import pytest

import targets
from conftest import Gateway, end_lab_links, wait_for
from test_reconnect import SSE
from test_reliability_realbluez import forget_pairings, lab

T = targets.current()
pytestmark = pytest.mark.skipif(T["name"] != "realbluez", reason="needs the realbluez VM (GATTWAY_TARGET=realbluez)")
DEVICE = T["secure"]
MITM = "12345678-1234-5678-1234-56789abc0002"


AGENT_LOG = "test-agent.log"


@pytest.fixture(autouse=True)
def test_agent(request):
    """realbluez_agent.py in the guest (copied to the state directory, which the guest mounts at
    /run/realbluez), the default agent while a test runs — DisplayOnly, or what the test's
    `agent` mark says (capability, passkey) —; then both sides unpaired for the next
    test. bluetoothd 5.66 serving both sides crashed ("free(): invalid pointer") in 4 of 5 runs
    when the peripheral's bond was removed right after the central's; after a restart of
    bluetoothd, in 0 of 4."""
    forget_pairings()
    # The teardown before restarted bluetoothd; a link that outlived it is ended here (a
    # clean-clone run: the test after the wrong-passkey one could not connect for 20 s).
    end_lab_links("from the test before")
    state = T["state_dir"]
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "realbluez_agent.py")) as f, \
            open(os.path.join(state, "gattway-test-agent.py"), "w") as g:
        g.write(f.read())
    log = os.path.join(state, AGENT_LOG)
    open(log, "w").close()
    mark = request.node.get_closest_marker("agent")
    capability, passkey = mark.args if mark else ("DisplayOnly", "")
    lab("guest-exec", f"setsid /usr/bin/python3 /run/realbluez/gattway-test-agent.py {capability} "
                      f"/run/realbluez/{AGENT_LOG} {passkey} </dev/null >/run/realbluez/test-agent.out 2>&1 & echo started", timeout=30)
    assert wait_for(lambda: f"registered {capability}" in open(log).read(), 20), open(os.path.join(state, "test-agent.out")).read()
    yield
    lab("guest-exec", "pkill -TERM -f gattway-test-agent.py; sleep 0.5; true", timeout=30)
    lab("restart-bluetoothd", "1")
    forget_pairings()


def displayed_passkeys():
    """The passkeys the peripheral's side showed so far (the test agent's log)."""
    with open(os.path.join(T["state_dir"], AGENT_LOG), errors="replace") as f:
        return [int(n) for n in re.findall(r"DisplayPasskey \S+ (\d+) \d+", f.read())]


def read_mitm(gw):
    return gw.get(f"/v1/devices/{DEVICE}/characteristics/{MITM}/value?format=utf8")


def connected(gw):
    """Connects the peripheral (scanning for it first when BlueZ does not know it: a removed bond
    removes the device too); whether it is connected."""
    if gw.get(f"/v1/devices/{DEVICE}")[1].get("state") == "connected":
        return True
    status, body, _ = gw.post(f"/v1/devices/{DEVICE}/connect", {"timeout": T["connect_timeout"]})
    if status == 404:
        assert gw.post("/v1/scan", {})[0] == 200
        assert wait_for(lambda: heard(gw), 30), "not heard again"
        gw.delete("/v1/scan")
        status, body, _ = gw.post(f"/v1/devices/{DEVICE}/connect", {"timeout": T["connect_timeout"]})
    return status == 200


def heard(gw):
    """Listed and not stale (a 404's body has no `stale` either)."""
    status, body, _ = gw.get(f"/v1/devices/{DEVICE}")
    return status == 200 and body.get("stale") is None


def stop(gw):
    gw.post(f"/v1/devices/{DEVICE}/disconnect")
    gw.stop()


def test_passkey_entry_pairing_through_the_api_opens_the_authenticated_characteristic():
    gw = Gateway(T["args"] + ["--pairing-io", "KeyboardDisplay"], env=T["env"])
    events = SSE(gw, f"types=pairing&device={DEVICE}")
    try:
        assert wait_for(lambda: any("pairing: agent registered (KeyboardDisplay)" in line for line in gw.log), 10), gw.log
        assert connected(gw), gw.get(f"/v1/devices/{DEVICE}")
        before = read_mitm(gw)
        assert before[0] != 200, before
        assert before[1]["error"]["name"] == "unlikelyError", before  # ATT 0x0e: no MITM-protected link
        shown_before = displayed_passkeys()
        assert connected(gw)

        # The pairing, from another thread: it answers once the passkey is entered.
        import threading
        result = {}
        pairing = threading.Thread(target=lambda: result.update(
            reply=gw.post(f"/v1/devices/{DEVICE}/pair", {"timeout": 60})), daemon=True)
        pairing.start()
        asked = events.wait(lambda e: e.get("state") == "request", 30)
        assert asked and asked["request"] == "passkey", f"{asked}; {events.events}"
        assert wait_for(lambda: len(displayed_passkeys()) > len(shown_before), 15), "the peripheral showed no passkey"
        passkey = displayed_passkeys()[-1]
        waiting = gw.get(f"/v1/devices/{DEVICE}/pairing")[1]
        assert waiting == {"device": DEVICE, "waiting": True, "request": "passkey"}, waiting
        status, body, _ = gw.post(f"/v1/devices/{DEVICE}/pairing", {"passkey": passkey})
        assert status == 200, body
        pairing.join(60)
        status, device, _ = result["reply"]
        assert status == 200 and device["paired"] is True and device["bonded"] is True, device
        assert events.wait(lambda e: e.get("state") == "paired", 10), events.events
        print(f"\n[realbluez] paired with passkey entry: the peripheral showed {passkey:06d}, entered through POST …/pairing")

        assert connected(gw)
        after = read_mitm(gw)
        assert after[0] == 200 and after[1]["value"] == "secret-mitm", after

        status, body, _ = gw.delete(f"/v1/devices/{DEVICE}/bond")
        assert status == 200 and body == {"device": DEVICE, "paired": False, "bonded": False}, body
        # Unpaired: the authenticated characteristic is closed again. (The peripheral keeps its
        # own bond, as a real device does until it is reset: its side then fails to encrypt the
        # new link, so the read fails as not connected, or with 0x0e.)
        reconnected = connected(gw)
        assert gw.get(f"/v1/devices/{DEVICE}")[1]["paired"] is False
        again = read_mitm(gw)
        assert again[0] != 200, again
        print(f"[realbluez] after DELETE …/bond: reconnected {reconnected}, the authenticated read answered {again[0]}"
              f" {again[1]['error']['name']}")
    finally:
        events.close()
        stop(gw)


def test_a_wrong_passkey_fails_and_leaves_the_device_unpaired():
    gw = Gateway(T["args"] + ["--pairing-io", "KeyboardDisplay"], env=T["env"])
    try:
        assert wait_for(lambda: any("pairing: agent registered" in line for line in gw.log), 10), gw.log
        assert connected(gw)
        shown_before = displayed_passkeys()
        # The passkey up front: a wrong one (the peripheral shows a random one each time).
        status, body, _ = gw.post(f"/v1/devices/{DEVICE}/pair", {"passkey": 0, "timeout": 60})
        shown = displayed_passkeys()[len(shown_before):]
        if shown and shown[-1] == 0:
            pytest.skip("the peripheral showed 000000, the passkey the test meant to be wrong")
        assert status == 403 and body["error"]["name"] == "insufficientAuthentication", body
        assert wait_for(lambda: gw.get(f"/v1/devices/{DEVICE}")[1].get("paired") is False, 10)
    finally:
        stop(gw)



@pytest.mark.agent("KeyboardOnly", "123456")
def test_a_known_passkey_pairs_when_the_authenticated_read_needs_it(tmp_path):
    """A device whose passkey is fixed (printed on it): the peripheral's side is KeyboardOnly and
    types 123456 (the test agent), gattway is KeyboardOnly too, so both sides enter the passkey.
    Without `--pairing-keys` the authenticated read fails with 0x0e (bluetoothd's own MITM
    pairing cannot succeed); with the key in the file the same read pairs and answers, with no
    client doing anything but the read."""
    gw = Gateway(T["args"] + ["--pairing-io", "KeyboardOnly"], env=T["env"])
    try:
        assert wait_for(lambda: any("pairing: agent registered (KeyboardOnly)" in line for line in gw.log), 10), gw.log
        assert connected(gw), "\n".join(gw.log[-12:])
        before = read_mitm(gw)
        assert before[0] == 502 and before[1]["error"]["name"] == "unlikelyError", before
        assert gw.get(f"/v1/devices/{DEVICE}")[1]["paired"] is False
    finally:
        stop(gw)

    # (Nothing to forget: the failed read left both sides unpaired. RemoveDevice here, right
    # after bluetoothd's failed pairing, crashed this lab's bluetoothd.)
    keys = tmp_path / "pairing-keys"
    keys.write_text(f"{DEVICE} passkey 123456\n")
    gw = Gateway(T["args"] + ["--pairing-io", "KeyboardOnly", "--pairing-keys", str(keys)], env=T["env"])
    try:
        assert wait_for(lambda: any("pairing: 1 key(s) from" in line for line in gw.log), 10), gw.log
        assert connected(gw), "\n".join(gw.log[-12:])
        started = time.monotonic()
        after = read_mitm(gw)
        took = time.monotonic() - started
        # bluetoothd answers the Pair (which connected again: the refusal dropped the link) before
        # the link's services are resolved: the read is tried again only once they are.
        assert after[0] == 200 and after[1]["value"] == "secret-mitm", (after, gw.log[-15:])
        device = gw.get(f"/v1/devices/{DEVICE}")[1]
        assert device["paired"] is True and device["bonded"] is True, device
        # gattway's key paired it, one of two ways: the read failed and gattway paired with the key
        # (the way here), or bluetoothd's own pairing for the read asked gattway's agent, which
        # answered with the key (where gattway's agent is the default one). Two CI runs saw the
        # read answer with neither: the guest's test agent, the default agent, had answered
        # gattway's side with the peripheral's passkey (its log: RequestPasskey for hci0); it now
        # refuses questions for any adapter but the peripheral's.
        paired_by = [line for line in gw.log if ("read of 0x" in line and "pairing with the pairing keys file's key" in line)
                     or "question answered with the pairing keys file's key" in line]
        assert paired_by, "\n".join(gw.log)
        settled = [line.split(": ", 1)[-1] for line in gw.log if "resolved again" in line]
        print(f"\n[realbluez] the authenticated read paired with the known passkey and answered in {took:.2f} s"
              f" ({paired_by[0].split(': ', 1)[-1]}; {'; '.join(settled) or 'services resolved when the pairing answered'})")
    finally:
        stop(gw)
