"""openapi.yaml as the contract: every answer an end-to-end test gets is held against it with
openapi-core (the status documented for the operation, the Content-Type declared, the body
valid against the schema, the declared headers well-formed), and every message of a live
stream against the schema of its `type` or `op` (`check_stream_message`, fed by streamtap)."""
import json
import os
import urllib.parse

import jsonschema
import jsonschema_rs
import yaml
from openapi_core import OpenAPI
from openapi_core.templating.paths.exceptions import OperationNotFound, PathNotFound
from openapi_core.testing import MockRequest, MockResponse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
with open(os.path.join(ROOT, "openapi.yaml")) as f:
    DOCUMENT = yaml.safe_load(f)
SPEC = OpenAPI.from_dict(DOCUMENT)
# Operations are found by path under the spec's server URL; the port a test's gateway listens
# on does not matter to that.
SERVER = DOCUMENT["servers"][0]["url"]
# What the transport answers for a path or a method no operation has (the table in the API
# description), in the Error shape.
TRANSPORT = {404: "NoRoute", 405: "MethodNotAllowed"}
ERROR = jsonschema.Draft202012Validator({"$ref": "#/components/schemas/Error", **DOCUMENT})


class ContractBroken(AssertionError):
    pass


def check(method, path, status, headers, payload):
    """Raises ContractBroken unless openapi.yaml allows this answer to `method path`."""
    url = urllib.parse.urlsplit(path)
    content_type = headers.get("Content-Type", "")
    request = MockRequest(SERVER, method.lower(), url.path,
                          args=dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True)))
    response = MockResponse(payload, status_code=status, content_type=content_type.split(";")[0], headers=headers)
    if method == "OPTIONS":
        return options(path, status, headers, content_type, payload)
    try:
        SPEC.validate_response(request, response)
        return
    except (PathNotFound, OperationNotFound) as e:
        if status in TRANSPORT:
            return transport_error(method, path, status, content_type, payload)
        problem = e
    except Exception as e:  # openapi-core has an exception class for each kind of mismatch
        problem = e
    causes = getattr(problem.__cause__, "schema_errors", None) or []
    raise ContractBroken(
        f"{method} {path} was answered {status} ({content_type or 'no Content-Type'}), which openapi.yaml "
        f"does not allow: {type(problem).__name__}: {problem}" + "".join(f"\n  - {c.message}" for c in causes)
        + f"\nbody: {payload[:2000]!r}")


def options(path, status, headers, content_type, payload):
    """OPTIONS, which the API description documents for every path: 204 with `Allow`, or an error."""
    if status == 204:
        if payload or "Allow" not in headers:
            raise ContractBroken(f"OPTIONS {path} was answered 204 with a body or without Allow: {headers}")
        return
    if status not in (403, 404, 429):
        raise ContractBroken(f"OPTIONS {path} was answered {status}, which the API description does not allow")
    return transport_error("OPTIONS", path, status, content_type, payload)


def transport_error(method, path, status, content_type, payload):
    problems = [] if content_type == "application/json" else [f"Content-Type {content_type!r}"]
    try:
        problems += [e.message for e in ERROR.iter_errors(json.loads(payload))]
    except ValueError as e:
        problems.append(f"not JSON: {e}")
    if problems:
        raise ContractBroken(f"{method} {path} was answered {status} ({TRANSPORT.get(status, 'an error')}), not in the Error shape: "
                             + "; ".join(problems) + f"\nbody: {payload[:2000]!r}")


# ---- stream events ----
# Each message of `GET /v1/events` and `GET /v1/ws` is held against the schema its `type` (an
# event) or `op` (a WebSocket reply) names in the discriminator of `Event` or `WebSocketReply`.
# jsonschema_rs: the same JSON Schema 2020-12 as jsonschema, ~6 µs an event instead of ~2 ms
# (a test that reads thousands of events must not become a slow reader); formats checked too.
SCHEMAS = DOCUMENT["components"]["schemas"]


def _by_name(union):
    return {key: ref.rsplit("/", 1)[1] for key, ref in SCHEMAS[union]["discriminator"]["mapping"].items()}


EVENT_SCHEMAS = _by_name("Event")          # type → schema name
REPLY_SCHEMAS = _by_name("WebSocketReply")  # op → schema name


def validator(name, fast=True):
    schema = {"$ref": f"#/components/schemas/{name}", **DOCUMENT}
    if fast:
        return jsonschema_rs.Draft202012Validator(schema, validate_formats=True)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


_VALIDATORS = {name: validator(name) for name in {*EVENT_SCHEMAS.values(), *REPLY_SCHEMAS.values()}}


class NoSchema(ContractBroken):
    """A message whose `type` or `op` openapi.yaml has no schema for."""

    def __init__(self, kind, text):
        super().__init__(text)
        self.kind = kind


def check_stream_message(message, transport, sse_fields=None):
    """Raises ContractBroken unless openapi.yaml allows `message` (the text of one SSE `data` or
    one WebSocket message) on `transport` ("sse" or "ws"); returns what it was, ("event",
    type) or ("reply", op). `sse_fields`: the SSE event's other fields (`id`, `event`)."""
    try:
        body = json.loads(message)
    except ValueError as e:
        raise ContractBroken(f"{transport} message is not JSON ({e}): {message[:500]!r}")
    if not isinstance(body, dict):
        raise ContractBroken(f"{transport} message is not a JSON object: {message[:500]!r}")
    if "type" in body or transport == "sse":
        family, kind, schemas = "event", body.get("type"), EVENT_SCHEMAS
    elif "op" in body:
        family, kind, schemas = "reply", body.get("op"), REPLY_SCHEMAS
    else:
        raise ContractBroken(f"ws message with neither `type` nor `op`: {message[:500]!r}")
    if kind not in schemas:
        raise NoSchema(f"{family} {kind!r}", f"{transport} {family} of {'type' if family == 'event' else 'op'} {kind!r}, "
                       f"which openapi.yaml has no schema for: {message[:500]!r}")
    problems = [f"{e.message} (at {'/'.join(map(str, e.instance_path)) or 'the top'})"
                for e in _VALIDATORS[schemas[kind]].iter_errors(body)]
    # What the schemas cannot say, as the API description says it.
    if family == "event":
        if transport == "sse" and "subscription" in body:
            problems.append("`subscription` on SSE")
        if transport == "ws" and kind != "dropped" and "subscription" not in body:
            problems.append("no `subscription` on a WebSocket event")
    if sse_fields is not None:
        if sse_fields.get("event") != kind:
            problems.append(f"SSE `event: {sse_fields.get('event')}` but `type` {kind!r}")
        expected_id = None if kind == "dropped" else str(body.get("seq"))
        if sse_fields.get("id") != expected_id:
            problems.append(f"SSE `id: {sse_fields.get('id')}`, expected {expected_id or 'none'}")
    if problems:
        raise ContractBroken(f"{transport} {family} {kind!r} does not match {schemas[kind]} in openapi.yaml: "
                             + "; ".join(problems) + f"\n  {message[:2000]}")
    return family, kind
