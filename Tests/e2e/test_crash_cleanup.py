"""Issue 28: however `gattway --simulate` or `gattway-sim` stops, even by SIGKILL, the private
dbus-daemon it started does not outlive it (the kernel kills it with its parent), and the bus
directory, which a killed process cannot remove, is gone at the next start. And a gattway that
stops leaves no link it made on its own (a serial port's, the ESPHome proxy's) with bluetoothd."""
import asyncio
import os
import signal
import subprocess
import time

import pytest
import serial

from conftest import Gateway, binary, wait_for


def stat(pid):
    """(name, state, parent pid, start time) of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    name, rest = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
    return name, rest[0], int(rest[1]), rest[19]


def daemons_of(pid):
    """The dbus-daemon children of `pid`, each as (pid, start time)."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        s = stat(entry)
        if s and s[0] == "dbus-daemon" and s[2] == pid and s[1] != "Z":
            found.append((int(entry), s[3]))
    return found


def alive(daemon):
    pid, started = daemon
    s = stat(pid)
    return s is not None and s[3] == started and s[1] != "Z"


def directory_of(address):
    assert address.startswith("unix:path="), address
    return os.path.dirname(address[len("unix:path="):])


def stop_and_measure(proc, sig):
    """Sends `sig` to the process; returns the seconds until its dbus-daemon was no longer alive
    (polled every millisecond, for at most a second), or None if it still was after one."""
    [daemon] = daemons_of(proc.pid)
    start = time.monotonic()
    proc.send_signal(sig)
    while time.monotonic() - start < 1:
        if not alive(daemon):
            return time.monotonic() - start
        time.sleep(0.001)
    return None


