"""Runs in the realbluez guest: registers RB-Periph's two advertisements (the lab's peripheral.py
makes them) on ADAPTER once TRIGGER exists, writes the time to READY, and keeps them (they are
this process's) until it is killed. See outage.sh."""
import os
import sys
import time

adapter_name, trigger, ready, lib = sys.argv[1:5]
sys.path.insert(0, lib)
import dbus  # noqa: E402
import dbus.mainloop.glib  # noqa: E402
from gi.repository import GLib  # noqa: E402

import peripheral  # noqa: E402  (the lab's: its Advertisement class; main() does not run)

dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
bus = dbus.SystemBus()
advertisements = [peripheral.Advertisement(bus, f"/gattway/outage/adv{i}", "RB-Periph") for i in range(2)]
# Nothing is asked of the bus while no main loop runs: a call made before the wait (a proxy's
# introspection) would time out unanswered during a long one.
while not os.path.exists(trigger):
    time.sleep(0.01)
adapter = bus.get_object("org.bluez", "/org/bluez/" + adapter_name, introspect=False)
left = [len(advertisements)]


def registered(*_):
    left[0] -= 1
    if left[0] == 0:
        with open(ready + ".tmp", "w") as f:
            f.write(f"{time.time():.6f}\n")
        os.rename(ready + ".tmp", ready)


def failed(error):
    print("RegisterAdvertisement:", error, flush=True)
    os._exit(1)


for advertisement in advertisements:
    adapter.RegisterAdvertisement(advertisement.path, dbus.Dictionary({}, signature="sv"), signature="oa{sv}",
                                  dbus_interface="org.bluez.LEAdvertisingManager1",
                                  reply_handler=registered, error_handler=failed)
GLib.MainLoop().run()
