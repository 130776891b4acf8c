"""Every message an end-to-end test receives from a live stream, held against openapi.yaml.

Taps the clients the tests use, whichever helper reads them: `http.client.HTTPResponse` (what
`urllib.request.urlopen` returns) when its Content-Type is `text/event-stream`, and the
`websockets` clients (asyncio and sync) connected to `/v1/ws`; a Playwright page can be
watched too (`watch_page`). Each complete SSE event or WebSocket message goes through
`contract.check_stream_message`; the tally counts them by type and keeps each mismatch with
the test that received it (conftest fails that test, or the session)."""
import collections
import http.client
import threading

import websockets.asyncio.client
import websockets.sync.client

import contract


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = collections.Counter()      # (family, kind) → messages that matched
        self.unknown = collections.Counter()     # "event 'x'" → messages of a type without a schema
        self.problems = collections.defaultdict(list)  # test id → what did not match
        self.test = None                         # the test running now (conftest sets it)
        self.late = {}                           # test id → mismatches found after it ended

    def received(self, message, transport, test, sse_fields=None):
        try:
            kind = contract.check_stream_message(message, transport, sse_fields)
        except contract.NoSchema as e:
            with self.lock:
                self.unknown[e.kind] += 1
                self.problems[test].append(str(e))
        except contract.ContractBroken as e:
            with self.lock:
                self.problems[test].append(str(e))
        else:
            with self.lock:
                self.counts[kind] += 1

    def take(self, test):
        """The mismatches received by `test`, forgotten here."""
        with self.lock:
            return self.problems.pop(test, [])

    def summary(self):
        with self.lock:
            def listed(family):
                return ", ".join(f"{k} {n}" for (f, k), n in self.counts.most_common() if f == family) or "none"
            seen = {k for f, k in self.counts if f == "event"}
            return [f"events validated: {listed('event')}",
                    f"WebSocket replies validated: {listed('reply')}",
                    f"types seen without a schema: {', '.join(f'{k} ({n})' for k, n in self.unknown.items()) or 'none'}",
                    f"event types with a schema that no test received: "
                    f"{', '.join(sorted(set(contract.EVENT_SCHEMAS) - seen)) or 'none'}"]


TALLY = Tally()


class SSEReader:
    """Parses the bytes a test read from an SSE response, line by line, as EventSource does."""

    def __init__(self, test):
        self.test, self.buffer, self.fields, self.data = test, b"", {}, []

    def feed(self, chunk):
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        for raw in lines:
            line = raw.decode(errors="replace").removesuffix("\r")
            if line == "":
                if self.data:
                    TALLY.received("\n".join(self.data), "sse", self.test, self.fields)
                self.fields, self.data = {}, []
            elif not line.startswith(":"):
                key, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if key == "data":
                    self.data.append(value)
                else:
                    self.fields[key] = value


def _tap_http_read(method):
    """Wraps a read method of HTTPResponse: what an SSE response's outermost read returns is
    fed to its reader (readline may call read: counted once)."""
    def tapped(self, *args, **kwargs):
        reader = self.__dict__.get("_stream_tap")
        if reader is None:
            sse = (self.headers or {}).get("Content-Type", "").split(";")[0] == "text/event-stream"
            reader = self.__dict__["_stream_tap"] = SSEReader(TALLY.test) if sse else False
        if not reader or self.__dict__.get("_stream_tap_depth"):
            return method(self, *args, **kwargs)
        self.__dict__["_stream_tap_depth"] = True
        try:
            data = method(self, *args, **kwargs)
        finally:
            self.__dict__["_stream_tap_depth"] = False
        reader.feed(bytes(data))
        return data
    return tapped


def _events_socket(connection):
    return connection.request is not None and connection.request.path.split("?")[0] == "/v1/ws"


def _test_of(connection):
    """The test that opened the socket (its first receive), even if a thread reads it later."""
    if not hasattr(connection, "_stream_tap_test"):
        connection._stream_tap_test = TALLY.test
    return connection._stream_tap_test


def _tap_ws_async(recv):
    async def tapped(self, *args, **kwargs):
        message = await recv(self, *args, **kwargs)
        if _events_socket(self):
            TALLY.received(message, "ws", _test_of(self))
        return message
    return tapped


def _tap_ws_sync(recv):
    def tapped(self, *args, **kwargs):
        message = recv(self, *args, **kwargs)
        if _events_socket(self):
            TALLY.received(message, "ws", _test_of(self))
        return message
    return tapped


def install():
    for name in ("read", "read1", "readline"):
        setattr(http.client.HTTPResponse, name, _tap_http_read(getattr(http.client.HTTPResponse, name)))
    websockets.asyncio.client.ClientConnection.recv = _tap_ws_async(websockets.asyncio.client.ClientConnection.recv)
    websockets.sync.client.ClientConnection.recv = _tap_ws_sync(websockets.sync.client.ClientConnection.recv)


def watch_page(page):
    """Checks what a Playwright page receives on its `/v1/ws` sockets."""
    test = TALLY.test

    def opened(socket):
        if socket.url.split("?")[0].endswith("/v1/ws"):
            socket.on("framereceived", lambda payload: TALLY.received(payload, "ws", test))
    page.on("websocket", opened)
