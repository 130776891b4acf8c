"""Issue 33 against real BlueZ: two of our adapters (the realbluez VM booted with three
controllers, `RB_BTVIRT_ARGS='-L -l3' RB_NUM_ADAPTERS=3`: hci0 and hci2 ours, hci1 RB-Periph).
Both hear RB-Periph; a connect picks one; then the linked adapter is powered off
(`btmgmt --index N power off` in the guest) RB_ADAPTER_ROUNDS times (default 5), and each time the
link moves to the other adapter and both holds, the heart rate on an SSE stream and the Nordic
UART's TX over REST, deliver again through it, with no client acting. The adapter is powered on
again before the next round, which powers off the other. Prints how long each move took.
Skipped unless the VM has hci2 (RB_NUM_ADAPTERS=3)."""
import os
import time

import pytest

import targets
from conftest import Gateway, wait_for
from test_reconnect import SSE, connection, notification, states
from test_reliability_realbluez import DEVICE, HR, UART_TX, echo, forget_pairings, lab

T = targets.current()
ROUNDS = int(os.environ.get("RB_ADAPTER_ROUNDS", "5"))
OURS = ("hci0", "hci2")
# From the power off: the link lost at once, the other adapter's attempt within the first
# reconnect delay (up to 5 s), a connect and service resolution of a few seconds.
MOVED = 45


def has_hci2():
    if T["name"] != "realbluez":
        return False
    try:
        return "hci2" in lab("guest-exec", "ls /sys/class/bluetooth", timeout=30).split()
    except (AssertionError, OSError):
        return False


pytestmark = pytest.mark.skipif(not has_hci2(), reason="needs the realbluez VM with three controllers (RB_NUM_ADAPTERS=3)")


def power(adapter, on):
    lab("guest-exec", f"btmgmt --index {adapter[3:]} power {'on' if on else 'off'}", timeout=30)


def device(gw):
    return gw.get(f"/v1/devices/{DEVICE}")[1]


def adapter_row(gw, name):
    return next((a for a in gw.get("/v1/adapters")[1]["adapters"] if a["id"] == name), None)


@pytest.fixture(scope="module")
def gw():
    forget_pairings()
    for adapter in OURS:
        power(adapter, True)
    gateway = Gateway(["--adapter", ",".join(OURS)], env=T["env"])
    yield gateway
    gateway.post(f"/v1/devices/{DEVICE}/disconnect")
    gateway.stop()
    for adapter in OURS:
        power(adapter, True)


def test_powering_off_the_linked_adapter_moves_the_link_and_both_holds(gw):
    assert wait_for(lambda: gw.get("/v1/state")[1].get("usableAdapters") == 2, 30), gw.get("/v1/state")[1]
    status, body, _ = gw.post("/v1/scan", {"services": ["180d"]})
    assert status == 200, body
    # Discovery runs on both: each lists RB-Periph among what it heard.
    assert wait_for(lambda: {a["adapter"] for a in device(gw).get("adapters", [])} == set(OURS), 60), device(gw)
    gw.delete("/v1/scan")
    status, body, _ = gw.post(f"/v1/devices/{DEVICE}/connect", {"timeout": T["connect_timeout"], "autoReconnect": True})
    assert status == 200 and body["adapter"] in OURS, body
    status, body, _ = gw.post(f"/v1/devices/{DEVICE}/characteristics/{UART_TX}/notifications")
    assert status == 200, body
    uart = SSE(gw, f"types=notification,hold&device={DEVICE}")
    rate = SSE(gw, f"types=connection,notification&device={DEVICE}&characteristic={HR}")
    assert rate.wait(notification, 10), "no heart rate before any adapter was powered off"
    assert echo(gw, uart, time.monotonic() + 10), "no UART echo before any adapter was powered off"
    figures = []
    try:
        for n in range(ROUNDS):
            linked = device(gw)["adapter"]
            other = next(a for a in OURS if a != linked)
            marks = len(rate.events), len(uart.events)
            started = time.monotonic()
            power(linked, False)
            lost = rate.wait(connection("disconnected"), 15, marks[0])
            assert lost, f"round {n + 1}: the link on {linked} was not lost: {states(rate.events[marks[0]:])}"
            back = rate.wait(connection("connected"), MOVED, marks[0])
            assert back, f"round {n + 1}: not connected again: {states(rate.events[marks[0]:])}; {device(gw)}"
            again = rate.wait(notification, MOVED, rate.events.index(back) + 1)
            assert again, f"round {n + 1}: no heart rate after the move: {states(rate.events[marks[0]:])}"
            echoed = echo(gw, uart, started + MOVED)
            assert echoed, f"round {n + 1}: no UART echo after the move"
            now = device(gw)
            assert now["state"] == "connected" and now["adapter"] == other, f"round {n + 1}: {now}"
            failed = [e for e in uart.events[marks[1]:] if e.get("type") == "hold" and e.get("state") == "failed"]
            assert not failed, f"round {n + 1}: {failed}"
            at = lambda stream, e: stream.at[stream.events.index(e)] - started
            figures.append((at(rate, lost), at(rate, back), at(rate, again), echoed - started))
            print(f"\n[realbluez] {linked} powered off ({n + 1}/{ROUNDS}): disconnected {figures[-1][0]:.1f} s, "
                  f"connected through {other} {figures[-1][1]:.1f} s, heart rate {figures[-1][2]:.1f} s, "
                  f"UART echo {figures[-1][3]:.1f} s after the power off")
            power(linked, True)
            assert wait_for(lambda: (adapter_row(gw, linked) or {}).get("powered") is True, 15), adapter_row(gw, linked)
            assert wait_for(lambda: gw.get("/v1/state")[1].get("usableAdapters") == 2, 15), gw.get("/v1/state")[1]
    finally:
        if figures:
            def spread(values):
                values = sorted(values)
                return f"{values[0]:.1f} / {values[len(values) // 2]:.1f} / {values[-1]:.1f} s"
            _, connected, rates, echoes = zip(*figures)
            print(f"\n[realbluez] the linked adapter powered off, {len(figures)} in a row (min / median / max after "
                  f"the power off): connected through the other {spread(connected)}, heart rate {spread(rates)}, "
                  f"UART echo {spread(echoes)}")
        rate.close()
        uart.close()
