"""Issue 26 against real BlueZ (the realbluez VM; skipped on the simulator, where test_serial.py
is its twin): pyserial opens gattway's TCP ports (`--serial`) onto RB-Periph's UARTs, its HM-10
style FFE1 and its Nordic UART service, both echoing what is written, through Debian's
bluetoothd and the VM's emulated controllers. The port connects the device when pyserial
attaches, as it would a module nobody connected."""
import random
import time

import pytest
import serial

import targets
from conftest import Gateway, wait_for

T = targets.current()
pytestmark = pytest.mark.skipif(T["name"] != "realbluez", reason="needs the realbluez VM (GATTWAY_TARGET=realbluez)")
DEVICE = T["hm10"]


def test_pyserial_echo_through_hm10_and_nordic_uart():
    gw = Gateway([*T["args"], "--serial", f"127.0.0.1:0={DEVICE},hm10", "--serial", f"127.0.0.1:0={DEVICE},nordic"],
                 env=T["env"])
    try:
        ports = {p["profile"]: p["port"] for p in gw.get("/v1/serial-ports")[1]["ports"]}
        # BlueZ must know the device before a port can connect it: a scan hears it.
        if gw.get(f"/v1/devices/{DEVICE}")[0] != 200:
            assert gw.post("/v1/scan", {})[0] == 200
            assert wait_for(lambda: gw.get(f"/v1/devices/{DEVICE}")[0] == 200, 30), "RB-Periph not heard"
            gw.delete("/v1/scan")
        for profile, seed in (("hm10", 1), ("nordic", 2)):
            # One port at a time: a device's link serves one profile while clients are attached.
            with serial.serial_for_url(f"socket://127.0.0.1:{ports[profile]}", timeout=60) as s:
                message = bytes(random.Random(seed).randrange(256) for _ in range(10_000)).replace(b"\n", b"-")
                start = time.monotonic()
                s.write(message)
                assert s.read(len(message)) == message, f"{profile}: the echo differs"
                seconds = time.monotonic() - start
                s.write(b"hello from pyserial\r\n")
                assert s.readline() == b"hello from pyserial\r\n"
                link = gw.get(f"/v1/serial-ports/{ports[profile]}")[1]["link"]
                assert link["profile"] == profile and link["received"] == link["sent"] == 10_000 + 21, link
                print(f"[realbluez] serial {profile} (rx {link['rx'][:8]}, tx {link['tx'][:8]}): 10 000 bytes echoed"
                      f" byte-identical in {seconds:.2f} s")
            assert wait_for(lambda: gw.get(f"/v1/serial-ports/{ports[profile]}")[1].get("link") is None, 10)
    finally:
        gw.stop()
