"""What the guest's advertisers (adverts.py, bthome_advert.py) share: registering advertisements
with bluetoothd and saying when it has taken them all. Debian's python3 with dbus-python; the
caller runs the GLib main loop."""
import os
import time

from gi.repository import GLib

import dbus


def register(bus, adapter_name, advertisements, ready):
    """Registers each of `advertisements` (dbus.service.Objects with a `path`) on the adapter's
    LEAdvertisingManager1; once bluetoothd has taken them all, writes the time to `ready` (whole,
    through a rename). A refusal ends the process."""
    adapter = bus.get_object("org.bluez", "/org/bluez/" + adapter_name, introspect=False)
    left = [len(advertisements)]

    def registered(*_):
        left[0] -= 1
        if left[0] == 0:
            with open(ready + ".tmp", "w") as f:
                f.write(f"{time.time():.6f}\n")
            os.rename(ready + ".tmp", ready)

    def send(advertisement, tries):
        def failed(error):
            # bluetoothd may not have let go yet of the advertisements of the owner killed just
            # before (it learns of it from the bus): asked again for a while, then it ends.
            print("RegisterAdvertisement:", error, f"({tries} tries left)", flush=True)
            if tries == 0:
                os._exit(1)
            GLib.timeout_add(500, lambda: send(advertisement, tries - 1) and False)
        adapter.RegisterAdvertisement(advertisement.path, dbus.Dictionary({}, signature="sv"), signature="oa{sv}",
                                      dbus_interface="org.bluez.LEAdvertisingManager1",
                                      reply_handler=registered, error_handler=failed)
        return True

    for advertisement in advertisements:
        send(advertisement, 20)
