"""openapi.yaml as the contract: every answer an end-to-end test gets is held against it with
openapi-core (the status documented for the operation, the Content-Type declared, the body
valid against the schema, the declared headers well-formed)."""
import json
import os
import urllib.parse

import jsonschema
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