class Sim:
    """gattway-sim on its own private bus."""

    def __init__(self):
        self.proc = subprocess.Popen([binary("gattway-sim")], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        first = self.proc.stdout.readline()
        assert first.startswith("DBUS_SYSTEM_BUS_ADDRESS="), f"gattway-sim did not start: {first!r}"
        self.address = first.strip().split("=", 1)[1]
        self.directory = directory_of(self.address)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


def gateway():
    gw = Gateway(["--simulate"])
    gw.directory = directory_of(gw.bus)
    return gw


@pytest.mark.parametrize("start", [gateway, Sim], ids=["gattway --simulate", "gattway-sim"])
def test_sigkill_leaves_no_daemon_and_the_next_start_removes_the_directory(start):
    first = start()
    try:
        assert os.path.exists(first.directory + "/system_bus_socket")
        took = stop_and_measure(first.proc, signal.SIGKILL)
        assert took is not None, "the dbus-daemon was still alive 1 s after its parent's SIGKILL"
        print(f"\ndbus-daemon gone {took * 1000:.1f} ms after the SIGKILL of its parent")
        first.proc.wait(5)
        # Nothing ran in the killed process: the directory is still there, no process uses it.
        assert os.path.exists(first.directory)
    finally:
        first.stop()
    second = start()
    try:
        assert not os.path.exists(first.directory), os.listdir(first.directory)
        assert os.path.exists(second.directory + "/system_bus_socket")
    finally:
        second.stop()
    assert not os.path.exists(second.directory)


@pytest.mark.parametrize("start", [gateway, Sim], ids=["gattway --simulate", "gattway-sim"])
def test_sigterm_stops_the_daemon_and_removes_the_directory(start):
    first = start()
    try:
        assert stop_and_measure(first.proc, signal.SIGTERM) is not None
        assert first.proc.wait(5) == 0
        assert not os.path.exists(first.directory)
    finally:
        first.stop()


def directories_owned_by(pid):
    """The gattway-bus-* directories in /tmp whose owner file names `pid`."""
    found = []
    for name in os.listdir("/tmp"):
        try:
            with open(f"/tmp/{name}/owner") as f:
                if name.startswith("gattway-bus-") and f.read().strip() == str(pid):
                    found.append(name)
        except OSError:
            pass
    return found


@pytest.mark.parametrize("name, args, marker", [
    ("gattway --simulate", ["--listen", "127.0.0.1:0", "--state-dir", "none", "--simulate"], "listening on"),
    ("gattway-sim", [], "DBUS_SYSTEM_BUS_ADDRESS="),
], ids=["gattway --simulate", "gattway-sim"])
def test_a_sigterm_at_any_moment_of_the_start_stops_it(name, args, marker):
    """A SIGTERM that came in the milliseconds before Dispatch had registered its handler was
    ignored (SIG_IGN), and the process ran on (CI: the test above timed out; in a loop of
    gattway-sim starts, 2 to 13 in 100 lost). Each run here sends it at another moment, from 0
    to 1.5 times the time the ready line (`marker`) takes, and at that line: the process ends
    within 10 s, by the default action (before it watches signals, when it has made nothing) or
    cleanly, and leaves no bus directory. The delays are the moments tried, not waits for
    something: nothing outside marks them."""
    def launch():
        # Both print their ready line on a pipe of its own: the sim on stdout, gattway on stderr.
        out = subprocess.PIPE if name == "gattway-sim" else subprocess.DEVNULL
        err = subprocess.DEVNULL if name == "gattway-sim" else subprocess.PIPE
        proc = subprocess.Popen([binary(name.split()[0]), *args], stdout=out, stderr=err, text=True)
        return proc, proc.stdout or proc.stderr

    def wait_ready(lines):
        for line in lines:
            if marker in line:
                return
        pytest.fail(f"{name} ended before its ready line")

    started = time.monotonic()
    probe, lines = launch()
    wait_ready(lines)
    ready = time.monotonic() - started
    probe.terminate()
    probe.communicate(timeout=10)
    for moment in [ready * 1.5 * i / 60 for i in range(61)] + [None] * 5:
        proc, lines = launch()
        if moment is None:
            wait_ready(lines)
        else:
            until = time.monotonic() + moment
            while time.monotonic() < until:
                pass  # busy: a sleep oversleeps by more than the window is wide
        proc.send_signal(signal.SIGTERM)
        when = "at its ready line" if moment is None else f"{moment * 1000:.1f} ms after its start"
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            pytest.fail(f"{name} still ran 10 s after a SIGTERM sent {when}")
        assert proc.returncode in (0, -signal.SIGTERM), f"exit {proc.returncode} after a SIGTERM sent {when}"
        assert directories_owned_by(proc.pid) == [], f"a bus directory left after a SIGTERM sent {when}"


def test_a_running_buss_directory_is_not_removed_by_another_start():
    one = gateway()
    try:
        two = Sim()
        two.stop()
        assert os.path.exists(one.directory + "/system_bus_socket")
        assert one.get("/v1/state")[1]["state"] == "poweredOn"
    finally:
        one.stop()


def connected_in_bluez(bus, address):
    """Whether org.bluez (here gattway-sim) says the device is connected."""
    path = "/org/bluez/hci0/dev_" + address.replace(":", "_")
    out = subprocess.run(["dbus-send", "--bus=" + bus, "--print-reply", "--dest=org.bluez", path,
                          "org.freedesktop.DBus.Properties.Get", "string:org.bluez.Device1", "string:Connected"],
                         capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    return "boolean true" in out.stdout


def test_a_stopped_gattway_leaves_no_link_it_made_on_its_own():
    """A serial port's device (connected for the port, disconnected when idle) and a device the
    ESPHome proxy's client connected are disconnected when gattway stops; a device a REST client
    connected is the client's and stays, as bluetoothd keeps it."""
    from esphome_client import esphome_port
    from test_esphome_bluetooth import Link, client_of

    hr, secure, hm10 = "F0:00:00:00:00:01", "F0:00:00:00:00:03", "F0:00:00:00:00:11"
    sim = Sim()
    try:
        gw = Gateway(["--serial", f"127.0.0.1:0={hm10}", "--esphome-api", "127.0.0.1:0"],
                     env={"DBUS_SYSTEM_BUS_ADDRESS": sim.address})
        gw.key = None
        try:
            gw.discover(hr, secure, hm10)
            port = gw.get("/v1/serial-ports")[1]["ports"][0]["port"]
            with serial.serial_for_url(f"socket://127.0.0.1:{port}", timeout=15) as s:
                s.write(b"hello\n")
                assert s.readline() == b"hello\n"
            assert wait_for(lambda: gw.get(f"/v1/serial-ports/{port}")[1].get("link") is None, 5)
            assert gw.post(f"/v1/devices/{secure}/connect", {"timeout": 10})[0] == 200

            async def through_the_proxy():
                api = await client_of(gw)
                link = Link(api, hr)
                assert (await link.connect())[0] is True
                # Its client still there: gattway stops under it.
                assert connected_in_bluez(sim.address, hr) and connected_in_bluez(sim.address, hm10)
                assert gw.stop() == 0

            asyncio.run(asyncio.wait_for(through_the_proxy(), 60))
        finally:
            gw.stop()
        assert not connected_in_bluez(sim.address, hm10), "the serial port's device is still connected"
        assert not connected_in_bluez(sim.address, hr), "the proxy's device is still connected"
        assert connected_in_bluez(sim.address, secure), "the REST client's device was disconnected"
        assert any("disconnected 1 device(s) connected for connect=auto or a serial port" in line for line in gw.log), gw.log[-10:]
    finally:
        sim.stop()
