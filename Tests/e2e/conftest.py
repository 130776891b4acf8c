"""End-to-end fixtures: a real `gattway --simulate` process, talked to over HTTP."""
import json
import os
import re
import socket
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request

import pytest

import contract
import streamtap
import targets

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pytest_configure(config):
    config.addinivalue_line("markers", "agent(capability, passkey): the realbluez test agent a pairing test wants")
    streamtap.install()


# Every message a test receives from a live stream is checked against openapi.yaml (streamtap):
# one that does not match fails the test that received it, at its teardown; one that arrives
# after that test has ended fails the session. The counts are printed at the end.
@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    streamtap.TALLY.test = item.nodeid
    STARTED.clear()
    try:
        return (yield)
    finally:
        streamtap.TALLY.test = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        # What each gattway the test started said last, whatever the assertion printed.
        for n, gateway in enumerate(STARTED):
            report.sections.append((f"gattway {n + 1} of {len(STARTED)}: its last 60 log lines", "\n".join(gateway.log[-60:])))
    if call.when == "teardown":
        problems = streamtap.TALLY.take(item.nodeid)
        if problems:
            report.outcome = "failed"
            report.longrepr = f"{len(problems)} stream message(s) received by this test do not match openapi.yaml:\n" \
                + "\n".join(problems[:20])
    return report


def pytest_sessionfinish(session):
    late = streamtap.TALLY.late = {test: problems for test in list(streamtap.TALLY.problems)
                                   if (problems := streamtap.TALLY.take(test))}
    if late:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    terminalreporter.section("stream messages against openapi.yaml")
    for line in streamtap.TALLY.summary():
        terminalreporter.write_line(line)
    for test, problems in streamtap.TALLY.late.items():
        terminalreporter.write_line(f"FAILED: received by {test or 'no test'} after it ended, not as openapi.yaml says:\n  "
                                    + "\n  ".join(problems[:20]))


# Real BlueZ: each test file starts with no link in the lab. btvirt's side of a link has been
# seen to outlive its end (a clean-clone run: bluetoothd restarted in a test's teardown while its
# link went down, and the next bluetoothd found hci1 "already connected" to hci0; RB-Periph then
# accepted no connection, and the next three test files failed). No gattway runs between test
# files, so a link then is the lab's leftover: it is ended from both sides, and said so.
LAB_LINKS = r"""
for i in 0 1 2; do
    for a in $(hcitool -i hci$i con 2>/dev/null | grep -oE 'LE ([0-9A-F]{2}:){5}[0-9A-F]{2}' | cut -d' ' -f2); do
        btmgmt --index $i disconnect -t 1 $a >/dev/null 2>&1; echo "hci$i-$a"
    done
done
for n in $(seq 50); do
    left=$(hcitool con 2>/dev/null | grep -c ' LE ')
    [ "$left" = 0 ] && exit 0
    sleep 0.1
done
echo "still-there:$left"
"""


def end_lab_links(when="with no gattway running"):
    """Real BlueZ: ends the lab's links (call it only when no gattway runs) and says which it
    ended; elsewhere nothing. What was ended, as lines."""
    target = targets.current()
    if target["name"] != "realbluez":
        return []
    lab = os.environ.get("RB_LAB", os.path.join(os.path.dirname(ROOT), "shared", "realbluez"))
    out = subprocess.run([os.path.join(lab, "guest-exec"), LAB_LINKS], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "RB_STATE_DIR": target["state_dir"]})
    ended = out.stdout.strip().splitlines()
    if ended:
        print(f"\n[realbluez] lab: links left over {when}, ended: {'; '.join(ended)}")
    return ended


@pytest.fixture(scope="module", autouse=True)
def lab_without_links():
    end_lab_links()
    yield


def binary(name):
    path = os.environ.get("GATTWAY_BIN_DIR", os.path.join(ROOT, ".build", "debug"))
    exe = os.path.join(path, name)
    if not os.path.exists(exe):
        pytest.fail(f"{exe} not found: build first (swift build) or set GATTWAY_BIN_DIR")
    return exe


