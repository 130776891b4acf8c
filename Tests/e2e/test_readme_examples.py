"""The documentation's examples, as written, against `gattway --simulate`: each block after a
`<!-- checked by Tests/e2e/test_readme_examples.py: NAME -->` line is read from README.md or
docs/*.md and run (the shell line, the Python), or followed as its consumer would (Home
Assistant's templates rendered with Jinja2, as Home Assistant renders them; Node-RED's http
request and change nodes), with only the address changed to the test's gateway. Each example
must be where EXPECTED says, once: one that moves, goes or is marked twice fails the first test."""
import glob
import json
import os
import re
import subprocess
import urllib.parse

import jinja2
import pytest
import yaml

from conftest import ROOT, Gateway, wait_for

MARKER = "<!-- checked by Tests/e2e/test_readme_examples.py: "
MARK = re.compile(re.escape(MARKER) + r"(\S+) -->\n```\w*\n(.*?)```", re.S)
# Where each example lives. mqtt-expose: test_mqtt_expose.py runs it (it needs a broker).
EXPECTED = {
    "home-assistant-gatt": "docs/polling.md",
    "home-assistant-sensor": "docs/sensors.md",
    "curl": "docs/sensors.md",
    "node-red": "docs/sensors.md",
    "mqtt-expose": "docs/mqtt.md",
    "pyserial": "docs/serial-ports.md",
    "peripheral": "README.md",
}


def marked():
    """(name, page, block) of every marked example in README.md and docs/, and the number of
    lines that start with the marker (one not followed by a code block is counted, not found)."""
    found, markers = [], 0
    for path in [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)):
        text = open(path, encoding="utf-8").read()
        markers += len(re.findall("^" + re.escape(MARKER), text, re.M))
        found += [(name, os.path.relpath(path, ROOT), block) for name, block in MARK.findall(text)]
    return found, markers


FOUND, MARKERS = marked()
EXAMPLES = {name: block for name, _, block in FOUND}
SENSOR = "F0:00:00:00:00:06"
EXAMPLE_BASE = "http://127.0.0.1:8080"


def test_the_docs_mark_every_example_this_file_checks_once_where_expected():
    assert len(FOUND) == MARKERS, f"{MARKERS} markers, {len(FOUND)} followed by a code block"
    where = sorted((name, page) for name, page, _ in FOUND)
    assert where == sorted(EXPECTED.items()), where


@pytest.fixture(scope="module")
def gw():
    gateway = Gateway(["--simulate"])
    assert wait_for(lambda: gateway.get(f"/v1/sensors/{SENSOR}")[0] == 200, 3), "the watch did not hear the sensor"
    yield gateway
    gateway.stop()


def fetch(gw, url):
    """GET `url` (the example's address) from the test's gateway, as the consumer would."""
    assert url.startswith(EXAMPLE_BASE), url
    status, body, _ = gw.get(url[len(EXAMPLE_BASE):])
    assert status == 200, (url, body)
    return body


def render(template, value_json):
    """Renders a Home Assistant value_template (Jinja2; `int(default, base)` is Jinja2's own)."""
    return jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(template).render(value_json=value_json)


def measurement(template):
    """The measurement a template reads (`value_json.reading.measurements.NAME.value`), if any."""
    m = re.search(r"value_json\.reading\.measurements\.(\w+)\.value", template)
    return m and m.group(1)


def test_home_assistant_rest_integration_gets_numbers_with_the_units_it_declares(gw):
    config = yaml.safe_load(EXAMPLES["home-assistant-sensor"])
    [rest] = config["rest"]
    body = fetch(gw, rest["resource"])
    for entity in rest["sensor"]:
        state = float(render(entity["value_template"], body))
        name = measurement(entity["value_template"])
        assert name, entity
        assert body["reading"]["measurements"][name]["unit"] == entity["unit_of_measurement"], (entity, body)
        assert state == body["reading"]["measurements"][name]["value"]
    for entity in rest["binary_sensor"]:
        assert render(entity["value_template"], body).lower() == "false", (entity, body)  # heard just now


