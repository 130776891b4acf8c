"""Access control and limits, against `gattway --simulate` over HTTP as a client sees them:
tokens on every route of openapi.yaml, a token in the URL taken by the streams only, read-only
tokens, SIGHUP, bodies that must be JSON, origins and CORS, the DNS-rebinding guard,
loopback-only without tokens, and each limit answered as documented (429 / 431 / close 1009)
with one log line."""
import asyncio
import json
import os
import signal
import socket
import subprocess
import urllib.parse
import urllib.request

import pytest
import websockets
import yaml

from conftest import ROOT, Gateway, binary, send_raw, wait_for

HR = "F0:00:00:00:00:01"
RW = "rw-token-0123456789abcdef"
RO = "ro-token-0123456789abcdef"
SAMPLES = {"id": HR, "service": "180d", "char": "2a37", "desc": "2902", "file": "app.js", "port": "9999", "advertisement": "1"}


def operations():
    """Every (method, path) of openapi.yaml, path parameters filled in, and whether it is open."""
    with open(os.path.join(ROOT, "openapi.yaml")) as f:
        spec = yaml.safe_load(f)
    default_open = spec.get("security") in (None, [])
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if method not in ("get", "put", "post", "delete", "patch"):
                continue
            security = op.get("security", None)
            is_open = security == [] or (security is None and default_open)
            yield method.upper(), path.format(**SAMPLES), is_open


