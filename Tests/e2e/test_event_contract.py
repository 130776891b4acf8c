"""The check of stream messages against openapi.yaml (contract.check_stream_message, streamtap)
can fail: bad events are refused, every event type the code has has a schema, and the taps see
what the ordinary clients read, good and bad."""
import json
import os
import re
import threading
import urllib.request

import jsonschema
import pytest
from websockets.sync.client import connect as ws_connect
from websockets.sync.server import serve as ws_serve

import contract
import streamtap
from conftest import ROOT

NOTIFICATION = {"type": "notification", "seq": 12, "time": "2027-01-15T08:00:05.000Z", "device": "F0:00:00:00:00:01",
                "service": {"handle": "0x001c", "uuid": "0000180f-0000-1000-8000-00805f9b34fb"},
                "characteristic": {"handle": "0x001d", "uuid": "00002a19-0000-1000-8000-00805f9b34fb"},
                "value": "64", "format": "hex", "sequence": 1}
RECONNECTING = {"type": "connection", "seq": 96, "time": "2027-01-15T08:01:10.251Z", "device": "F0:00:00:00:00:01",
                "state": "reconnecting", "attempt": 1, "retryIn": 2.7}
ERROR = {"domain": "CBErrorDomain", "code": 7, "name": "peripheralDisconnected", "message": "F0:00:00:00:00:01 disconnected"}


def without(body, key):
    return {k: v for k, v in body.items() if k != key}


def test_every_event_type_of_the_code_and_every_reply_has_a_schema():
    source = open(os.path.join(ROOT, "Sources/GatewayCore/EventHub.swift")).read()
    # Every `case` line of the enum (the cases end at its first blank line).
    cases = re.search(r"enum EventType\b[^{]*\{(.*?)\n\s*\n", source, re.S)[1]
    types = {name.strip() for line in re.findall(r"^\s*case ([^\n]+)", cases, re.M) for name in line.split(",")}
    assert set(contract.EVENT_SCHEMAS) == types | {"dropped"}, contract.EVENT_SCHEMAS
    assert set(contract.SCHEMAS["EventType"]["enum"]) == types
    source = open(os.path.join(ROOT, "Sources/GatewayCore/CommandSession.swift")).read()
    ops = set(re.findall(r'Reply\(op: "(\w+)"', source))
    assert ops and set(contract.REPLY_SCHEMAS) == ops, ops


@pytest.mark.parametrize("name", sorted({*contract.EVENT_SCHEMAS.values(), *contract.REPLY_SCHEMAS.values()}))
def test_the_examples_of_each_message_schema_match_it(name):
    examples = contract.SCHEMAS[name].get("examples", [])
    assert examples, f"{name} has no example"
    fast, reference = contract.validator(name), contract.validator(name, fast=False)
    for example in examples:
        assert fast.is_valid(example) and reference.is_valid(example), \
            [e.message for e in reference.iter_errors(example)] or [e.message for e in fast.iter_errors(example)]