def test_home_assistant_rest_sensor_reads_the_battery_over_gatt(gw):
    config = yaml.safe_load(EXAMPLES["home-assistant-gatt"])
    [entity] = config["sensor"]
    assert entity["platform"] == "rest"
    body = fetch(gw, entity["resource"])
    assert 0 <= int(render(entity["value_template"], body)) <= 100, body
    assert body["source"] in ("read", "cache") and set(entity["json_attributes"]) <= set(body), body


def run_shell(gw, text):
    host = urllib.parse.urlparse(gw.base).netloc
    return subprocess.run(["bash", "-c", text.replace("localhost:8080", host)], capture_output=True, text=True, timeout=20)


def test_the_cron_line_prints_the_temperature_and_fails_once_the_sensor_is_unheard():
    gw = Gateway(["--simulate", "--stale-after", "1"])
    try:
        assert wait_for(lambda: gw.get(f"/v1/sensors/{SENSOR}")[0] == 200, 3)
        out = run_shell(gw, EXAMPLES["curl"])
        assert out.returncode == 0, out.stderr
        assert -40 <= float(out.stdout) <= 60, out.stdout  # the simulator's values drift: a range
        gw.simulator("SetPowered", "boolean:false")
        assert wait_for(lambda: gw.get(f"/v1/sensors/{SENSOR}")[1].get("stale"), 5)
        out = run_shell(gw, EXAMPLES["curl"])
        assert out.returncode != 0 and out.stdout.strip() == "", (out.returncode, out.stdout)
    finally:
        gw.stop()


def test_node_red_flow_requests_the_sensor_and_keeps_a_number(gw):
    flow = {node["id"]: node for node in json.loads(EXAMPLES["node-red"])}
    inject = next(n for n in flow.values() if n["type"] == "inject")
    [[first]] = inject["wires"]
    request = flow[first]
    assert request["type"] == "http request" and request["method"] == "GET" and request["ret"] == "obj"
    msg = {"payload": fetch(gw, request["url"])}
    [[then]] = request["wires"]
    change = flow[then]
    assert change["type"] == "change"
    for rule in change["rules"]:
        assert rule["t"] == "set" and rule["pt"] == "msg" and rule["tot"] == "msg", rule
        value = msg
        for part in rule["to"].split("."):
            value = value[part]
        msg[rule["p"]] = value
    assert isinstance(msg["payload"], (int, float)) and -40 <= msg["payload"] <= 60, msg


def test_the_peripheral_example_serves_a_value_and_advertises(gw):
    out = run_shell(gw, EXAMPLES["peripheral"])
    assert out.returncode == 0, out.stderr
    answers = [json.loads(line) for line in out.stdout.splitlines()]
    assert [a.get("registered") for a in answers[:2]] == [True, True], answers
    assert answers[2]["value"] == "21.5" and answers[2]["sent"] is False, answers
    served = gw.get("/v1/peripheral?format=utf8")[1]
    assert served["services"][0]["characteristics"][0]["value"] == "21.5", served
    assert served["advertisements"][0]["localName"] == "gattway-demo", served


def test_pyserial():
    """The serial port example, with the port gattway picked for `--serial 127.0.0.1:0=…`."""
    import sys
    gateway = Gateway(["--simulate", "--serial", "127.0.0.1:0=F0:00:00:00:00:02"])
    try:
        gateway.discover("F0:00:00:00:00:02")
        port = gateway.get("/v1/serial-ports")[1]["ports"][0]["port"]
        code = EXAMPLES["pyserial"].replace("127.0.0.1:7000", f"127.0.0.1:{port}")
        assert code != EXAMPLES["pyserial"]
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "b'AT\\r\\n'"
    finally:
        gateway.stop()