# The gateways the running test started (their logs go with its failure report).
STARTED = []


class Gateway:
    """A running gattway; `base` is its URL. Its log lines are kept in `log`. `ssl_context`
    verifies its certificate when it serves HTTPS."""

    def __init__(self, args, env=None, ssl_context=None):
        self.log = []
        STARTED.append(self)
        self.ssl_context = ssl_context
        # Tests keep no state between gateways unless they ask for it (the default state dir,
        # /var/lib/gattway as root, would carry devices from one test into the next).
        state = [] if "--state-dir" in args else ["--state-dir", "none"]
        self.proc = subprocess.Popen([binary("gattway"), "--listen", "127.0.0.1:0", *state, *args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {})})
        listening = threading.Event()
        self.base = None

        def reader():
            for line in self.proc.stderr:
                self.log.append(line.rstrip())
                m = re.search(r"listening on (https?://\S+)", line)
                if m:
                    self.base = m.group(1)
                    listening.set()
            listening.set()

        threading.Thread(target=reader, daemon=True).start()
        if not listening.wait(30) or self.base is None:
            self.stop()
            pytest.fail("gattway did not start:\n" + "\n".join(self.log))

    @property
    def bus(self):
        """The simulator's bus (from the log line `... DBUS_SYSTEM_BUS_ADDRESS=...`)."""
        for line in self.log:
            m = re.search(r"DBUS_SYSTEM_BUS_ADDRESS=(\S+)", line)
            if m:
                return m.group(1)
        pytest.fail("no simulator bus in the log")

    def simulator(self, method, *args):
        """Calls the simulator's control interface (io.gattway.Simulator1) with dbus-send."""
        cmd = ["dbus-send", "--bus=" + self.bus, "--print-reply", "--dest=org.bluez",
               "/io/gattway/simulator", "io.gattway.Simulator1." + method, *args]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        assert out.returncode == 0, out.stderr
        return out.stdout

    def call_count(self, member, path):
        out = self.simulator("CallCount", "string:" + member, "string:" + path)
        return int(out.strip().split()[-1])

    def discover(self, *addresses, timeout=5.0):
        """Scans until every address is listed."""
        status, body, _ = self.post("/v1/scan", {})
        assert status == 200, body
        ok = wait_for(lambda: set(addresses) <= {d["id"] for d in self.get("/v1/devices")[1]["devices"]}, timeout)
        assert ok, f"{addresses} not discovered"

    def request(self, method, path, body=None, raw=None, headers=None):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers or {})
        if data is not None and not any(k.lower() == "content-type" for k in (headers or {})):
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=60, context=self.ssl_context) as resp:
                status, payload, headers = resp.status, resp.read(), dict(resp.headers)
        except urllib.error.HTTPError as e:
            status, payload, headers = e.code, e.read(), dict(e.headers)
        # Garbage sent on purpose still gets a documented answer.
        contract.check(method, path, status, headers, payload)
        return status, json.loads(payload) if payload else None, headers

    def get(self, path):
        return self.request("GET", path)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body, **kw)

    def delete(self, path):
        return self.request("DELETE", path)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.returncode


def send_raw(gw, text):
    """Sends `text` as it is on a new connection; returns the socket (still open) and the
    response head, once it arrived (or what came before the server closed)."""
    url = urllib.parse.urlparse(gw.base)
    sock = socket.create_connection((url.hostname, url.port), timeout=10)
    sock.sendall(text.encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(65536)
        if not chunk:
            break
        head += chunk
    return sock, head.decode(errors="replace")


@pytest.fixture
def gateway():
    gw = Gateway(["--simulate"])
    yield gw
    gw.stop()


def wait_for(predicate, timeout, interval=0.1):
    """Polls an HTTP-observable condition (the REST API has no push yet) until it holds."""
    import time
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)