# Each a message gattway must never send: each is refused, by jsonschema_rs as by jsonschema.
BAD = {
    "a number as text": dict(NOTIFICATION, sequence="1"),
    "a required field missing": without(NOTIFICATION, "value"),
    "a field the schema does not list": dict(NOTIFICATION, valu="64"),
    "a hex value that is not hex": dict(NOTIFICATION, value="zz"),
    "a time that is no date-time": dict(NOTIFICATION, time="yesterday"),
    "a misspelt field in a nested object": dict(NOTIFICATION, service={"handle": "0x001c", "uid": "180f"}),
    "reconnecting without its attempt": without(RECONNECTING, "attempt"),
    "an attempt on connected": dict(RECONNECTING, state="connected"),
    "an error on connected": {**without(without(RECONNECTING, "attempt"), "retryIn"), "state": "connected", "error": ERROR},
    "an error with a field too many": dict(RECONNECTING, error=dict(ERROR, hint="none")),
    "dropped with a seq": {"type": "dropped", "count": 3, "seq": 4},
    "a failed pairing without its error": {"type": "pairing", "seq": 5, "time": "2027-01-15T08:00:05.000Z",
                                           "device": "F0:00:00:00:00:0E", "state": "failed"},
    "a state event with a device": {"type": "state", "seq": 1, "time": "2027-01-15T08:00:05.000Z", "state": "poweredOn",
                                    "code": 5, "device": "F0:00:00:00:00:01"},
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_message_that_does_not_match_its_schema_is_refused(case):
    body = BAD[case]
    framing = {"event": body["type"]} | ({"id": str(body["seq"])} if body["type"] != "dropped" else {})
    with pytest.raises(contract.ContractBroken, match="does not match"):
        contract.check_stream_message(json.dumps(body), "sse", framing)
    reference = contract.validator(contract.EVENT_SCHEMAS[body["type"]], fast=False)
    assert not reference.is_valid(body), "jsonschema would have let it through"


@pytest.mark.parametrize("case, message, transport, fields", [
    ("an event type without a schema", {**NOTIFICATION, "type": "telepathy"}, "sse", {"id": "12", "event": "telepathy"}),
    ("a reply op without a schema", {"op": "maybe", "id": "1"}, "ws", None),
    ("SSE event: other than type", NOTIFICATION, "sse", {"id": "12", "event": "state"}),
    ("SSE id: other than seq", NOTIFICATION, "sse", {"id": "11", "event": "notification"}),
    ("subscription on SSE", dict(NOTIFICATION, subscription="s1"), "sse", {"id": "12", "event": "notification"}),
    ("no subscription on a WebSocket event", NOTIFICATION, "ws", None),
    ("not JSON", "{type: notification}", "ws", None),
    ("neither type nor op", {"id": "1"}, "ws", None),
])
def test_what_the_schemas_cannot_say_is_checked_too(case, message, transport, fields):
    text = message if isinstance(message, str) else json.dumps(message)
    with pytest.raises(contract.ContractBroken):
        contract.check_stream_message(text, transport, fields)


def test_good_messages_pass_and_are_named_by_type_or_op():
    assert contract.check_stream_message(json.dumps(NOTIFICATION), "sse", {"id": "12", "event": "notification"}) \
        == ("event", "notification")
    assert contract.check_stream_message(json.dumps(dict(RECONNECTING, subscription="s2", error=ERROR)), "ws") \
        == ("event", "connection")
    assert contract.check_stream_message('{"type":"dropped","count":2}', "sse", {"event": "dropped"}) == ("event", "dropped")
    assert contract.check_stream_message('{"op":"ack","id":"1","subscription":"s1"}', "ws") == ("reply", "ack")


def counts():
    return dict(streamtap.TALLY.counts)


def test_the_taps_count_what_the_ordinary_clients_read_from_gattway(gateway):
    before = counts()
    with urllib.request.urlopen(gateway.base + "/v1/events?types=advertisement", timeout=10) as sse, \
            ws_connect(gateway.base.replace("http://", "ws://") + "/v1/ws", open_timeout=10) as ws:
        ws.send(json.dumps({"op": "subscribe", "id": "1", "types": ["advertisement"]}))
        assert json.loads(ws.recv(timeout=10))["op"] == "ack"
        assert gateway.post("/v1/scan", {})[0] == 200
        assert json.loads(ws.recv(timeout=10))["type"] == "advertisement"
        while not sse.readline().startswith(b"data:"):
            pass
        assert sse.readline() == b"\n"  # the event is complete only at its empty line
    after = counts()
    assert after.get(("reply", "ack"), 0) == before.get(("reply", "ack"), 0) + 1
    assert after.get(("event", "advertisement"), 0) >= before.get(("event", "advertisement"), 0) + 2
    assert not streamtap.TALLY.problems.get(streamtap.TALLY.test)


BAD_SSE = b'id: 3\nevent: state\ndata: {"type":"state","seq":3,"time":"now","state":"poweredOn","code":5}\n\n'
BAD_WS = '{"type":"state","seq":3,"time":"2027-01-15T08:00:05.000Z","state":"on","code":5,"subscription":"s1"}'


def test_the_taps_keep_a_bad_message_with_the_test_that_read_it():
    """A stand-in server sends one bad event on each transport; the ordinary clients read it,
    and the tally holds both against this test (taken here, so that it does not fail)."""
    import http.server

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(b"retry: 2000\n: connected\n\n" + BAD_SSE)

        def log_message(self, *args):
            pass

    http_server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=http_server.serve_forever, daemon=True).start()
    with ws_serve(lambda socket: socket.send(BAD_WS), "127.0.0.1", 0) as ws_server:
        threading.Thread(target=ws_server.serve_forever, daemon=True).start()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_server.server_address[1]}/v1/events", timeout=10) as sse:
                sse.read()
            with ws_connect(f"ws://127.0.0.1:{ws_server.socket.getsockname()[1]}/v1/ws", open_timeout=10) as ws:
                ws.recv(timeout=10)
        finally:
            ws_server.shutdown()
            http_server.shutdown()
    problems = streamtap.TALLY.take(streamtap.TALLY.test)
    assert len(problems) == 2, problems
    assert "sse event 'state'" in problems[0] and '"now" is not a "date-time"' in problems[0], problems[0]
    assert "ws event 'state'" in problems[1] and '"on" is not one of' in problems[1], problems[1]
