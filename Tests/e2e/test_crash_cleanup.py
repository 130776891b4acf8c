"""Issue 28: however `gattway --simulate` or `gattway-sim` stops, even by SIGKILL, the private
dbus-daemon it started does not outlive it (the kernel kills it with its parent), and the bus
directory, which a killed process cannot remove, is gone at the next start."""
import os
import signal
import subprocess
import time

import pytest

from conftest import Gateway, binary


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
        self.directory = directory_of(first.strip().split("=", 1)[1])

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


def test_a_running_buss_directory_is_not_removed_by_another_start():
    one = gateway()
    try:
        two = Sim()
        two.stop()
        assert os.path.exists(one.directory + "/system_bus_socket")
        assert one.get("/v1/state")[1]["state"] == "poweredOn"
    finally:
        one.stop()
