"""Issue 26: a device's UART as a serial port. The simulated HM-10 ("Sim Serial", FFE0/FFE1,
echoing what is written) through the WebSocket route, driven by the `websockets` library, and
through raw TCP ports (`--serial`, `POST /v1/serial-ports`) opened by pyserial's `socket://`."""
import json
import os
import random
import urllib.parse

import pytest
import serial
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect as ws_connect

from conftest import Gateway, wait_for
from test_diagnostics import metrics

HM10 = "F0:00:00:00:00:02"
HR = "F0:00:00:00:00:01"
# The simulator's UART modules (a 4096-byte buffer drained at 20 000 bytes/s, echoing).
SIM_NUS, SIM_MCHP, SIM_HM10 = "F0:00:00:00:00:0F", "F0:00:00:00:00:10", "F0:00:00:00:00:11"


def ws_url(gw, device, **query):
    url = urllib.parse.urlparse(gw.base)
    q = urllib.parse.urlencode({k: ("true" if v is True else v) for k, v in query.items()})
    return f"ws://{url.hostname}:{url.port}/v1/devices/{device}/serial" + (f"?{q}" if q else "")


def connected(gw, device=HM10):
    gw.discover(device)
    status, body, _ = gw.post(f"/v1/devices/{device}/connect", {})
    assert status == 200, body


def receive_bytes(sock, count, timeout=10):
    """What the socket sends, binary messages put together, until `count` bytes came."""
    got = b""
    while len(got) < count:
        message = sock.recv(timeout=timeout)
        got += message if isinstance(message, bytes) else message.encode()
    return got


def refused(url):
    """The status and error body of a refused upgrade."""
    with pytest.raises(InvalidStatus) as e:
        ws_connect(url, open_timeout=10)
    return e.value.response.status_code, json.loads(e.value.response.body)["error"]


@pytest.fixture
def serial_gateway():
    gw = Gateway(["--simulate"])
    yield gw
    gw.stop()


# ---- the WebSocket --------------------------------------------------------------------------

def test_text_and_binary_round_trips(serial_gateway):
    gw = serial_gateway
    connected(gw)
    with ws_connect(ws_url(gw, HM10, write=True)) as sock:
        sock.send("hello, UART")
        assert receive_bytes(sock, 11) == b"hello, UART"
        # 10 000 bytes of every value, no newline: written in MTU-sized pieces, echoed whole.
        message = bytes(random.Random(26).randrange(256) for _ in range(10_000))
        sock.send(message)
        assert receive_bytes(sock, len(message)) == message
    # The port is closed with its last client, its counts logged.
    assert wait_for(lambda: any("serial port closed (10011 bytes received, 10011 sent" in line for line in gw.log), 5), gw.log[-5:]


def test_lines_are_split_for_a_reader_with_lines(serial_gateway):
    gw = serial_gateway
    connected(gw)
    with ws_connect(ws_url(gw, HM10, lines=True, maxLine=8)) as lines, ws_connect(ws_url(gw, HM10, write=True)) as writer:
        writer.send("one\r\ntw")
        writer.send("o\nthree\n")
        writer.send(b"a line longer than eight\n")
        got = [lines.recv(timeout=10) for _ in range(6)]
        assert got == ["one", "two", "three", "a line l", "onger th", "an eight"]
        assert all(isinstance(m, str) for m in got)


def test_two_readers_and_a_refused_second_writer(serial_gateway):
    gw = serial_gateway
    connected(gw)
    with ws_connect(ws_url(gw, HM10)) as r1, ws_connect(ws_url(gw, HM10)) as r2, \
            ws_connect(ws_url(gw, HM10, write=True)) as writer:
        status, error = refused(ws_url(gw, HM10, write=True))
        assert status == 503 and error["name"] == "connectionLimitReached", error
        assert "has a writer already" in error["message"]
        writer.send("to everyone")
        for sock in (r1, r2, writer):
            assert receive_bytes(sock, 11) == b"to everyone"
    # The writer gone, another may write.
    with ws_connect(ws_url(gw, HM10, write=True)) as writer:
        writer.send("again")
        assert receive_bytes(writer, 5) == b"again"


def test_a_reader_that_sends_is_closed_1008(serial_gateway):
    gw = serial_gateway
    connected(gw)
    with ws_connect(ws_url(gw, HM10)) as reader:
        reader.send("not mine to write")
        with pytest.raises(ConnectionClosed) as e:
            reader.recv(timeout=10)
        assert e.value.rcvd.code == 1008 and "reads only" in e.value.rcvd.reason


