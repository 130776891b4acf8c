"""gattway as a systemd service (issue 27), without systemd: the configuration file (`--config`),
log lines for the journal (JOURNAL_STREAM), and sd_notify: READY=1 once it serves, WATCHDOG=1
while its HTTP server and its D-Bus thread answer, none once either is stalled (debug builds
take SIGUSR1 and SIGUSR2 as those faults). The notification socket is a datagram socket this
test owns, as systemd's would be."""
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request

import pytest

from conftest import ROOT, Gateway, binary
from test_bus_loss import bus  # noqa: F401 (a fixture)
from test_tls import certificate  # noqa: F401 (a fixture)

TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")


class Notifications:
    """The listening end of NOTIFY_SOCKET: every datagram received, with when it came."""

    def __init__(self, abstract=False):
        self.directory = tempfile.mkdtemp(prefix="gattway-notify-")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            name = f"gattway-test-{os.getpid()}-{id(self)}"
            self.sock.bind("\0" + name)
            self.address = "@" + name
        else:
            self.address = os.path.join(self.directory, "notify")
            self.sock.bind(self.address)
        self.received = []  # (monotonic time, text)
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        while True:
            try:
                data = self.sock.recv(4096)
            except OSError:
                return
            with self.lock:
                self.received.append((time.monotonic(), data.decode()))

    def messages(self, since=0.0):
        with self.lock:
            return [(t, m) for t, m in self.received if t >= since]

    def wait_for(self, text, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for t, m in self.messages():
                if text in m.split("\n"):
                    return t
            time.sleep(0.02)
        return None

    def close(self):
        self.sock.close()
        shutil.rmtree(self.directory, ignore_errors=True)


@pytest.fixture
def notifications():
    n = Notifications()
    yield n
    n.close()


def watchdog_times(n, since):
    return [t for t, m in n.messages(since) if "WATCHDOG=1" in m.split("\n")]


def start(args, n, watchdog_us=1_500_000, extra_env=None):
    env = {"NOTIFY_SOCKET": n.address, "WATCHDOG_USEC": str(watchdog_us), **(extra_env or {})}
    return Gateway(args, env=env)


def answers(gw):
    with urllib.request.urlopen(gw.base + "/v1/state", timeout=5) as r:
        return r.status == 200


# --- --config ---------------------------------------------------------------------------------

def test_a_config_file_gives_options_and_the_command_line_wins(tmp_path):
    conf = tmp_path / "gattway.conf"
    conf.write_text("# a comment\n\n  max-body 16  \nsimulate\nno-watch\n")
    gw = Gateway(["--config", str(conf)])
    try:
        assert gw.post("/v1/scan", raw=b'{"services": ["180d", "180f"]}')[0] == 413  # the file's 16 bytes
        assert "watch started" not in "\n".join(gw.log)  # the file's no-watch beats simulate's default
    finally:
        gw.stop()
    gw = Gateway(["--config", str(conf), "--max-body", "1000"])
    try:
        assert gw.post("/v1/scan", raw=b'{"services": ["180d", "180f"]}')[0] == 200
    finally:
        gw.stop()


@pytest.mark.parametrize("lines, said", [
    ("listen 127.0.0.1:0\n\nbogus 1\n", ":3: unknown argument \"--bogus\""),
    ("no-auth yes\n", ":1: no-auth takes no value"),
    ("--listen 127.0.0.1:0\n", ":1: write the option without its dashes: listen"),
    ("# ok\nmax-body many\n", ":2: --max-body takes a positive number of bytes"),
    ("config /etc/gattway/other.conf\n", ":1: config has no place in a configuration file"),
])
def test_a_mistake_in_the_config_file_stops_gattway_with_its_line(tmp_path, lines, said):
    conf = tmp_path / "gattway.conf"
    conf.write_text(lines)
    out = subprocess.run([binary("gattway"), "--config", str(conf), "--simulate"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 2
    assert f"gattway: {conf}{said}" in out.stderr


def test_a_config_file_that_cannot_be_read_stops_gattway(tmp_path):
    out = subprocess.run([binary("gattway"), "--config", str(tmp_path / "missing.conf")], capture_output=True, text=True, timeout=10)
    assert out.returncode == 2 and "cannot read" in out.stderr and "No such file" in out.stderr


def test_the_packaged_config_file_lists_every_option():
    help_text = subprocess.run([binary("gattway"), "--help"], capture_output=True, text=True, timeout=10).stdout
    options = set(re.findall(r"^  --([a-z-]+)", help_text, re.M)) - {"help", "version", "config"}
    assert len(options) > 30
    with open(os.path.join(ROOT, "Packaging", "gattway.conf")) as f:
        listed = set(re.findall(r"^#?([a-z][a-z-]+)(?:\s|$)", f.read(), re.M))
    assert sorted(options - listed) == []
    assert sorted(listed - options) == []


# --- the start and its one teardown ----------------------------------------------------------

def start_that_fails(args):
    """gattway with the simulator, the ESPHome API and a serial port, and `args` that make a later
    step fail: its exit status, its log, and the names its teardown stopped, in order."""
    out = subprocess.run([binary("gattway"), "--simulate", "--listen", "127.0.0.1:0", "--state-dir", "none",
                          "--esphome-api", "127.0.0.1:0", "--serial", "127.0.0.1:0=F0:00:00:00:00:02", *args],
                         capture_output=True, text=True, timeout=30)
    stopping = [line.split("stopping: ", 1)[1] for line in out.stderr.splitlines() if " stopping: " in line]
    assert len(stopping) == 1, out.stderr
    return out.returncode, out.stderr, stopping[0].split(", ")


def closed(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_a_start_that_fails_stops_every_door_it_had_started(tmp_path):
    """The MQTT bridge cannot start (its CA file is not there) after the HTTP API, the ESPHome API
    and a serial port listen: each of them is stopped, then the gateway, BlueZ and the simulator."""
    status, log, stopped = start_that_fails(["--mqtt", "mqtts://127.0.0.1:1", "--mqtt-ca", str(tmp_path / "missing.pem")])
    assert status == 2 and "gattway: --mqtt: TLS" in log, log
    assert stopped == ["mDNS", "ESPHome API", "HTTP server", "serial ports", "gateway", "BlueZ", "simulator", "SIGHUP"]
    esphome = int(re.search(r"esphome: listening on 127\.0\.0\.1:(\d+)", log).group(1))
    serial = int(re.search(r"serial port 127\.0\.0\.1:(\d+) serves", log).group(1))
    assert closed(esphome) and closed(serial)
    assert "listening on http" not in log  # never ready


def test_a_door_that_cannot_listen_stops_those_started_before_it():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        status, log, stopped = start_that_fails(["--esphome-api", f"127.0.0.1:{port}"])
    assert status == 1 and "gattway: --esphome-api:" in log, log
    assert stopped == ["HTTP server", "serial ports", "gateway", "BlueZ", "simulator", "SIGHUP"]
    assert "serial port 127.0.0.1" not in log  # opened after the ESPHome API: never


# --- the journal ------------------------------------------------------------------------------

def run_with_stderr_pipe(args, journal_stream):
    """gattway's stderr on a pipe; JOURNAL_STREAM names that pipe (or what `journal_stream`
    makes of its device and inode)."""
    read_end, write_end = os.pipe()
    st = os.fstat(write_end)
    env = {**os.environ, "JOURNAL_STREAM": journal_stream(st.st_dev, st.st_ino)}
    proc = subprocess.Popen([binary("gattway"), *args], stdout=subprocess.DEVNULL, stderr=write_end, env=env)
    os.close(write_end)
    return proc, os.fdopen(read_end, errors="replace")


def read_until_listening(proc, stream):
    lines = []
    for line in stream:
        lines.append(line.rstrip("\n"))
        if "listening on" in line:
            break
    proc.terminate()
    proc.wait(10)
    return lines + [line.rstrip("\n") for line in stream]


def test_on_the_journal_lines_carry_a_priority_and_no_time():
    proc, stream = run_with_stderr_pipe(["--simulate", "--listen", "127.0.0.1:0", "--state-dir", "none"],
                                        lambda dev, ino: f"{dev}:{ino}")
    lines = read_until_listening(proc, stream)
    assert any(line.startswith("<6>gattway ") and "listening on http://" in line for line in lines), lines
    assert all(re.match(r"^<[0-7]>", line) for line in lines), lines
    assert not any(TIMESTAMP.match(line[3:]) for line in lines), lines
    # An error, several lines long: each line has its prefix.
    proc, stream = run_with_stderr_pipe(["--bogus"], lambda dev, ino: f"{dev}:{ino}")
    assert proc.wait(10) == 2
    assert stream.read().splitlines() == ['<3>gattway: unknown argument "--bogus"', "<3>Try gattway --help."]


def test_a_journal_stream_that_is_not_stderr_is_ignored():
    """A child of a service inherits JOURNAL_STREAM with its stderr elsewhere."""
    proc, stream = run_with_stderr_pipe(["--simulate", "--listen", "127.0.0.1:0", "--state-dir", "none"],
                                        lambda dev, ino: f"{dev}:{ino + 1}")
    lines = read_until_listening(proc, stream)
    assert lines and all(TIMESTAMP.match(line) for line in lines), lines


# --- sd_notify --------------------------------------------------------------------------------

@pytest.mark.parametrize("abstract", [False, True], ids=["path", "abstract"])
def test_ready_once_serving_then_watchdog_at_a_third_of_the_interval(abstract):
    n = Notifications(abstract)
    gw = start(["--simulate"], n, watchdog_us=1_500_000)
    try:
        ready = n.wait_for("READY=1", 10)
        assert ready is not None, n.messages()
        assert answers(gw)
        time.sleep(3.2)
        messages = [m for _, m in n.messages()]
        # gattway's own, once: the simulator's dbus-daemon, its child, does not get the socket.
        assert sum("READY=1" in m.split("\n") for m in messages) == 1, messages
        assert any(m.startswith("READY=1\nSTATUS=listening on http://127.0.0.1:") for m in messages), messages
        beats = watchdog_times(n, ready - 0.1)
        assert len(beats) >= 6, messages
        gaps = [b - a for a, b in zip(beats, beats[1:])]
        assert all(0.3 < g < 0.8 for g in gaps), gaps  # 0.5 s: a third of 1.5 s
        # The watchdog's requests are not logged; a client's (this test's one) is.
        assert sum("GET /v1/state 200" in line for line in gw.log) == 1, gw.log
    finally:
        gw.stop()
        n.close()
    assert any(m == "STOPPING=1" for _, m in n.messages()), n.messages()


def test_no_watchdog_without_its_interval_or_for_another_process(notifications):
    for env in ({"WATCHDOG_USEC": "0"}, {"WATCHDOG_PID": "1"}):
        gw = start(["--simulate"], notifications, extra_env=env)
        try:
            ready = notifications.wait_for("READY=1", 10)
            assert ready is not None
            time.sleep(1.2)
            assert watchdog_times(notifications, ready - 0.1) == []
        finally:
            gw.stop()


def kill(gw):
    """A stalled gattway does not stop on SIGTERM (its bus thread never finishes): SIGKILL."""
    gw.proc.kill()
    gw.proc.wait(10)


@pytest.mark.parametrize("fault, stalled", [(signal.SIGUSR2, "the D-Bus thread"), (signal.SIGUSR1, "the HTTP server")])
def test_no_watchdog_once_a_thread_is_stalled(notifications, fault, stalled):
    gw = start(["--simulate"], notifications, watchdog_us=1_500_000)
    try:
        ready = notifications.wait_for("READY=1", 10)
        assert ready is not None
        time.sleep(1.2)
        assert len(watchdog_times(notifications, ready)) >= 2
        gw.proc.send_signal(fault)
        stalled_at = time.monotonic()
        time.sleep(0.8)  # a beat that began before the fault may still end well
        quiet_from = time.monotonic()
        time.sleep(2.5)
        assert watchdog_times(notifications, quiet_from) == [], "WATCHDOG=1 after the stall"
        assert any(f"watchdog: {stalled} did not answer" in line for line in gw.log), gw.log
        if fault == signal.SIGUSR2:
            assert answers(gw)  # only the D-Bus thread is stalled: the HTTP server serves on
        assert time.monotonic() - stalled_at > 3
    finally:
        kill(gw)


def test_a_bus_that_goes_away_is_no_stall(notifications, bus):  # noqa: F811
    """The D-Bus system bus (and bluetoothd) stopping is not gattway wedged: it serves on and
    connects again, so the watchdog goes on."""
    bus.start()
    gw = start([], notifications, extra_env={"DBUS_SYSTEM_BUS_ADDRESS": bus.address})
    try:
        ready = notifications.wait_for("READY=1", 10)
        assert ready is not None
        bus.kill()
        gone = time.monotonic()
        time.sleep(2.5)
        beats = watchdog_times(notifications, gone)
        assert len(beats) >= 4, notifications.messages()
        assert any("D-Bus connection is lost" in line for line in gw.log), gw.log
    finally:
        gw.stop()


def test_the_watchdog_checks_https_through_tls(notifications, certificate):  # noqa: F811
    cert, key = certificate
    gw = start(["--simulate", "--tls-cert", cert, "--tls-key", key], notifications)
    try:
        ready = notifications.wait_for("READY=1", 10)
        assert ready is not None
        time.sleep(1.7)
        assert len(watchdog_times(notifications, ready)) >= 3, notifications.messages()
        assert not any("did not answer" in line for line in gw.log), gw.log
    finally:
        gw.stop()
