"""A check of our own beside schemathesis' `--checks all`: `positive_data_acceptance` is told
that 400 is an expected answer to a schema-valid request (schemathesis.toml), and this check
takes the place of that leniency — a 400 to a schema-valid request passes only when its reason
is one no schema can know beforehand."""
import json
import os

import jsonschema
import schemathesis
import yaml

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "openapi.yaml")) as f:
    DOCUMENT = yaml.safe_load(f)


def body_is_valid(case):
    """Whether the request body is valid after all: schemathesis' examples phase puts property
    examples together without checking them against the whole schema (a `mask` from one example
    beside no `dataPrefix`), and such a body is no positive case."""
    operation = DOCUMENT["paths"][case.operation.path][case.method.lower()]
    body = operation.get("requestBody")
    if body is None or case.body is None or not isinstance(case.body, (dict, list)):
        return True
    if "$ref" in body:
        body = DOCUMENT["components"]["requestBodies"][body["$ref"].rsplit("/", 1)[1]]
    schema = body["content"]["application/json"]["schema"]
    return jsonschema.Draft202012Validator({**schema, **{k: v for k, v in DOCUMENT.items() if k == "components"}}).is_valid(case.body)


def answered_for_state(error):
    """Whether a 400 says something about the device rather than about the request's form."""
    if error.get("detail"):
        return True  # BlueZ or the device refused (InvalidArguments, an ATT code): their call
    if error.get("domain") == "CBATTErrorDomain" and error.get("name") in ("invalidOffset", "invalidAttributeValueLength"):
        # An offset past the end of the value; a value longer than the link's MTU allows in one
        # write without fragmenting, or than 512 bytes (a length in bytes, which `utf8` text
        # and separated hex spell in any number of characters).
        return True
    message = error.get("message", "")
    # The device's pairing decides: no question of it waits for the answer given, or its GATT
    # cache goes only with its bond.
    if message.startswith("no pairing request of ") or " is paired: BlueZ drops its GATT cache only with its bond" in message:
        return True
    # A TCP port that cannot listen (taken, or an address this host does not have), or that
    # another serial port has: the host decides.
    if message.startswith("cannot listen on ") or message.endswith(" serves a device already"):
        return True
    # An adapter named that this host does not have, or has off: the host decides.
    if message.startswith("adapter ") and " is not one gattway can use now " in message:
        return True
    # The peripheral role: what it serves already decides (a service or characteristic twice),
    # and so does a UUID given twice in one definition in two spellings (0x2a00, 2a00, the
    # 128-bit form), which no `uniqueItems` sees;
    # lengths in bytes, which UTF-8 text and hex spell in any number of characters; a minimum
    # interval above the maximum, a relation JSON Schema cannot state.
    if " is served already" in message or " is already a characteristic of this service" in message \
            or message.endswith(" is there twice") or " bytes; an attribute holds at most 512" in message \
            or message.startswith("localName: 1 to 29 bytes") or message.startswith("minInterval and maxInterval: "):
        return True
    # A UUID that several attributes of the device share: the device's GATT database decides.
    return error.get("name") == "invalidParameters" and " is ambiguous: " in message


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    """POST /v1/serial-ports really listens: on a port the kernel picks, never on one another
    suite of the same CI run may be about to listen on (a broker's 1883)."""
    if case.operation.path == "/v1/serial-ports" and case.method.upper() == "POST" and isinstance(case.body, dict) \
            and isinstance(case.body.get("port"), int) and not isinstance(case.body.get("port"), bool):
        case.body["port"] = 0


@schemathesis.check
def schema_valid_requests_are_refused_only_for_state(ctx, response, case):
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or response.status_code != 400 or not body_is_valid(case):
        return None
    try:
        error = json.loads(response.content)["error"]
    except (ValueError, KeyError, TypeError):
        error = {}
    if not answered_for_state(error):
        raise AssertionError(
            f"a schema-valid request was answered 400 for a reason the schema could have said: {error.get('message')!r}")
    return None
