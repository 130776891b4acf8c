"""Issue 11: the D-Bus system bus missing at start, or killed and restarted later: gattway keeps
answering HTTP throughout, reports `unsupported` with the reason, connects to the bus again and
restores the devices it keeps connected with their notifications."""
import os
import shutil
import subprocess
import tempfile
import time

import pytest

from conftest import Gateway, binary, wait_for

HR = "F0:00:00:00:00:01"


class Bus:
    """A dbus-daemon listening at a fixed socket, and gattway-sim serving org.bluez on it."""

    def __init__(self, directory):
        self.directory = directory
        self.socket = os.path.join(directory, "system_bus_socket")
        self.address = "unix:path=" + self.socket
        self.daemon = self.sim = None

    def start(self):
        config = os.path.join(self.directory, "bus.conf")
        with open(config, "w") as f:
            f.write(f"""<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig><type>system</type><listen>{self.address}</listen><auth>EXTERNAL</auth>
<policy context="default"><allow user="*"/><allow own="*"/><allow send_type="method_call"/>
<allow send_type="signal"/><allow send_type="method_return"/><allow send_type="error"/>
<allow receive_type="method_call"/><allow receive_type="signal"/><allow receive_type="method_return"/>
<allow receive_type="error"/></policy></busconfig>""")
        self.daemon = subprocess.Popen(["dbus-daemon", "--config-file=" + config, "--nofork", "--nopidfile", "--print-address=1"],
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert self.daemon.stdout.readline().strip(), "dbus-daemon did not start"
        self.sim = subprocess.Popen([binary("gattway-sim"), "--bus", self.address], stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True)
        assert self.sim.stdout.readline().startswith("DBUS_SYSTEM_BUS_ADDRESS="), "gattway-sim did not start"

    def kill(self):
        for p in (self.sim, self.daemon):
            if p and p.poll() is None:
                p.kill()
                p.wait(5)
        if os.path.exists(self.socket):
            os.unlink(self.socket)


@pytest.fixture
def bus():
    directory = tempfile.mkdtemp(prefix="gattway-e2e-bus-")
    b = Bus(directory)
    yield b
    b.kill()
    shutil.rmtree(directory, ignore_errors=True)


def state(gw):
    status, body, _ = gw.get("/v1/state")
    assert status == 200, body
    return body


def test_without_a_bus_at_start_gattway_serves_and_keeps_trying(bus):
    gw = Gateway([], env={"DBUS_SYSTEM_BUS_ADDRESS": bus.address})
    try:
        s = state(gw)
        assert s["state"] == "unsupported" and "D-Bus system bus" in s["reason"], s
        bus.start()
        assert wait_for(lambda: state(gw)["state"] == "poweredOn", 40), state(gw)
    finally:
        gw.stop()


def test_a_bus_killed_and_restarted_is_joined_again_and_the_device_restored(bus):
    bus.start()
    gw = Gateway(["--auto-reconnect"], env={"DBUS_SYSTEM_BUS_ADDRESS": bus.address})
    try:
        assert wait_for(lambda: state(gw)["state"] == "poweredOn", 10)
        gw.discover(HR)
        assert gw.post(f"/v1/devices/{HR}/connect", {"timeout": 10})[0] == 200
        assert gw.post(f"/v1/devices/{HR}/characteristics/2a37/notifications")[0] == 200
        bus.kill()
        # Still answering HTTP, and saying why nothing works.
        assert wait_for(lambda: "D-Bus system bus" in (state(gw).get("reason") or ""), 10), state(gw)
        for _ in range(5):
            assert state(gw)["state"] == "unsupported"
            assert gw.get("/v1/devices")[0] == 200
            time.sleep(0.2)
        bus.start()
        assert wait_for(lambda: state(gw)["state"] == "poweredOn", 40), state(gw)
        assert wait_for(lambda: gw.get(f"/v1/devices/{HR}")[1].get("state") == "connected", 40), "\n".join(l for l in gw.log if " GET " not in l and " POST " not in l)
        # The REST hold is BlueZ's again: notifications are on.
        assert wait_for(lambda: gw.get(f"/v1/devices/{HR}/characteristics/2a37")[1].get("isNotifying") is True, 10)
        assert gw.proc.poll() is None
    finally:
        gw.stop()
