"""Issue 14, `--mqtt-expose`: chosen GATT characteristics of the simulated heart-rate monitor
(2A37 notifies every second, 2A19 is read) as Home Assistant sensors, against a real Mosquitto
(the fixtures of test_mqtt.py) with paho-mqtt. Values are held against openapi.yaml's `Value`."""
import json
import subprocess

import pytest

from conftest import Gateway, binary
from test_mqtt import HEART_RATE, REQUIRED, Client, broker, schema  # noqa: F401 (broker: the fixture)
from test_readme_examples import EXAMPLES, render

VALUE = schema("Value")
HR_TOPIC = f"gattway/gw-a/values/{HEART_RATE}/180d/2a37"
BATTERY_TOPIC = f"gattway/gw-a/values/{HEART_RATE}/180f/2a19"
HR_CONFIG = "homeassistant/sensor/ble_f00000000001_180d_2a37/config"
BATTERY_CONFIG = "homeassistant/sensor/ble_f00000000001_180f_2a19/config"
EXPOSED = [
    {"device": HEART_RATE, "service": "180d", "characteristic": "2a37", "name": "Heart rate",
     "decode": "uint8", "offset": 1, "unit": "bpm", "stateClass": "measurement", "notify": True},
    {"device": HEART_RATE, "service": "180f", "characteristic": "2a19", "name": "Battery",
     "decode": "uint8", "unit": "%", "deviceClass": "battery", "stateClass": "measurement", "poll": 1},
]


def test_the_docs_example_is_the_file_these_tests_expose():
    # With the battery read every 5 minutes there; every second here, to see a change.
    assert json.loads(EXAMPLES["mqtt-expose"]) == [EXPOSED[0], {**EXPOSED[1], "poll": 300}]


@pytest.fixture
def exposing(broker, tmp_path):
    """A client subscribed to the values and their entities, then a gateway that exposes them."""
    path = tmp_path / "expose.json"
    path.write_text(json.dumps(EXPOSED))
    live = Client(broker, "gattway/gw-a/values/#", HR_CONFIG, BATTERY_CONFIG, "gattway/gw-a/events/connection")
    gw = Gateway(["--simulate", "--mqtt", broker.url, "--gateway-id", "gw-a", "--mqtt-expose", str(path)])
    yield live, gw
    gw.stop()
    live.close()


def values(client, topic):
    return [json.loads(m[1]) for m in client.messages if m[0] == topic]


def bpm_after(client, count):
    """The heart rates published after the first `count` messages on the topic."""
    return [v["measurement"]["value"] for v in values(client, HR_TOPIC)[count:]]


def test_exposed_characteristics_are_announced_as_home_assistant_sensors(broker, exposing):
    live, _ = exposing
    assert live.wait(lambda: live.last(HR_CONFIG) and live.last(BATTERY_CONFIG), 15)
    retained = Client(broker, HR_CONFIG, BATTERY_CONFIG)
    assert retained.wait(lambda: retained.last(HR_CONFIG) and retained.last(BATTERY_CONFIG), 5)
    retained.close()
    for topic, state_topic in ((HR_CONFIG, HR_TOPIC), (BATTERY_CONFIG, BATTERY_TOPIC)):
        _, payload, retain, _ = retained.first(topic)
        config = json.loads(payload)
        assert retain and REQUIRED <= set(config), config
        assert topic == f"homeassistant/sensor/{config['unique_id']}/config"
        assert config["state_topic"] == state_topic
        assert config["value_template"] == "{{ value_json.measurement.value }}"
        assert config["availability"] == [{"topic": "gattway/gw-a/availability"}]
        assert (config["payload_available"], config["payload_not_available"]) == ("online", "offline")
        # The BLE device's own HA device (the one its decoded sensor would have), via the gateway.
        assert config["device"]["identifiers"] == ["ble_f00000000001"]
        assert config["device"]["via_device"] == "gattway_gw-a"
        assert config["device"]["name"] == "Sim Heart Rate"
        assert config["state_class"] == "measurement"
    hr, battery = json.loads(live.last(HR_CONFIG)[1]), json.loads(live.last(BATTERY_CONFIG)[1])
    assert (hr["unique_id"], hr["unit_of_measurement"], hr.get("device_class")) == ("ble_f00000000001_180d_2a37", "bpm", None)
    assert (battery["unique_id"], battery["unit_of_measurement"], battery["device_class"]) == ("ble_f00000000001_180f_2a19", "%", "battery")
    # --mqtt-expire-after's default for the polled one; none for the notified one (it notifies when it likes).
    assert battery["expire_after"] == 600 and "expire_after" not in hr


