"""Issue 25 against real BlueZ (the realbluez VM; skipped on the simulator, where
test_esphome_bluetooth.py is its twin): aioesphomeapi, the client Home Assistant runs, through
gattway's ESPHome proxy onto Debian's bluetoothd and the VM's emulated controllers. RB-Periph's
advertisements arrive raw; the proxy connects it, lists its services, reads its battery, gets its
heart rate's notifications and the echo of a write to its FFE1; REST sees the same link; the
disconnect frees the slot."""
import asyncio
import time

import pytest

import targets
from conftest import Gateway, wait_for
from esphome_client import ad_structures, address_int, esphome_port
from test_esphome_bluetooth import FreeSlots, Link, client_of, eventually, rest_state, run

T = targets.current()
pytestmark = pytest.mark.skipif(T["name"] != "realbluez", reason="needs the realbluez VM (GATTWAY_TARGET=realbluez)")
PERIPH = T["heart_rate"]


def test_aioesphomeapi_connects_reads_and_gets_notifications_of_rb_periph():
    gw = Gateway([*T["args"], "--esphome-api", "127.0.0.1:0"], env=T["env"])
    gw.key = None
    try:
        esphome_port(gw)

        async def scenario():
            api = await client_of(gw)
            heard = []
            api.subscribe_bluetooth_le_raw_advertisements(
                lambda r: heard.extend((a.address, bytes(a.data)) for a in r.advertisements if a.address == address_int(PERIPH)))
            # The subscription starts the watch: bluetoothd's discovery, as a proxy's radio hears.
            start = time.monotonic()
            assert await eventually(lambda: heard, 40), "no advertisement of RB-Periph through the proxy"
            heard_after = time.monotonic() - start
            names = [v for _, data in heard for t, v in ad_structures(data) if t in (0x08, 0x09)]
            assert b"RB-Periph" in names, names

            free = FreeSlots(api)
            await free.until((3, 3, []))
            link = Link(api, PERIPH)
            start = time.monotonic()
            connected_state = await link.connect()
            connect_seconds = time.monotonic() - start
            assert connected_state[0] is True and connected_state[2] == 0 and connected_state[1] >= 23, connected_state
            await free.until((2, 3, [address_int(PERIPH)]))
            assert rest_state(gw, PERIPH) == "connected"

            tree = await link.services()
            shorts = {s.uuid[4:8] for s in tree}
            assert {"180d", "180f", "ffe0"} <= shorts, shorts
            battery = await api.bluetooth_gatt_read(link.address, link.characteristic("2a19").handle)
            assert len(battery) == 1 and 0 < battery[0] <= 100, battery

            beats, echoes = [], []
            stop_beats = await link.subscribe("2a37", beats)
            stop_echoes = await link.subscribe("ffe1", echoes)
            assert await eventually(lambda: len(beats) >= 2, 10), beats
            assert all(len(b) >= 2 for b in beats), beats
            message = b"hello through the proxy"
            await api.bluetooth_gatt_write(link.address, link.characteristic("ffe1").handle, message, True)
            assert await eventually(lambda: message in echoes, 10), echoes
            await stop_beats()
            await stop_echoes()

            await api.bluetooth_device_disconnect(link.address)
            await free.until((3, 3, []), timeout=15)
            await api.disconnect()
            return heard_after, connect_seconds, len(beats)

        heard_after, connect_seconds, beats = run(scenario(), timeout=150)
        # The proxy left the link to nobody: gattway disconnects it.
        assert wait_for(lambda: rest_state(gw, PERIPH) != "connected", 15), rest_state(gw, PERIPH)
        print(f"[realbluez] esphome proxy: RB-Periph heard after {heard_after:.1f} s, connected in {connect_seconds:.1f} s,"
              f" {beats} heart-rate notifications, FFE1 echoed, disconnected")
    finally:
        gw.stop()
