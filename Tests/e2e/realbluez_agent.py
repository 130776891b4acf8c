#!/usr/bin/python3
"""A pairing agent for the realbluez VM's bluetoothd, run inside the guest by
test_pairing_realbluez.py (with the guest's /usr/bin/python3, python3-dbus and python3-gi): it
registers with the capability given (DisplayOnly: it shows passkeys) and becomes the default
agent, so the peripheral's side of a pairing (hci1) shows its passkey here, as a device shows it
on its screen. Each call is one line in the log file given; it answers questions with yes, and a
passkey request with the PASSKEY given (KeyboardOnly: a device whose passkey is fixed, typed on
both sides).

It answers only for the peripheral's adapter (hci1). This bluetoothd serves gattway's adapter
too, and a pairing bluetoothd starts by itself for gattway's side (an authenticated read) asks the
default agent, this one, unless gattway called Pair: answering there would pair gattway's side
with the peripheral's passkey, which no real host's agent knows. Such questions are refused, as
a host with no agent of its own that knows the device refuses them.

Usage: realbluez_agent.py CAPABILITY LOGFILE [PASSKEY]. Stops on SIGTERM (the default agent goes
back to the one registered before)."""
import signal
import sys
import time

import dbus
import dbus.mainloop.glib
import dbus.service
from gi.repository import GLib

PATH = "/gattway/test/agent"
PERIPHERAL = "/org/bluez/hci1/"
capability, logfile = sys.argv[1], sys.argv[2]
passkey = int(sys.argv[3]) if len(sys.argv) > 3 else None
out = open(logfile, "a", buffering=1)


def log(*words):
    out.write("[%.3f] %s\n" % (time.monotonic(), " ".join(str(w) for w in words)))


def peripherals_only(device, question):
    """Refuses a question for a device seen from another adapter than the peripheral's."""
    if not str(device).startswith(PERIPHERAL):
        log(question, device, "refused: not the peripheral's adapter")
        raise dbus.DBusException("not the peripheral's adapter", name="org.bluez.Error.Rejected")


class Agent(dbus.service.Object):
    @dbus.service.method("org.bluez.Agent1")
    def Release(self):
        log("Release")

    @dbus.service.method("org.bluez.Agent1", in_signature="ouq")
    def DisplayPasskey(self, device, passkey, entered):
        peripherals_only(device, "DisplayPasskey")
        log("DisplayPasskey", device, "%06d" % passkey, entered)

    @dbus.service.method("org.bluez.Agent1", in_signature="o", out_signature="u")
    def RequestPasskey(self, device):
        peripherals_only(device, "RequestPasskey")
        log("RequestPasskey", device, "answered" if passkey is not None else "refused")
        if passkey is None:
            raise dbus.DBusException("no passkey", name="org.bluez.Error.Rejected")
        return dbus.UInt32(passkey)

    @dbus.service.method("org.bluez.Agent1", in_signature="ou")
    def RequestConfirmation(self, device, passkey):
        peripherals_only(device, "RequestConfirmation")
        log("RequestConfirmation", device, "%06d" % passkey)

    @dbus.service.method("org.bluez.Agent1", in_signature="o")
    def RequestAuthorization(self, device):
        peripherals_only(device, "RequestAuthorization")
        log("RequestAuthorization", device)

    @dbus.service.method("org.bluez.Agent1", in_signature="os")
    def AuthorizeService(self, device, uuid):
        peripherals_only(device, "AuthorizeService")
        log("AuthorizeService", device, uuid)

    @dbus.service.method("org.bluez.Agent1")
    def Cancel(self):
        log("Cancel")


dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
bus = dbus.SystemBus()
Agent(bus, PATH)
manager = dbus.Interface(bus.get_object("org.bluez", "/org/bluez"), "org.bluez.AgentManager1")
manager.RegisterAgent(PATH, capability)
manager.RequestDefaultAgent(PATH)
log("registered", capability)
loop = GLib.MainLoop()


def stop(*_):
    try:
        manager.UnregisterAgent(PATH)
        log("unregistered")
    finally:
        loop.quit()


signal.signal(signal.SIGTERM, stop)
loop.run()
