"""Capacity: past --max-streams a new stream is refused with 503 and Retry-After (never a
silent hang), while other requests are still served; a place that frees up is usable again."""
import socket
import urllib.parse

from conftest import Gateway, send_raw, wait_for


def open_sse(gw):
    """A raw SSE request; returns the socket and the response head once it arrived."""
    return send_raw(gw, "GET /v1/events?types=state HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")


def test_streams_past_the_limit_get_503_and_requests_go_on():
    gw = Gateway(["--simulate", "--max-streams", "3"])
    try:
        held = [open_sse(gw) for _ in range(3)]
        assert all(h.startswith("HTTP/1.1 200") for _, h in held), [h for _, h in held]

        sock, head = open_sse(gw)
        sock.close()
        assert head.startswith("HTTP/1.1 503"), head
        assert "Retry-After: 5" in head, head

        status, body, headers = gw.get("/v1/events?types=state")
        assert status == 503
        assert headers.get("Retry-After") == "5"
        assert body["error"]["code"] == 11 and body["error"]["name"] == "connectionLimitReached"
        assert "--max-streams" in body["error"]["message"]

        # A WebSocket is a stream too.
        url = urllib.parse.urlparse(gw.base)
        ws = socket.create_connection((url.hostname, url.port), timeout=10)
        ws.sendall(b"GET /v1/ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
        assert ws.recv(4096).startswith(b"HTTP/1.1 503")
        ws.close()

        # Everything else is still served.
        assert gw.get("/v1/state")[0] == 200
        assert gw.get("/v1/devices")[0] == 200

        held[0][0].close()
        assert wait_for(lambda: gw.get("/v1/events?types=state&device=zz")[0] == 400, 5)  # parsed, so a place was free
        sock, head = open_sse(gw)
        assert head.startswith("HTTP/1.1 200"), head
        sock.close()
    finally:
        for s, _ in held:
            s.close()
        gw.stop()
    assert not any("application error" in line for line in gw.log), gw.log