def test_bad_frames_get_the_documented_close_codes(serial_gateway):
    gw = serial_gateway
    connected(gw)
    # A message over 64 KiB: 1009.
    with ws_connect(ws_url(gw, HM10, write=True), max_size=None) as sock:
        sock.send(b"x" * (64 * 1024 + 1))
        with pytest.raises(ConnectionClosed) as e:
            sock.recv(timeout=10)
        assert e.value.rcvd.code == 1009
    # Text that is not UTF-8 (a raw frame, as no library sends one): 1007.
    with ws_connect(ws_url(gw, HM10, write=True)) as sock:
        mask = b"\x01\x02\x03\x04"
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(b"\xff\xfe"))
        sock.socket.sendall(bytes([0x81, 0x80 | 2]) + mask + payload)
        with pytest.raises(ConnectionClosed) as e:
            sock.recv(timeout=10)
        assert e.value.rcvd.code == 1007


def test_refusals_before_the_upgrade(serial_gateway):
    gw = serial_gateway
    gw.discover(HM10, HR)
    # Not connected: 409, unless connect=auto.
    status, error = refused(ws_url(gw, HM10))
    assert status == 409 and error["name"] == "notConnected", error
    with ws_connect(ws_url(gw, HM10, write=True, connect="auto")) as sock:
        sock.send("auto")
        assert receive_bytes(sock, 4) == b"auto"
    # A profile the device lacks, or a device with no UART: 404 invalidHandle.
    status, error = refused(ws_url(gw, HM10, profile="nordic"))
    assert status == 404 and error["name"] == "invalidHandle" and "nordic" in error["message"], error
    connected(gw, HR)
    status, error = refused(ws_url(gw, HR))
    assert status == 404 and "none of the serial profiles" in error["message"], error
    # Bad query values: 400, naming the field.
    for query, field in [({"mode": "fast"}, "mode"), ({"rate": "0"}, "rate"), ({"maxLine": "0"}, "maxLine"),
                         ({"rx": "ffe1"}, "rx and tx"), ({"profile": "hm-11"}, "profile"), ({"onLinkLoss": "maybe"}, "onLinkLoss")]:
        status, error = refused(ws_url(gw, HM10, **query))
        assert status == 400 and field in error["message"], (query, error)
    # A plain GET is no upgrade: 400, and the device's port was not opened for it.
    status, body, _ = gw.get(f"/v1/devices/{HM10}/serial")
    assert status == 400 and "Upgrade" in body["error"]["message"]


def test_a_link_loss_closes_4001_or_is_held(serial_gateway):
    gw = serial_gateway
    connected(gw)
    with ws_connect(ws_url(gw, HM10)) as closing, ws_connect(ws_url(gw, HM10, write=True, onLinkLoss="hold")) as holding:
        gw.simulator("DropLink", f"string:{HM10}")
        with pytest.raises(ConnectionClosed) as e:
            closing.recv(timeout=10)
        assert e.value.rcvd.code == 4001
        # The holding socket stays; gattway connects the device again, and the echo is back.
        holding.send("after the loss")
        assert receive_bytes(holding, 14, timeout=30) == b"after the loss"
    assert any("link back, tx notifying again" in line for line in gw.log)


# ---- raw TCP ports, through pyserial ---------------------------------------------------------

def tcp_port(gw, device):
    """The port `--serial 127.0.0.1:0=device` listens on (from /v1/serial-ports)."""
    ports = [p for p in gw.get("/v1/serial-ports")[1]["ports"] if p["device"] == device]
    assert ports, gw.get("/v1/serial-ports")
    return ports[0]["port"]


def link_counts(gw, port):
    """The bytes a serial port's link sent and received so far."""
    link = gw.get(f"/v1/serial-ports/{port}")[1]["link"]
    return link["sent"], link["received"]


def test_pyserial_echoes_10000_bytes_and_reads_lines():
    gw = Gateway(["--simulate", "--serial", f"127.0.0.1:0={HM10}"])
    try:
        port = tcp_port(gw, HM10)
        gw.discover(HM10)
        # The device is connected by the port's first client, not before.
        assert gw.get(f"/v1/devices/{HM10}")[1]["state"] == "disconnected"
        with serial.serial_for_url(f"socket://127.0.0.1:{port}", timeout=15) as s:
            message = bytes(random.Random(10_000).randrange(256) for _ in range(10_000)).replace(b"\n", b".")
            s.write(message)
            assert s.read(len(message)) == message
            s.write(b"first line\r\nsecond line\n")
            assert s.readline() == b"first line\r\n"
            assert s.readline() == b"second line\n"
            listed = gw.get(f"/v1/serial-ports/{port}")[1]
            assert listed["clients"] == 1 and listed["link"]["profile"] == "hm10"
            # A write is counted sent when BlueZ has answered it, and its echo can reach the
            # client first (a clean-clone run read 10000 sent beside 10024 received): the
            # counters follow within moments.
            assert wait_for(lambda: link_counts(gw, port) == (10_000 + 24, 10_000 + 24), 5), link_counts(gw, port)
        assert wait_for(lambda: gw.get(f"/v1/serial-ports/{port}")[1].get("link") is None, 5)
    finally:
        gw.stop()