def test_values_arrive_retained_decoded_and_change(broker, exposing):
    live, gw = exposing
    assert live.wait(lambda: len(values(live, HR_TOPIC)) >= 3 and values(live, BATTERY_TOPIC), 20)
    for topic, source in ((HR_TOPIC, "notification"), (BATTERY_TOPIC, "read")):
        for body in values(live, topic):
            VALUE.validate({k: v for k, v in body.items() if k not in ("device", "service", "gateway", "name", "measurement")})
            assert (body["device"], body["gateway"], body["format"]) == (HEART_RATE, "gw-a", "hex")
            assert body["source"] == source, body
            raw = bytes.fromhex(body["value"])
            assert body["measurement"] == {"value": raw[1] if topic == HR_TOPIC else raw[0],
                                           "unit": "bpm" if topic == HR_TOPIC else "%"}
    assert values(live, BATTERY_TOPIC)[0]["service"].startswith("0000180f")
    # Home Assistant's template (Jinja2, as it renders them) gives the number.
    assert live.wait(lambda: live.last(HR_CONFIG), 5)
    template = json.loads(live.last(HR_CONFIG)[1])["value_template"]
    body = values(live, HR_TOPIC)[-1]
    assert render(template, body) == str(bytes.fromhex(body["value"])[1])
    # A value set on the device comes through: notified at once, read at the next poll.
    gw.simulator("SetValue", "string:" + HEART_RATE, "string:2a37", "array:byte:0x06,0xb4", "boolean:true")
    gw.simulator("SetValue", "string:" + HEART_RATE, "string:2a19", "array:byte:0x2a", "boolean:false")
    assert live.wait(lambda: 180 in [v["measurement"]["value"] for v in values(live, HR_TOPIC)], 10)
    # (the simulated battery drains by 1 every 5 s from what it holds: 42, then 41, ...; it was above 80)
    assert live.wait(lambda: any(30 < v["measurement"]["value"] <= 42 for v in values(live, BATTERY_TOPIC)), 10)
    # Retained: a newcomer gets the last value of each at once.
    late = Client(broker, HR_TOPIC, BATTERY_TOPIC)
    assert late.wait(lambda: late.last(HR_TOPIC) and late.last(BATTERY_TOPIC), 5)
    assert late.first(HR_TOPIC)[2] and late.first(BATTERY_TOPIC)[2]  # the heart rate changes every second
    late.close()
    # The notified characteristic keeps the device connected, and says so.
    status, device, _ = gw.get(f"/v1/devices/{HEART_RATE}")
    assert status == 200 and device["state"] == "connected", device


def test_a_lost_link_is_reconnected_and_values_resume(exposing):
    live, gw = exposing
    assert live.wait(lambda: len(values(live, HR_TOPIC)) >= 2, 20)
    connected = lambda: any(e.get("state") == "connected" for e in live.on("gattway/gw-a/events/connection")[seen:])
    # Fault injection: the peripheral vanishes; the central reconnects it (1-5 s) and restores notifications.
    seen = len(live.on("gattway/gw-a/events/connection"))
    gw.simulator("DropLink", "string:" + HEART_RATE)
    assert live.wait(lambda: any(e.get("state") == "disconnected" for e in live.on("gattway/gw-a/events/connection")[seen:]), 10)
    count = len(values(live, HR_TOPIC))
    assert live.wait(connected, 15), live.on("gattway/gw-a/events/connection")
    assert live.wait(lambda: len(bpm_after(live, count)) >= 2, 10), gw.log[-20:]
    # A client's disconnect ends the central's reconnecting; the exposer connects it again.
    seen = len(live.on("gattway/gw-a/events/connection"))
    status, body, _ = gw.post(f"/v1/devices/{HEART_RATE}/disconnect")
    assert status == 200, body
    count = len(values(live, HR_TOPIC))
    assert live.wait(connected, 15), live.on("gattway/gw-a/events/connection")
    assert live.wait(lambda: len(bpm_after(live, count)) >= 2, 10), gw.log[-20:]
    assert any("connected for --mqtt-expose" in line for line in gw.log)


THERMOMETER = "F0:00:00:00:00:40"
THERMOMETER_TOPIC = f"gattway/gw-a/values/{THERMOMETER}/1809/2a1c"
# A Health Thermometer: 2A1C indicates a flags byte (0: °C, no time stamp) and an IEEE 11073 FLOAT.
THERMOMETER_CONFIG = {"devices": [{
    "address": THERMOMETER, "name": "Sim Thermometer", "uuids": ["1809"],
    "services": [{"uuid": "1809", "characteristics": [
        {"uuid": "2a1c", "flags": ["indicate"], "value": "006e0100ff", "notifyIntervalMs": 500}]}],  # 366 × 10^-1
}]}


