"""TLS (issue 12): `gattway --simulate --tls-cert --tls-key` serves REST, SSE and WebSocket over
HTTPS only, with the client verifying a certificate made here by openssl."""
import asyncio
import json
import socket
import ssl
import subprocess
import urllib.error
import urllib.request

import pytest
import websockets

from conftest import Gateway, binary
from test_streams import subscribe

SERIAL = "F0:00:00:00:00:02"


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1 (its own CA) and its key: (cert, key) paths."""
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return str(cert), str(key)


@pytest.fixture
def secure(certificate):
    cert, key = certificate
    gw = Gateway(["--simulate", "--tls-cert", cert, "--tls-key", key],
                 ssl_context=ssl.create_default_context(cafile=cert))
    gw.discover(SERIAL)
    assert gw.post(f"/v1/devices/{SERIAL}/connect", {"timeout": 10})[0] == 200
    yield gw
    gw.stop()


def test_rest_over_https(secure):
    assert secure.base.startswith("https://127.0.0.1:")
    status, body, _ = secure.get("/v1/state")
    assert status == 200 and body["state"] == "poweredOn"


def test_sse_over_https_receives_a_notification(secure):
    req = urllib.request.Request(secure.base + f"/v1/events?device={SERIAL}&characteristic=ffe1&format=utf8")
    with urllib.request.urlopen(req, timeout=10, context=secure.ssl_context) as resp:
        assert resp.headers["Content-Type"] == "text/event-stream"
        # The stream is subscribed once its head is in: the write's echo is an event on it.
        status, body, _ = secure.request("PUT", f"/v1/devices/{SERIAL}/characteristics/ffe1/value",
                                         {"value": "over tls", "format": "utf8"})
        assert status == 200, body
        while True:
            line = resp.readline().decode()
            assert line, "the stream ended"
            if line.startswith("data:"):
                event = json.loads(line[5:])
                if event.get("type") == "notification":
                    assert event["value"] == "over tls"
                    return


def test_websocket_over_wss_subscribes_and_receives_a_notification(secure):
    async def run():
        url = secure.base.replace("https://", "wss://") + "/v1/ws"
        async with websockets.connect(url, ssl=secure.ssl_context) as ws:
            await subscribe(ws, device=SERIAL, characteristic="ffe1", format="utf8")
            await ws.send(json.dumps({"op": "write", "id": "w", "device": SERIAL, "characteristic": "ffe1",
                                      "value": "wss", "format": "utf8", "withResponse": True}))
            while True:
                msg = json.loads(await asyncio.wait_for(ws.recv(), 5))
                if msg.get("type") == "notification":
                    assert msg["value"] == "wss"
                    break
            # A message larger than MHD's relay buffers and the socket buffers, both ways.
            big = "x" * 60000
            await ws.send(json.dumps({"op": "fly", "id": big}))
            while json.loads(await asyncio.wait_for(ws.recv(), 10)).get("id") != big:
                pass  # the write's answer may come after its notification
    asyncio.run(run())


def test_plain_http_to_the_tls_port_is_closed_and_serving_goes_on(secure):
    port = int(secure.base.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /v1/state HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        try:
            answer = sock.recv(4096)
        except ConnectionResetError:
            answer = b""
    assert not answer.startswith(b"HTTP/")
    assert secure.get("/v1/state")[0] == 200


def test_unverified_clients_are_refused(secure):
    with pytest.raises(urllib.error.URLError) as refused:
        urllib.request.urlopen(secure.base + "/v1/state", timeout=10, context=ssl.create_default_context())
    assert isinstance(refused.value.reason, ssl.SSLCertVerificationError)


@pytest.mark.parametrize("problem", ["only the certificate", "missing key file", "key of another certificate"])
def test_bad_tls_configuration_stops_with_exit_2(certificate, tmp_path, problem):
    cert, key = certificate
    if problem == "only the certificate":
        args = ["--tls-cert", cert]
    elif problem == "missing key file":
        args = ["--tls-cert", cert, "--tls-key", str(tmp_path / "absent.pem")]
    else:
        other_cert, other_key = tmp_path / "c.pem", tmp_path / "k.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-days", "1", "-subj", "/CN=other", "-keyout", str(other_key),
                        "-out", str(other_cert)], check=True, capture_output=True)
        args = ["--tls-cert", cert, "--tls-key", str(other_key)]
    run = subprocess.run([binary("gattway"), "--simulate", "--state-dir", "none", "--listen", "127.0.0.1:0", *args],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 2, run.stderr
    assert "tls" in run.stderr.lower() and "listening" not in run.stderr