def uart_stats(gw, address):
    out = gw.simulator("UARTStats", f"string:{address}")
    values = [int(w) for w in out.split() if w.isdigit()]
    return dict(zip(["received", "dropped", "echoed", "streamed"], values[-4:]))


@pytest.mark.parametrize("device,profile", [(SIM_HM10, "hm10"), (SIM_NUS, "nordic"), (SIM_MCHP, "microchip")])
def test_pyserial_on_each_uart_module(device, profile):
    """The modules as sold: 10 000 bytes with no newline echoed byte-identical, then lines."""
    gw = Gateway(["--simulate", "--serial", f"127.0.0.1:0={device}"])
    try:
        port = tcp_port(gw, device)
        gw.discover(device)
        with serial.serial_for_url(f"socket://127.0.0.1:{port}", timeout=20) as s:
            message = bytes(random.Random(profile).randrange(256) for _ in range(10_000)).replace(b"\n", b"-")
            s.write(message)
            assert s.read(len(message)) == message
            s.write(b"AT+VERSION\r\n")
            assert s.readline() == b"AT+VERSION\r\n"
            assert gw.get(f"/v1/serial-ports/{port}")[1]["link"]["profile"] == profile
        stats = uart_stats(gw, device)
        assert stats["received"] == stats["echoed"] == 10_000 + 12 and stats["dropped"] == 0, stats
    finally:
        gw.stop()


def test_64k_without_response_paced_loses_nothing():
    """64 KiB written without response to a module whose 4096-byte buffer drains at 20 000 B/s:
    paced at 19 000 B/s every byte gets in (counted at the simulator); unpaced, the module drops
    some (so the count can tell)."""
    gw = Gateway(["--simulate", "--serial", f"127.0.0.1:0={SIM_NUS},nordic,mode=command,rate=19000",
                  "--serial", f"127.0.0.1:0={SIM_HM10},hm10,mode=command"])
    try:
        ports = {p["device"]: p["port"] for p in gw.get("/v1/serial-ports")[1]["ports"]}
        gw.discover(SIM_NUS, SIM_HM10)
        data = bytes(random.Random(64).randrange(256) for _ in range(64 * 1024))
        for device in (SIM_NUS, SIM_HM10):
            with serial.serial_for_url(f"socket://127.0.0.1:{ports[device]}", timeout=20) as s:
                s.write(data)
                assert wait_for(lambda: sum(uart_stats(gw, device)[k] for k in ("received", "dropped")) == len(data), 20), \
                    uart_stats(gw, device)
        paced, unpaced = uart_stats(gw, SIM_NUS), uart_stats(gw, SIM_HM10)
        assert paced["received"] == len(data) and paced["dropped"] == 0, paced
        assert unpaced["dropped"] > 0, unpaced
        # gattway wrote every byte (the module's drops are the module's, past ATT).
        # (Counted sent once BlueZ answered the write, which may be after the module counted it.)
        sent = lambda: metrics(gw)[0].get(("gattway_serial_bytes_total", 'direction="sent"'))
        assert wait_for(lambda: sent() == 2 * len(data), 5), metrics(gw)[0]
    finally:
        gw.stop()


def test_ports_added_and_removed_over_the_api(serial_gateway):
    gw = serial_gateway
    gw.discover(HM10)
    status, body, _ = gw.post("/v1/serial-ports", {"device": HM10, "profile": "hm10", "onLinkLoss": "hold"})
    assert status == 201, body
    port = body["port"]
    assert body["onLinkLoss"] == "hold" and body["profile"] == "hm10" and body["clients"] == 0
    with serial.serial_for_url(f"socket://127.0.0.1:{port}", timeout=15) as s:
        s.write(b"over the API\n")
        assert s.readline() == b"over the API\n"
    status, body, _ = gw.post("/v1/serial-ports", {"device": HM10, "port": port})
    assert status == 400 and "serves a device already" in body["error"]["message"]
    status, body, _ = gw.post("/v1/serial-ports", {"device": HM10, "rx": "ffe1"})
    assert status == 400 and "rx and tx" in body["error"]["message"]
    status, body, _ = gw.post("/v1/serial-ports", {"device": HM10, "host": "0.0.0.0"})
    assert status == 403 and "--no-auth" in body["error"]["message"], body
    status, body, _ = gw.delete(f"/v1/serial-ports/{port}")
    assert status == 200 and body["port"] == port
    assert gw.get(f"/v1/serial-ports/{port}")[0] == 404
    with pytest.raises(serial.SerialException):
        serial.serial_for_url(f"socket://127.0.0.1:{port}", timeout=2)


def test_serial_beyond_loopback_needs_no_auth():
    import subprocess
    from conftest import binary
    out = subprocess.run([binary("gattway"), "--simulate", "--serial", f"0.0.0.0:0={HM10}"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "a raw TCP port has no tokens" in out.stderr
    out = subprocess.run([binary("gattway"), "--serial", "7000=nope"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "HOST:PORT=ADDRESS" in out.stderr