def test_an_ieee_11073_temperature_is_decoded_and_nan_is_no_measurement(broker, tmp_path):
    simulated = tmp_path / "thermometer.json"
    simulated.write_text(json.dumps(THERMOMETER_CONFIG))
    exposed = tmp_path / "expose.json"
    exposed.write_text(json.dumps([{"device": THERMOMETER, "service": "1809", "characteristic": "2a1c",
                                    "name": "Body temperature", "decode": "medfloat32", "offset": 1, "unit": "°C",
                                    "deviceClass": "temperature", "notify": True}]))
    live = Client(broker, THERMOMETER_TOPIC)
    gw = Gateway(["--simulate", str(simulated), "--mqtt", broker.url, "--gateway-id", "gw-a", "--mqtt-expose", str(exposed)])
    try:
        # Indicated every half second once the hold is made.
        assert live.wait(lambda: values(live, THERMOMETER_TOPIC), 15), gw.log[-10:]
        assert values(live, THERMOMETER_TOPIC)[-1]["measurement"] == {"value": 36.6, "unit": "°C"}
        # 0x007FFFFF is the FLOAT's NaN: published without a measurement, and said why once.
        gw.simulator("SetValue", "string:" + THERMOMETER, "string:2a1c", "array:byte:0x00,0xff,0xff,0x7f,0x00", "boolean:true")
        assert live.wait(lambda: values(live, THERMOMETER_TOPIC)[-1]["value"] == "00ffff7f00", 10)
        assert "measurement" not in values(live, THERMOMETER_TOPIC)[-1]
        # -3650 × 10^-2: a negative mantissa and exponent.
        gw.simulator("SetValue", "string:" + THERMOMETER, "string:2a1c", "array:byte:0x00,0xbe,0xf1,0xff,0xfe", "boolean:true")
        assert live.wait(lambda: values(live, THERMOMETER_TOPIC)[-1].get("measurement") == {"value": -36.5, "unit": "°C"}, 10)
        assert any("is no number (NaN, infinite, or reserved)" in line for line in gw.log), gw.log[-10:]
    finally:
        gw.stop()
        live.close()


def run_refused(*args):
    out = subprocess.run([binary("gattway"), "--listen", "127.0.0.1:0", "--state-dir", "none", *args],
                         capture_output=True, text=True, timeout=30)
    return out.returncode, out.stderr


@pytest.mark.parametrize("entries, message", [
    ("not json", "it is not valid JSON"),
    ([{**EXPOSED[0], "decode": "int9"}], '[0]: decode "int9" is none of uint8'),
    ([EXPOSED[0], {**EXPOSED[1], "poll": 0}], "[1]: poll must be seconds from 1 to 86400"),
    ([{**EXPOSED[1], "deviceClass": "batery"}], '[0]: deviceClass "batery" is not one of'),
    ([EXPOSED[0], EXPOSED[0]], "[1]: the same characteristic as [0]"),
    ([{**EXPOSED[0], "decode": "sint8", "mask": 6}], "[0]: mask and shift take bits of an unsigned integer"),
    ([{**EXPOSED[0], "shift": 8}], "[0]: shift must be from 0 to 7 (the bits of uint8), not 8"),
    ([EXPOSED[0], {**EXPOSED[1], "expireAfter": 1_000_000}], "[1]: expireAfter must be seconds from 0 (none) to 604800, not 1000000"),
])
def test_a_bad_file_is_refused_at_start_with_where_and_why(tmp_path, entries, message):
    path = tmp_path / "expose.json"
    path.write_text(entries if isinstance(entries, str) else json.dumps(entries))
    code, stderr = run_refused("--simulate", "--mqtt", "mqtt://127.0.0.1:1", "--mqtt-expose", str(path))
    assert code == 2, stderr
    assert f"gattway: --mqtt-expose: {path}: " in stderr and message in stderr, stderr
    assert "listening" not in stderr and "Fatal error" not in stderr


def test_a_missing_file_or_no_broker_is_refused(tmp_path):
    code, stderr = run_refused("--simulate", "--mqtt", "mqtt://127.0.0.1:1", "--mqtt-expose", str(tmp_path / "nope.json"))
    assert code == 2 and "nope.json: cannot read it (No such file or directory)" in stderr, stderr
    path = tmp_path / "expose.json"
    path.write_text(json.dumps(EXPOSED))
    code, stderr = run_refused("--simulate", "--mqtt-expose", str(path))
    assert code == 2 and "--mqtt-expose publishes to the broker of --mqtt" in stderr, stderr