@pytest.fixture
def secured(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# test tokens\n{RW}\nro:{RO}\n")
    gw = Gateway(["--simulate", "--tokens", str(tokens), "--allow-origin", "http://dash.example:8123"])
    gw.tokens_file = tokens
    yield gw
    gw.stop()


def bearer(token):
    return {"Authorization": "Bearer " + token}


def test_every_route_of_the_spec_needs_a_token(secured):
    ops = list(operations())
    assert len(ops) > 30, ops
    # The health check, and the dashboard, which must load to ask for a token.
    assert [(m, p) for m, p, is_open in ops if is_open] == [("GET", "/"), ("GET", "/ui/app.js"), ("GET", "/v1/state")]
    for method, path, is_open in ops:
        if is_open:
            continue
        body = {} if method in ("POST", "PUT") else None
        status, reply, headers = secured.request(method, path, body)
        assert status == 401, (method, path, status, reply)
        assert reply["error"]["domain"] == "CBATTErrorDomain" and reply["error"]["name"] == "insufficientAuthentication"
        assert headers["WWW-Authenticate"] == 'Bearer realm="gattway"'
        status, reply, headers = secured.request(method, path, body, headers=bearer("not-a-token-0123456789"))
        assert status == 401, (method, path, status)
        assert 'error="invalid_token"' in headers["WWW-Authenticate"]
    assert secured.get("/v1/state")[0] == 200
    assert secured.request("GET", "/v1/devices", headers=bearer(RW))[0] == 200
    # Event streams take the token in the query, as EventSource cannot set headers.
    status, _, headers = secured.request("GET", "/v1/events?types=state&device=zz&access_token=" + RO)
    assert status == 400  # past access control: the bad device is the stream's own error


def test_read_only_tokens_get_and_stream_but_change_nothing(secured):
    for method, path, is_open in operations():
        if method == "GET" or is_open:
            continue
        body = {} if method in ("POST", "PUT") else None
        status, reply, _ = secured.request(method, path, body, headers=bearer(RO))
        assert status == 403, (method, path, status, reply)
        assert reply["error"]["name"] == "insufficientAuthorization"
    assert secured.request("GET", "/v1/scan", headers=bearer(RO))[0] == 200
    assert secured.request("POST", "/v1/scan", {}, headers=bearer(RW))[0] == 200
    assert wait_for(lambda: HR in {d["id"] for d in secured.request("GET", "/v1/devices", headers=bearer(RO))[1]["devices"]}, 5)
    assert secured.request("POST", f"/v1/devices/{HR}/connect", {"timeout": 10}, headers=bearer(RW))[0] == 200

    async def socket_session():
        url = secured.base.replace("http://", "ws://") + "/v1/ws"
        async with websockets.connect(url, subprotocols=["gattway", "bearer." + RO]) as ws:
            assert ws.subprotocol == "gattway"
            await ws.send(json.dumps({"op": "read", "id": "r", "device": HR, "characteristic": "2a19"}))
            read = json.loads(await ws.recv())
            await ws.send(json.dumps({"op": "write", "id": "w", "device": HR, "characteristic": "2a39", "value": "01"}))
            write = json.loads(await ws.recv())
            return read, write
    read, write = asyncio.run(socket_session())
    assert read["op"] == "result" and read["id"] == "r"
    assert write["op"] == "error" and write["error"]["name"] == "insufficientAuthorization", write


def test_tokens_are_read_again_on_sighup(secured):
    assert secured.request("GET", "/v1/devices", headers=bearer(RW))[0] == 200
    new = "new-token-0123456789abcdef"
    secured.tokens_file.write_text(new + "\n")
    secured.proc.send_signal(signal.SIGHUP)
    assert wait_for(lambda: any("tokens: SIGHUP: 1 token(s) in force" in l for l in secured.log), 5), secured.log[-5:]
    assert secured.request("GET", "/v1/devices", headers=bearer(RW))[0] == 401
    assert secured.request("GET", "/v1/devices", headers=bearer(new))[0] == 200
    # A broken file keeps the tokens in force.
    secured.tokens_file.write_text("short\n")
    secured.proc.send_signal(signal.SIGHUP)
    assert wait_for(lambda: any("keeping the tokens in force" in l for l in secured.log), 5)
    assert secured.request("GET", "/v1/devices", headers=bearer(new))[0] == 200


def test_bodies_that_change_state_must_be_json(gateway):
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        status, reply, headers = gateway.request("POST", "/v1/scan", raw=b"{}", headers={"Content-Type": content_type})
        assert status == 415, (content_type, status)
        assert reply["error"]["name"] == "invalidParameters" and "application/json" in reply["error"]["message"]
    assert gateway.get("/v1/scan")[1]["scanning"] is False
    status, _, _ = gateway.request("POST", "/v1/scan", raw=b"{}", headers={"Content-Type": "application/json; charset=utf-8"})
    assert status == 200


def test_origins_cors_and_preflight(secured):
    allowed = "http://dash.example:8123"
    status, reply, headers = secured.request("GET", "/v1/devices", headers={"Origin": "http://evil.example", **bearer(RW)})
    assert status == 403 and "--allow-origin" in reply["error"]["message"]
    assert "Access-Control-Allow-Origin" not in headers
    status, _, headers = secured.request("GET", "/v1/devices", headers={"Origin": allowed, **bearer(RW)})
    assert status == 200 and headers["Access-Control-Allow-Origin"] == allowed and headers["Vary"] == "Origin"
    # A 401 is readable by the allowed page too, so it can ask for a token.
    status, _, headers = secured.request("GET", "/v1/devices", headers={"Origin": allowed})
    assert status == 401 and headers["Access-Control-Allow-Origin"] == allowed

    def preflight(origin, method):
        return secured.request("OPTIONS", f"/v1/devices/{HR}/characteristics/2a39/value", headers={
            "Origin": origin, "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": "authorization, content-type"})
    status, body, headers = preflight(allowed, "PUT")
    assert status == 204 and body is None
    assert headers["Access-Control-Allow-Origin"] == allowed
    assert set(headers["Access-Control-Allow-Methods"].split(", ")) == {"GET", "HEAD", "PUT", "OPTIONS"}
    assert {"authorization", "content-type"} <= set(headers["Access-Control-Allow-Headers"].lower().split(", "))
    assert int(headers["Access-Control-Max-Age"]) > 0
    assert preflight(allowed, "DELETE")[0] == 403
    assert preflight("http://evil.example", "PUT")[0] == 403


def test_websocket_origins(secured):
    url = secured.base.replace("http://", "ws://") + "/v1/ws?access_token=" + RW

    async def connect(origin):
        try:
            async with websockets.connect(url, origin=origin) as ws:
                await ws.send(json.dumps({"op": "unsubscribe", "id": "1", "subscription": "none"}))
                return json.loads(await ws.recv())["op"]
        except websockets.exceptions.InvalidStatus as e:
            return e.response.status_code
    assert asyncio.run(connect("http://evil.example")) == 403
    assert asyncio.run(connect("http://dash.example:8123")) == "error"
    assert asyncio.run(connect(None)) == "error"
    assert any("refused (origin) 127.0.0.1" in line for line in secured.log)


def raw_request(gw, text):
    """The response head to `text`, sent as it is; the connection is closed after."""
    sock, head = send_raw(gw, text)
    sock.close()
    return head


def test_dns_rebinding_guard_without_tokens(gateway):
    # A page that rebinds its own name to 127.0.0.1 sends that name as Host (and as Origin).
    head = raw_request(gateway, "GET /v1/devices HTTP/1.1\r\nHost: attacker.example:8080\r\n\r\n")
    assert head.startswith("HTTP/1.1 403"), head
    for host in ("127.0.0.1", "localhost:8080", "[::1]:8080"):
        assert raw_request(gateway, f"GET /v1/devices HTTP/1.1\r\nHost: {host}\r\n\r\n").startswith("HTTP/1.1 200")


def test_no_tokens_means_loopback_unless_told(tmp_path):
    out = subprocess.run([binary("gattway"), "--simulate", "--listen", "0.0.0.0:0"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert "without tokens" in out.stderr and "--no-auth" in out.stderr
    gw = Gateway(["--simulate"])
    try:
        assert any("access: no tokens" in l and "loopback" in l for l in gw.log), gw.log
    finally:
        gw.stop()
    gw = Gateway(["--simulate", "--listen", "0.0.0.0:0", "--no-auth"])
    try:
        assert gw.get("/v1/state")[0] == 200
        assert any("access: no tokens" in l and "--no-auth" in l for l in gw.log), gw.log
    finally:
        gw.stop()
    bad = tmp_path / "tokens"
    bad.write_text("# a comment\nshort\n")
    out = subprocess.run([binary("gattway"), "--simulate", "--tokens", str(bad)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and f"{bad}:2: a token has 16 to 512 characters" in out.stderr, out.stderr


def test_request_rate_per_client():
    gw = Gateway(["--simulate", "--rate-limit", "5"])
    try:
        statuses = [gw.get("/v1/devices") for _ in range(30)]
        codes = [s for s, _, _ in statuses]
        assert codes[:10] == [200] * 10, codes  # a burst of twice the rate
        refused = next(r for r in statuses if r[0] == 429)
        assert refused[1]["error"]["name"] == "connectionLimitReached" and "--rate-limit" in refused[1]["error"]["message"]
        assert int(refused[2]["Retry-After"]) >= 1
        assert len([l for l in gw.log if "refused (rate)" in l]) == 1, [l for l in gw.log if "refused" in l]
    finally:
        gw.stop()


def test_connections_and_streams_per_client():
    gw = Gateway(["--simulate", "--max-client-connections", "4", "--max-client-streams", "2", "--rate-limit", "0"])
    url = urllib.parse.urlparse(gw.base)
    held = []
    try:
        def open_stream():
            sock = socket.create_connection((url.hostname, url.port), timeout=10)
            sock.sendall(b"GET /v1/events?types=state HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            head = sock.recv(4096).decode(errors="replace")
            held.append(sock)
            return head
        assert open_stream().startswith("HTTP/1.1 200")
        assert open_stream().startswith("HTTP/1.1 200")
        third = open_stream()
        assert third.startswith("HTTP/1.1 429") and "--max-client-streams" in third and "Retry-After: 5" in third, third
        # Two streams and an idle connection open: a fourth connection is served, a fifth is refused.
        idle = socket.create_connection((url.hostname, url.port), timeout=10)
        held.append(idle)
        assert wait_for(lambda: len(held) == 4, 1)
        reply = raw_request(gw, "GET /v1/state HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert reply.startswith("HTTP/1.1 429") and "--max-client-connections" in reply, reply
        for sock in held:
            sock.close()
        held.clear()
        assert wait_for(lambda: gw.get("/v1/state")[0] == 200, 5)
        assert any("refused (streams) 127.0.0.1" in l for l in gw.log)
        assert any("refused (tooManyConnectionsFromClient) 127.0.0.1: answered 429" in l for l in gw.log)
        metrics = urllib.request.urlopen(gw.base + "/metrics", timeout=10).read().decode()
        assert 'gattway_refusals_total{kind="streams"} 1' in metrics, metrics
        assert 'gattway_refusals_total{kind="tooManyConnectionsFromClient"} 1' in metrics
    finally:
        for sock in held:
            sock.close()
        gw.stop()


def test_oversize_headers_and_websocket_messages():
    gw = Gateway(["--simulate", "--max-ws-message", "1000"])
    try:
        reply = raw_request(gw, "GET /v1/state HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + "a" * 9000 + "\r\n\r\n")
        assert reply.startswith("HTTP/1.1 431"), reply[:200]

        async def oversize():
            async with websockets.connect(gw.base.replace("http://", "ws://") + "/v1/ws", max_size=None) as ws:
                await ws.send(json.dumps({"op": "read", "id": "x" * 2000}))
                try:
                    await ws.recv()
                except websockets.exceptions.ConnectionClosed as closed:
                    return closed.rcvd.code if closed.rcvd else None
        assert asyncio.run(oversize()) == 1009
        assert wait_for(lambda: any("refused (websocket) 127.0.0.1" in l and "1009" in l for l in gw.log), 5), gw.log[-5:]
        assert gw.get("/v1/state")[0] == 200
    finally:
        gw.stop()


# Issue 35 (2): what a browser opens without headers takes the token in its URL, nothing else.
STREAMS = {p.format(**SAMPLES) for p in ("/v1/events", "/v1/ws", "/v1/devices/{id}/serial")}


def documented_message(example):
    with open(os.path.join(ROOT, "openapi.yaml")) as f:
        spec = yaml.safe_load(f)
    return spec["components"]["responses"]["Unauthorized"]["content"]["application/json"]["examples"][example]["value"]["error"]["message"]


def test_a_token_in_the_url_is_refused_outside_the_streams(secured):
    """401 with the message openapi.yaml shows (send `Authorization: Bearer`), on every route but
    the streams, even beside a valid header; the refusal is logged without the token."""
    message = documented_message("tokenInURL")
    # The case: a plain GET of the list with the token in its URL.
    status, reply, headers = secured.get("/v1/devices?access_token=" + RW)
    assert status == 401 and reply["error"]["message"] == message, reply
    assert reply["error"]["name"] == "insufficientAuthentication" and headers["WWW-Authenticate"] == 'Bearer realm="gattway"'
    # Every other route of the spec, the open ones too, even beside a valid header.
    others = [(m, p) for m, p, _ in operations() if p not in STREAMS]
    assert len(others) > 30, others
    for method, path in others:
        body = {} if method in ("POST", "PUT") else None
        status, reply, _ = secured.request(method, path + "?access_token=" + RO, body, headers=bearer(RW))
        assert status == 401 and reply["error"]["message"] == message, (method, path, status, reply)
    assert secured.request("GET", "/v1/devices", headers=bearer(RW))[0] == 200
    refusals = [line for line in secured.log if "refused (token in URL)" in line]
    assert refusals and refusals[0].endswith("401 GET /v1/devices?access_token=…"), refusals
    assert not [line for line in secured.log if RW in line or RO in line]


def test_the_streams_take_a_token_in_the_url_and_nothing_logs_it(secured):
    """SSE, `/v1/ws` and the serial WebSocket work with `?access_token=`, as a browser opens them;
    the request lines name the paths, and no line holds a token."""
    from test_reconnect import SSE, connection
    from test_serial import HM10, receive_bytes, ws_url
    assert secured.post("/v1/scan", {}, headers=bearer(RW))[0] == 200
    assert wait_for(lambda: {HR, HM10} <= {d["id"] for d in secured.request("GET", "/v1/devices", headers=bearer(RO))[1]["devices"]}, 5)

    # Server-Sent Events, as EventSource opens them: a read-only token is enough.
    events = SSE(secured, f"types=connection&device={HR}&access_token={RO}")
    try:
        assert secured.post(f"/v1/devices/{HR}/connect", {"timeout": 10}, headers=bearer(RW))[0] == 200
        assert events.wait(connection("connected"), 10), events.events
    finally:
        events.close()

    # The events' WebSocket.
    async def session():
        async with websockets.connect(secured.base.replace("http://", "ws://") + "/v1/ws?access_token=" + RO) as ws:
            await ws.send(json.dumps({"op": "read", "id": "r", "device": HR, "characteristic": "2a19"}))
            return json.loads(await ws.recv())
    read = asyncio.run(session())
    assert read["op"] == "result" and read["id"] == "r", read

    # The serial port's WebSocket (it connects the device itself), echoing what is written.
    from websockets.sync.client import connect as ws_connect
    with ws_connect(ws_url(secured, HM10, write=True, connect="auto", access_token=RW)) as sock:
        sock.send("hello, UART")
        assert receive_bytes(sock, 11) == b"hello, UART"

    # The same streams without the token, or with a wrong one, are refused.
    status, _, headers = secured.request("GET", "/v1/events?types=state&access_token=not-a-token-0123456789")
    assert status == 401 and 'error="invalid_token"' in headers["WWW-Authenticate"]
    assert secured.request("GET", f"/v1/devices/{HM10}/serial")[0] == 401

    # Requests are logged by their path, never with their query.
    for path in ("/v1/events", "/v1/ws", f"/v1/devices/{HM10}/serial"):
        assert any(f" GET {path} " in line for line in secured.log), (path, secured.log[-20:])
    assert not [line for line in secured.log if RW in line or RO in line or "access_token" in line]
