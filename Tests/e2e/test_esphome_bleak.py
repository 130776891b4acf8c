"""Home Assistant's own Bluetooth stack on gattway's proxy: the code Home Assistant runs for an
ESPHome Bluetooth proxy (bleak-esphome's connect_scanner, habluetooth's manager, both from
PyPI), a remote scanner built on gattway's API that sees the simulated devices, and a bleak
script, unchanged, that finds a device, connects, reads and subscribes through it, as an
integration's does once habluetooth has put its wrappers in bleak's place."""
import asyncio
import base64

import pytest

from conftest import Gateway, wait_for
from esphome_client import connected, esphome_port

KEY = base64.b64encode(bytes(range(32))).decode()
HR = "F0:00:00:00:00:01"
BATTERY = "00002a19-0000-1000-8000-00805f9b34fb"
HEART_RATE = "00002a37-0000-1000-8000-00805f9b34fb"


async def bleak_script(address):
    """What an integration's code does with bleak; nothing here knows of ESPHome or gattway."""
    import bleak

    beats = []
    device = await bleak.BleakScanner.find_device_by_address(address, timeout=10)
    assert device is not None, f"{address} not found"
    async with bleak.BleakClient(device) as client:
        battery = await client.read_gatt_char(BATTERY)
        await client.start_notify(HEART_RATE, lambda _, data: beats.append(bytes(data)))
        await asyncio.sleep(2.5)
        await client.stop_notify(HEART_RATE)
        connected_while = client.is_connected
    return battery, beats, connected_while


@pytest.mark.parametrize("key", [None, KEY], ids=["plaintext", "noise"])
def test_home_assistants_bluetooth_through_the_proxy(key, monkeypatch):
    # habluetooth would also look for local adapters on the system bus: there is none here.
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path=/nonexistent")
    from bleak_esphome import connect_scanner
    from habluetooth import BluetoothManager, set_manager
    from habluetooth.usage import uninstall_multiple_bleak_catcher

    class Host(BluetoothManager):
        """Home Assistant's manager, as far as discovery goes: what it was told, by address."""

        def __init__(self):
            super().__init__()
            self.seen = {}

        def _discover_service_info(self, service_info):
            self.seen[service_info.address] = service_info

    gw = Gateway(["--simulate", "--esphome-api", "127.0.0.1:0", *(["--esphome-key", key] if key else [])])
    try:
        async def scenario():
            manager = Host()
            set_manager(manager)
            await manager.async_setup()
            api = await connected(esphome_port(gw), key, client_info="Home Assistant e2e")
            try:
                info = await api.device_info()
                # As Home Assistant's ESPHome integration connects a proxy's scanner.
                client_data = connect_scanner(api, info, True)
                scanner = client_data.scanner
                unregister = manager.async_register_scanner(scanner)
                unsetup = scanner.async_setup()
                await asyncio.sleep(3)
                assert scanner.source == info.bluetooth_mac_address
                for n in range(1, 0x0F):
                    assert f"F0:00:00:00:00:{n:02X}" in manager.seen, sorted(manager.seen)
                bthome = manager.seen["F0:00:00:00:00:06"]
                assert bthome.name == "Sim BTHome" and bthome.source == info.bluetooth_mac_address
                assert "0000fcd2-0000-1000-8000-00805f9b34fb" in bthome.service_data
                assert manager.async_ble_device_from_address(HR, True) is not None

                battery, beats, was_connected = await bleak_script(HR)
                assert len(battery) == 1 and 0 < battery[0] <= 100
                assert was_connected and len(beats) >= 2 and all(b[0] == 0x06 for b in beats), beats
                unsetup()
                unregister()
            finally:
                await api.disconnect()
                manager.async_stop()
                uninstall_multiple_bleak_catcher()

        asyncio.run(asyncio.wait_for(scenario(), 90))
        # The link the script made was the core's, and is gone with it.
        assert wait_for(lambda: gw.get(f"/v1/devices/{HR}")[1]["state"] == "disconnected", 5)
    finally:
        gw.stop()
