"""Runs in the realbluez guest with Debian's python3 (dbus, gi): a BTHome v2 sensor advertising on
ADAPTER through BlueZ's LEAdvertisingManager1 (a broadcast, not connectable), so that the real
kernel's reports carry a sensor's service data. Writes the time to READY once bluetoothd took the
advertisements, and keeps them (they are this process's) until it is killed. See kernel_view.py.

Two identical instances with Duration=1, as the lab's peripheral.py registers RB-Periph's: btvirt
reports an advertisement only when advertising is enabled, and the rotation re-enables it every
second."""
import sys

import dbus
import dbus.mainloop.glib
import dbus.service
from gi.repository import GLib

import advertising

adapter_name, ready, name, data_hex = sys.argv[1:5]
ADVERTISEMENT = "org.bluez.LEAdvertisement1"


class Advertisement(dbus.service.Object):
    def __init__(self, bus, path):
        self.path = path
        super().__init__(bus, path)

    @dbus.service.method(dbus.PROPERTIES_IFACE, in_signature="s", out_signature="a{sv}")
    def GetAll(self, interface):
        return {
            "Type": "broadcast",
            "LocalName": dbus.String(name),
            "ServiceData": dbus.Dictionary({"FCD2": dbus.Array(bytes.fromhex(data_hex), signature="y")}, signature="sv"),
            "Duration": dbus.UInt16(1),
        }

    @dbus.service.method(ADVERTISEMENT)
    def Release(self):
        pass


dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
bus = dbus.SystemBus()
advertisements = [Advertisement(bus, f"/gattway/bthome/adv{i}") for i in range(2)]
advertising.register(bus, adapter_name, advertisements, ready)
GLib.MainLoop().run()
