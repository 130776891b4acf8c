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

import advertising  # noqa: E402
import peripheral  # noqa: E402  (the lab's: its Advertisement class; main() does not run)

dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
bus = dbus.SystemBus()
advertisements = [peripheral.Advertisement(bus, f"/gattway/outage/adv{i}", "RB-Periph") for i in range(2)]
# Nothing is asked of the bus while no main loop runs: a call made before the wait (a proxy's
# introspection) would time out unanswered during a long one.
while not os.path.exists(trigger):
    time.sleep(0.01)
advertising.register(bus, adapter_name, advertisements, ready)
GLib.MainLoop().run()
