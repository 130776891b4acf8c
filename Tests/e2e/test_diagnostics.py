"""Issue 11: diagnostics. GET /v1/errors keeps the recent errors (time, device, operation,
CBError, BlueZ's detail); GET /metrics is Prometheus text with connections, reconnect attempts,
holds, stream clients, events, D-Bus calls and errors, and request latency."""
import re
import urllib.request

from conftest import wait_for

HR = "F0:00:00:00:00:01"
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})? (-?[0-9.eE+]+|NaN|\+Inf)$')


def metrics(gw):
    with urllib.request.urlopen(gw.base + "/metrics", timeout=5) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = resp.read().decode()
    samples, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            assert name not in types, f"{name} typed twice"
            types[name] = kind
        elif line and not line.startswith("#"):
            m = SAMPLE.match(line)
            assert m, f"not a Prometheus sample: {line!r}"
            samples[(m.group(1), m.group(3) or "")] = float(m.group(4))
    return samples, types


def test_errors_are_kept_with_their_device_and_code(gateway):
    gateway.discover(HR)
    assert gateway.post(f"/v1/devices/{HR}/connect", {"timeout": 10})[0] == 200
    status, body, _ = gateway.get(f"/v1/devices/{HR}/characteristics/2a37/value")  # notify only
    assert status == 403, body
    gateway.simulator("DropLink", "string:" + HR)
    assert wait_for(lambda: any(e["operation"] == "link" for e in gateway.get("/v1/errors")[1]["errors"]), 5)
    errors = gateway.get("/v1/errors")[1]
    read = next(e for e in errors["errors"] if e["operation"].startswith("GET /v1/devices/"))
    assert read["device"] == HR and read["error"]["name"] == "readNotPermitted" and read["error"]["domain"] == "CBATTErrorDomain"
    link = next(e for e in errors["errors"] if e["operation"] == "link")
    assert link["error"]["name"] == "peripheralDisconnected" and link["device"] == HR
    assert errors["errors"][0]["time"] >= errors["errors"][-1]["time"], "newest first"
    assert errors["total"] >= 2


def test_metrics_are_prometheus_text_with_the_figures(gateway):
    gateway.discover(HR)
    assert gateway.post(f"/v1/devices/{HR}/connect", {"timeout": 10, "autoReconnect": True})[0] == 200
    assert gateway.post(f"/v1/devices/{HR}/characteristics/2a37/notifications")[0] == 200
    with urllib.request.urlopen(gateway.base + f"/v1/events?types=notification&device={HR}", timeout=10) as stream:
        assert stream.readline()  # the stream is open
        assert wait_for(lambda: metrics(gateway)[0].get(("gattway_events_total", 'what="delivered"'), 0) >= 1, 5)
        samples, types = metrics(gateway)
        assert samples[("gattway_stream_clients", "")] == 1
    assert samples[("gattway_devices", 'state="connected"')] == 1
    assert samples[("gattway_devices_kept", "")] == 1
    assert samples[("gattway_notification_holds", 'of="characteristics"')] == 1
    assert samples[("gattway_dbus_calls_total", 'member="Connect"')] >= 1
    assert samples[("gattway_dbus_calls_total", 'member="StartNotify"')] >= 1
    assert types["gattway_http_request_duration_seconds"] == "histogram"
    assert samples[("gattway_http_request_duration_seconds_bucket", 'le="+Inf"')] == samples[("gattway_http_request_duration_seconds_count", "")]
    assert samples[("gattway_http_requests_total", 'method="POST",status="200"')] >= 3
    assert samples[("gattway_resident_memory_bytes", "")] > 1_000_000
    # A link loss is counted: an attempt announced, an error by name.
    gateway.simulator("DropLink", "string:" + HR)
    assert wait_for(lambda: metrics(gateway)[0].get(("gattway_reconnect_attempts_total", ""), 0) >= 1, 5)
    samples, _ = metrics(gateway)
    assert samples[("gattway_errors_total", 'domain="CBErrorDomain",name="peripheralDisconnected"')] >= 1
