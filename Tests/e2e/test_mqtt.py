"""Issue 14: the MQTT bridge, against a real Mosquitto started here on a free loopback port, with
two `gattway --simulate --mqtt` gateways (each has the built-in sensors F0:00:00:00:00:06-0B) and
paho-mqtt as the client. Payloads are held against openapi.yaml's schemas."""
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import uuid

import jsonschema
import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

import contract
from conftest import Gateway, binary, wait_for
from mqttbroker import Broker, Client, start_gateway
from test_streams import sse_events

BTHOME = "F0:00:00:00:00:06"
SENSORS = [f"F0:00:00:00:00:{n:02X}" for n in range(6, 12)]
SERIAL = "F0:00:00:00:00:02"
HEART_RATE = "F0:00:00:00:00:01"


def schema(name):
    return jsonschema.Draft202012Validator({"$ref": f"#/components/schemas/{name}", **contract.DOCUMENT})


SENSOR, DEVICE, STATE, ERROR, EVENT = (schema(n) for n in ("Sensor", "Device", "ManagerState", "Error", "Event"))


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path)
    yield b
    b.stop()


@pytest.fixture
def two(broker):
    gateways = [start_gateway(broker.url, "gw-a"), start_gateway(broker.url, "gw-b")]
    yield gateways
    for gw in gateways:
        gw.stop()


@pytest.fixture
def one(broker):
    gw = start_gateway(broker.url, "gw-a")
    yield gw
    gw.stop()


def command(broker, gateway_id, body, timeout=20):
    """Sends a command with an MQTT 5 response topic and correlation data; the answer and its properties."""
    reply_topic = "replies/" + uuid.uuid4().hex[:8]
    client = Client(broker, reply_topic)
    try:
        properties = Properties(PacketTypes.PUBLISH)
        properties.ResponseTopic = reply_topic
        properties.CorrelationData = b"corr-" + body.get("id", "").encode()
        client.publish(f"gattway/{gateway_id}/command", json.dumps(body), properties)
        assert client.wait(lambda: client.last(reply_topic), timeout), f"no answer to {body}"
        _, payload, _, props = client.last(reply_topic)
        return json.loads(payload), props
    finally:
        client.close()


def test_availability_is_retained_and_the_last_will_says_offline_after_kill_9(broker, two):
    watcher = Client(broker, "gattway/+/availability")
    assert watcher.wait(lambda: all(watcher.last(f"gattway/{g}/availability") for g in ("gw-a", "gw-b")))
    assert watcher.last("gattway/gw-a/availability")[1] == b"online"
    two[0].proc.send_signal(signal.SIGKILL)  # its simulator's dbus-daemon dies with it
    two[0].proc.wait(10)
    # The broker publishes the will when it notices the connection is gone (at once for a reset socket).
    assert watcher.wait(lambda: watcher.last("gattway/gw-a/availability")[1] == b"offline", 10)
    watcher.close()
    late = Client(broker, "gattway/+/availability")  # a newcomer learns both from retained messages
    assert late.wait(lambda: late.last("gattway/gw-a/availability") and late.last("gattway/gw-b/availability"))
    assert late.last("gattway/gw-a/availability")[1:3] == (b"offline", True)
    assert late.last("gattway/gw-b/availability")[1:3] == (b"online", True)
    late.close()


def test_a_clean_stop_says_offline(broker, one):
    watcher = Client(broker, "gattway/gw-a/availability")
    assert watcher.wait(lambda: (watcher.last("gattway/gw-a/availability") or ("", b""))[1] == b"online")
    assert one.stop() == 0
    assert watcher.wait(lambda: watcher.last("gattway/gw-a/availability")[1] == b"offline")
    assert "mqtt: " in "\n".join(one.log) and not any("connection lost" in line for line in one.log)
    watcher.close()


def test_sensor_values_are_retained_with_the_gateway_and_rssi_and_valid_against_the_schema(broker, two):
    live = Client(broker, "gattway/+/sensors/#")
    topics = [f"gattway/{g}/sensors/{a}" for g in ("gw-a", "gw-b") for a in SENSORS]
    assert live.wait(lambda: all(live.last(t) for t in topics), 15), [t for t in topics if not live.last(t)]
    live.close()
    retained = Client(broker, "gattway/+/sensors/#")
    assert retained.wait(lambda: all(retained.last(t) for t in topics), 5)
    for topic in topics:  # the retained copy: the sensors change every few seconds
        _, payload, retain, _ = retained.first(topic)
        body = json.loads(payload)
        assert retain, topic
        SENSOR.validate(body)
        assert body["gateway"] == topic.split("/")[1]
        assert body["id"] == topic.split("/")[-1]
        assert isinstance(body["rssi"], int)
    bthome = json.loads(retained.first(f"gattway/gw-a/sensors/{BTHOME}")[1])
    assert bthome["reading"]["format"] == "bthome"
    assert {"temperature", "humidity", "battery"} <= set(bthome["reading"]["measurements"])
    retained.close()


def test_sensor_values_are_published_when_they_change_not_at_every_packet(broker, one):
    live = Client(broker, f"gattway/gw-a/sensors/{BTHOME}")
    # The simulator's sensors measure every 2-3 s and advertise more often than that.
    assert live.wait(lambda: len(live.on(f"gattway/gw-a/sensors/{BTHOME}")) >= 3, 20)
    bodies = live.on(f"gattway/gw-a/sensors/{BTHOME}")
    # (the first may be the retained one, the same as the next live one)
    changes = [b["reading"]["measurements"] for b in bodies[1:]]
    assert all(a != b for a, b in zip(changes, changes[1:])), changes
    live.close()


REQUIRED = {"unique_id", "device", "state_topic", "availability", "name", "value_template"}
EXPECTED = {  # (component, device_class, unit) Home Assistant expects for the simulated sensors
    "ble_f00000000006_temperature": ("sensor", "temperature", "°C"),
    "ble_f00000000006_humidity": ("sensor", "humidity", "%"),
    "ble_f00000000006_battery": ("sensor", "battery", "%"),
    "ble_f00000000006_pressure": ("sensor", "pressure", "hPa"),
    "ble_f00000000006_voltage": ("sensor", "voltage", "V"),
    "ble_f00000000008_voltage": ("sensor", "voltage", "mV"),
    "ble_f0000000000b_pressure": ("sensor", "pressure", "Pa"),
    "ble_f00000000009_reed_switch": ("binary_sensor", None, None),
}


@pytest.fixture
def two_heard_from_the_start(broker):
    """A client subscribed to discovery before two gateways start: with the watch (implied by
    --simulate) they announce their sensors within a second of starting, before a client
    subscribed after them would hear it live."""
    live = Client(broker, "homeassistant/#")
    gateways = [start_gateway(broker.url, "gw-a"), start_gateway(broker.url, "gw-b")]
    yield live, gateways
    for gw in gateways:
        gw.stop()


def test_home_assistant_discovery_has_what_it_requires_and_no_duplicates_across_gateways(broker, two_heard_from_the_start):
    live, two = two_heard_from_the_start
    expected_topics = {f"homeassistant/{c}/{u}/config" for u, (c, _, _) in EXPECTED.items()}

    def announced_by_both():
        by = {}
        for topic, payload, _, _ in live.messages:
            by.setdefault(topic, set()).add(json.loads(payload)["state_topic"].split("/")[1])
        return all(by.get(t, set()) >= {"gw-a", "gw-b"} for t in expected_topics)
    assert live.wait(announced_by_both, 20)
    live.close()
    retained = Client(broker, "homeassistant/#")
    assert retained.wait(lambda: all(retained.last(t) for t in expected_topics), 5)
    time.sleep(0.5)  # retained messages come in one burst after SUBACK; let it end (there is no end marker)
    configs = {t: json.loads(p) for t, p, _, _ in retained.messages}
    retained.close()

    unique_ids = [c["unique_id"] for c in configs.values()]
    assert len(unique_ids) == len(set(unique_ids)), "duplicate unique ids"
    sensor_configs = {t: c for t, c in configs.items() if c["unique_id"].startswith("ble_")}
    for topic, config in sensor_configs.items():
        assert REQUIRED <= set(config), (topic, config)
        assert topic == f"homeassistant/{topic.split('/')[1]}/{config['unique_id']}/config"
        assert config["device"]["identifiers"] == [config["unique_id"].rsplit("_", 1)[0]] or \
            config["unique_id"].startswith(config["device"]["identifiers"][0] + "_")
        gateway = config["state_topic"].split("/")[1]
        assert config["device"]["via_device"] == f"gattway_{gateway}"
        assert config["availability"] == [{"topic": f"gattway/{gateway}/availability"}]
        assert config["payload_available"] == "online" and config["payload_not_available"] == "offline"
    for unique, (component, device_class, unit) in EXPECTED.items():
        config = configs[f"homeassistant/{component}/{unique}/config"]
        assert config.get("device_class") == device_class, unique
        assert config.get("unit_of_measurement") == unit, unique
        if component == "sensor":
            assert config["state_class"] == "measurement", unique
    # Each gateway is a device of its own, the via_device of the sensors.
    for g in ("gw-a", "gw-b"):
        own = configs[f"homeassistant/binary_sensor/gattway_{g}/config"]
        assert own["device"]["identifiers"] == [f"gattway_{g}"] and own["state_topic"] == f"gattway/{g}/availability"


def test_a_write_command_is_answered_on_the_response_topic_with_the_correlation_data(broker, one):
    reply, props = command(broker, "gw-a", {"op": "connect", "id": "c1", "device": SERIAL, "timeout": 10})
    assert reply == {"op": "result", "id": "c1", "device": SERIAL, "state": "connected"}
    assert props.CorrelationData == b"corr-c1"
    reply, props = command(broker, "gw-a", {"op": "write", "id": "w1", "device": SERIAL, "characteristic": "ffe1",
                                            "value": "hi", "format": "utf8"})
    assert reply["op"] == "result" and reply["id"] == "w1" and reply["written"] == 2, reply
    assert props.CorrelationData == b"corr-w1"
    status, device, _ = one.get(f"/v1/devices/{SERIAL}")
    assert status == 200 and device["state"] == "connected"


def test_mqtt_3_1_1_answers_go_to_reply_to(broker, one):
    client = Client(broker, "replies/v311", version=mqtt.MQTTv311)
    client.publish("gattway/gw-a/command", json.dumps({"op": "read", "id": "r1", "device": HEART_RATE,
                                                       "characteristic": "2a19", "replyTo": "replies/v311"}))
    assert client.wait(lambda: client.last("replies/v311"), 20)
    reply = client.json("replies/v311")
    # Not connected: the HTTP API's error, in its shape.
    assert reply["op"] == "error" and reply["id"] == "r1"
    ERROR.validate({"error": reply["error"]})
    assert reply["error"]["name"] == "notConnected" and reply["error"]["code"] == 3
    client.close()


def test_errors_have_the_corebluetooth_shape(broker, one):
    reply, _ = command(broker, "gw-a", {"op": "connect", "id": "e1", "device": "F0:00:00:00:00:99", "timeout": 5})
    assert reply["op"] == "error" and reply["id"] == "e1"
    ERROR.validate({"error": reply["error"]})
    assert (reply["error"]["domain"], reply["error"]["code"], reply["error"]["name"]) == ("CBErrorDomain", 12, "unknownDevice")
    reply, _ = command(broker, "gw-a", {"op": "launch", "id": "e2"})
    assert reply["error"]["name"] == "invalidParameters" and "connect, disconnect" in reply["error"]["message"]
    reply, _ = command(broker, "gw-a", {"op": "read", "id": "e3", "device": SERIAL, "characteristic": "ffe1", "colour": 1})
    assert reply["error"]["name"] == "invalidParameters" and "colour" in reply["error"]["message"]


def test_a_subscribe_command_streams_notifications_until_unsubscribed(broker, one):
    assert command(broker, "gw-a", {"op": "connect", "id": "1", "device": HEART_RATE, "timeout": 10})[0]["op"] == "result"
    stream = Client(broker, f"gattway/gw-a/notifications/{HEART_RATE}/#")
    ack, _ = command(broker, "gw-a", {"op": "subscribe", "id": "2", "device": HEART_RATE, "characteristic": "2a37"})
    assert ack["op"] == "ack", ack
    # The simulated heart-rate monitor notifies once a second.
    assert stream.wait(lambda: len(stream.messages) >= 3, 10)
    events = [json.loads(m[1]) for m in stream.messages]
    for event in events:
        EVENT.validate({k: v for k, v in event.items() if k != "subscription"})
        assert event["type"] == "notification" and event["device"] == HEART_RATE
        assert event["characteristic"]["uuid"].startswith("00002a37")
    assert [e["sequence"] for e in events[:3]] == [1, 2, 3]
    assert stream.messages[0][0] == f"gattway/gw-a/notifications/{HEART_RATE}/{events[0]['characteristic']['handle']}"
    assert command(broker, "gw-a", {"op": "unsubscribe", "id": "3", "subscription": ack["subscription"]})[0]["op"] == "ack"
    count = len(stream.messages)
    # No event says "nothing more will come": two notification periods without one is the evidence.
    time.sleep(2.5)
    assert len(stream.messages) <= count + 1  # one may have been on its way
    stream.close()


def test_connection_events_and_presence(broker, one):
    watcher = Client(broker, "gattway/gw-a/events/connection", f"gattway/gw-a/devices/{SERIAL}", "gattway/gw-a/state")
    assert watcher.wait(lambda: watcher.json("gattway/gw-a/state"))
    STATE.validate(watcher.json("gattway/gw-a/state"))
    assert watcher.wait(lambda: watcher.json(f"gattway/gw-a/devices/{SERIAL}"))
    DEVICE.validate(watcher.json(f"gattway/gw-a/devices/{SERIAL}"))
    command(broker, "gw-a", {"op": "connect", "id": "1", "device": SERIAL, "timeout": 10})
    assert watcher.wait(lambda: any(e.get("state") == "connected" for e in watcher.on("gattway/gw-a/events/connection")))
    assert watcher.wait(lambda: watcher.json(f"gattway/gw-a/devices/{SERIAL}")["state"] == "connected"), \
        ([d["state"] for d in watcher.on(f"gattway/gw-a/devices/{SERIAL}")], watcher.on("gattway/gw-a/events/connection"))
    command(broker, "gw-a", {"op": "disconnect", "id": "2", "device": SERIAL})
    assert watcher.wait(lambda: watcher.json(f"gattway/gw-a/devices/{SERIAL}")["state"] == "disconnected")
    for device in watcher.on(f"gattway/gw-a/devices/{SERIAL}"):
        DEVICE.validate(device)
    for event in watcher.on("gattway/gw-a/events/connection"):
        EVENT.validate(event)
    watcher.close()


def test_retained_state_comes_back_after_the_broker_restarts(broker, one):
    first = Client(broker, "gattway/gw-a/sensors/#", "homeassistant/#")
    assert first.wait(lambda: first.last(f"gattway/gw-a/sensors/{BTHOME}") and
                      first.last("homeassistant/sensor/ble_f00000000006_temperature/config"), 15)
    first.close()
    broker.stop()
    broker.start()  # without persistence: nothing retained survives in the broker
    after = Client(broker, "gattway/gw-a/availability", f"gattway/gw-a/sensors/{BTHOME}",
                   "homeassistant/sensor/ble_f00000000006_temperature/config")
    # Reconnection backs off from 1 s; the gateway republishes what it had retained.
    assert after.wait(lambda: after.last("gattway/gw-a/availability") and after.last(f"gattway/gw-a/sensors/{BTHOME}")
                      and after.last("homeassistant/sensor/ble_f00000000006_temperature/config"), 40)
    assert after.last("gattway/gw-a/availability")[1] == b"online"
    after.close()
    # Commands work again too.
    reply, _ = command(broker, "gw-a", {"op": "connect", "id": "1", "device": SERIAL, "timeout": 10})
    assert reply["state"] == "connected"
    log = "\n".join(one.log)
    assert "connection lost" in log and log.count("mqtt: connected to") >= 2


class OldBroker:
    """An MQTT 3.1.1-only broker, just enough of one: refuses an MQTT 5 CONNECT as a broker
    without 5 does (CONNACK 0x84, then closes), accepts 3.1.1, acknowledges SUBSCRIBE and QoS 1
    PUBLISH and answers PINGREQ. Records the protocol levels tried and what is published."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.levels = []
        self.published = []
        self.cond = threading.Condition()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._client, args=(conn,), daemon=True).start()

    @staticmethod
    def _read(conn):
        head = conn.recv(1)
        if not head:
            return None, b""
        length, shift = 0, 0
        while True:
            byte = conn.recv(1)[0]
            length |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        body = b""
        while len(body) < length:
            chunk = conn.recv(length - len(body))
            if not chunk:
                return None, b""
            body += chunk
        return head[0], body

    def _client(self, conn):
        with conn:
            kind, body = self._read(conn)
            if kind != 0x10:
                return
            level = body[6]  # after the protocol name "\0\4MQTT"
            with self.cond:
                self.levels.append(level)
                self.cond.notify_all()
            if level == 5:
                conn.sendall(b"\x20\x03\x00\x84\x00")
                return
            conn.sendall(b"\x20\x02\x00\x00")
            while True:
                kind, body = self._read(conn)
                if kind is None:
                    return
                if kind & 0xF0 == 0x80:  # SUBSCRIBE: grant QoS 0 to each filter
                    count, i = 0, 2
                    while i < len(body):
                        i += 2 + int.from_bytes(body[i:i + 2], "big") + 1
                        count += 1
                    conn.sendall(bytes([0x90, 2 + count]) + body[:2] + b"\x00" * count)
                elif kind & 0xF0 == 0x30:  # PUBLISH
                    qos = (kind >> 1) & 3
                    n = int.from_bytes(body[:2], "big")
                    topic, rest = body[2:2 + n].decode(), body[2 + n:]
                    if qos:
                        conn.sendall(b"\x40\x02" + rest[:2])
                        rest = rest[2:]
                    with self.cond:
                        self.published.append((topic, rest))
                        self.cond.notify_all()
                elif kind == 0xC0:
                    conn.sendall(b"\xd0\x00")
                elif kind == 0xE0:
                    return

    def wait(self, predicate, timeout=15):
        with self.cond:
            return self.cond.wait_for(predicate, timeout)


def test_a_broker_without_mqtt_5_gets_3_1_1():
    old = OldBroker()
    gw = Gateway(["--simulate", "--mqtt", f"mqtt://127.0.0.1:{old.port}", "--gateway-id", "gw-old"])
    try:
        assert old.wait(lambda: ("gattway/gw-old/availability", b"online") in old.published), (old.levels, old.published)
        assert old.levels[:2] == [5, 4]
        assert wait_for(lambda: any("(MQTT 3.1.1)" in line for line in gw.log), 5), gw.log
    finally:
        gw.stop()
        old.server.close()


def test_rssi_changes_do_not_flood_while_changed_readings_still_go_out(broker):
    """A scan that allows duplicates reports every advertisement, each with the simulator's RSSI
    jitter: presence goes out once per device (then at most every 30 s), sensor values when a
    measurement changes, whatever the RSSI does."""
    watcher = Client(broker, "gattway/gw-r/devices/+", "gattway/gw-r/sensors/+")
    gw = start_gateway(broker.url, "gw-r", scan={"allowDuplicates": True})
    try:
        window = 8.0
        started = time.monotonic()
        adverts = sse_events(gw, "types=advertisement", 100_000, window)
        elapsed = time.monotonic() - started + 1  # the gateway published since its start, a moment before
        heard = {}
        for event in adverts:
            heard.setdefault(event["data"]["device"], set()).add(event["data"]["peripheral"].get("rssi"))
        # RSSI changed many times meanwhile, for the sensors too.
        assert len(adverts) >= 50 and len(heard.get(BTHOME, ())) >= 3, (len(adverts), heard.get(BTHOME))
        with watcher.cond:
            messages = list(watcher.messages)
        presence = {}
        for topic, payload, _, _ in messages:
            if "/devices/" in topic:
                presence[topic] = presence.get(topic, 0) + 1
        assert presence and max(presence.values()) == 1, presence
        assert len(presence) <= len(heard) + 1  # (+1: a device heard just before the window)
        values = [json.loads(p)["reading"]["measurements"] for t, p, _, _ in messages if t == f"gattway/gw-r/sensors/{BTHOME}"]
        # The simulated BTHome sensor measures every 2-3 s: each of those goes out, nothing else.
        assert 2 <= len(values) <= elapsed / 2 + 2, (len(values), elapsed)
        assert all(a != b for a, b in zip(values, values[1:])), values
        per_sensor = {}
        for topic, *_ in messages:
            if "/sensors/" in topic:
                per_sensor[topic] = per_sensor.get(topic, 0) + 1
        assert max(per_sensor.values()) <= elapsed / 2 + 2, per_sensor
    finally:
        gw.stop()
        watcher.close()


IBEACON = "F0:00:00:00:00:04"


def test_a_steady_sensor_only_the_watch_hears_is_published(broker):
    """No scan: the watch alone hears the sensors, some from before the bridge started, and the
    iBeacon's values never change, so no event would ever bring its reading (it was missing)."""
    topic = f"gattway/gw-w/sensors/{IBEACON}"
    watcher = Client(broker, topic)
    gw = start_gateway(broker.url, "gw-w", scan=False)
    try:
        assert watcher.wait(lambda: watcher.on(topic), 15)
        body = watcher.on(topic)[0]
        SENSOR.validate(body)
        assert body["reading"]["format"] == "ibeacon" and body["gateway"] == "gw-w", body
    finally:
        gw.stop()
        watcher.close()


def test_with_expire_after_the_configs_carry_it_and_a_steady_beacon_still_heard_is_published_again(broker):
    """--mqtt-expire-after 4: Home Assistant shows an entity unavailable after 4 s without a
    message. The simulated iBeacon's values never change (published once without it, above):
    now its reading goes out again every 2 s while it is heard, and no more once it is not."""
    topic = f"gattway/gw-e/sensors/{IBEACON}"
    watcher = Client(broker, topic, "homeassistant/#")
    # A scan that filters duplicates (the default; the watch behaves alike): the unchanged
    # advertisements reach the bridge as no event at all, only as the gateway's having heard them.
    gw = start_gateway(broker.url, "gw-e", "--mqtt-expire-after", "4", scan={})
    try:
        assert watcher.wait(lambda: watcher.on(topic), 15)
        first = time.monotonic()
        assert watcher.wait(lambda: len(watcher.on(topic)) >= 3, 10), len(watcher.on(topic))
        assert time.monotonic() - first >= 3.5  # two halves of expire_after, a little early at most
        bodies = watcher.on(topic)
        assert len({json.dumps(b["reading"]["measurements"], sort_keys=True) for b in bodies}) == 1, bodies
        assert [b["updated"] for b in bodies] == sorted({b["updated"] for b in bodies})  # heard anew each time
        for body in bodies:
            SENSOR.validate(body)
        with watcher.cond:
            configs = {t: json.loads(p) for t, p, _, _ in watcher.messages if t.startswith("homeassistant/")}
        sensors = {t: c for t, c in configs.items() if c["unique_id"].startswith("ble_")}
        assert any(c["state_topic"] == topic for c in sensors.values()), list(sensors)
        assert sensors and all(c["expire_after"] == 4 for c in sensors.values()), sensors
        assert "expire_after" not in configs["homeassistant/binary_sensor/gattway_gw-e/config"]  # the gateway: its availability
        # Out of range: not heard, not published again; Home Assistant lets it expire.
        gw.simulator("SetFault", "string:" + IBEACON, 'string:{"outOfRange": true}')
        time.sleep(1)  # an advertisement already on its way
        count = len(watcher.on(topic))
        time.sleep(4.5)  # two refreshes' worth, had it still been heard
        assert len(watcher.on(topic)) == count
    finally:
        gw.stop()
        watcher.close()


def test_a_device_not_heard_for_forget_after_has_its_retained_topics_cleared(broker):
    topics = [f"gattway/gw-f/devices/{BTHOME}", f"gattway/gw-f/sensors/{BTHOME}"]
    kept = f"gattway/gw-f/sensors/{SENSORS[1]}"
    watcher = Client(broker, "gattway/gw-f/devices/+", "gattway/gw-f/sensors/+")
    gw = start_gateway(broker.url, "gw-f", "--forget-after", "3")
    try:
        assert watcher.wait(lambda: all(watcher.last(t) for t in topics), 15)
        gw.simulator("SetFault", "string:" + BTHOME, 'string:{"outOfRange": true}')
        gone = time.monotonic()
        # An empty retained message clears a topic; subscribers get it as an empty payload.
        assert watcher.wait(lambda: all(watcher.last(t)[1] == b"" for t in topics), 15), \
            [watcher.last(t)[1][:40] for t in topics]
        # Not before --forget-after (counted from the last advertisement, heard up to a second
        # before the fault); at most a sweep (a quarter of it, at least 1 s) and a margin later.
        assert 2 <= time.monotonic() - gone <= 9
        # The log line comes after the topics are cleared, through the reader of gattway's stderr.
        assert wait_for(lambda: any(re.search(rf"mqtt: forgot 1 device \(not heard for 3 s\).*{BTHOME}", line)
                                    for line in gw.log), 5), [line for line in gw.log if "forgot" in line]
        # A newcomer gets no retained message for it, while a sensor still heard is kept.
        late = Client(broker, "gattway/gw-f/devices/+", "gattway/gw-f/sensors/+", kept)
        assert late.wait(lambda: late.last(kept), 5)
        time.sleep(0.5)  # retained messages come in one burst after SUBACK; let it end (there is no end marker)
        assert late.last(topics[0]) is None and late.last(topics[1]) is None
        late.close()
        # Heard again: its values are published again.
        gw.simulator("ClearFaults", "string:" + BTHOME)
        assert watcher.wait(lambda: watcher.last(topics[1])[1] != b"", 10)
        SENSOR.validate(watcher.json(topics[1]))
    finally:
        gw.stop()
        watcher.close()


def test_without_libmosquitto_gattway_starts_and_only_mqtt_is_refused_with_why():
    """libmosquitto is opened for --mqtt, not linked: with it hidden (/dev/null bound over the file,
    in a mount namespace of this test's own) gattway starts, and --mqtt is refused (exit 2). A
    linked library would stop the loader before main (exit 127)."""
    cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    library = re.search(r"libmosquitto\.so\.1 \(.*\) => (\S+)", cache)
    assert library, "libmosquitto.so.1 is not installed"
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare -m is not permitted here (needs CAP_SYS_ADMIN)")

    def hidden(*args):
        return subprocess.run(["unshare", "-m", "sh", "-c", 'mount --bind /dev/null "$0" && exec "$@"',
                               os.path.realpath(library.group(1)), binary("gattway"), *args],
                              capture_output=True, text=True, timeout=30)

    out = hidden("--version")
    assert out.returncode == 0 and out.stdout.startswith("gattway "), out.stderr
    out = hidden("--listen", "127.0.0.1:0", "--state-dir", "none", "--simulate", "--mqtt", "mqtt://127.0.0.1:1")
    assert out.returncode == 2, out.stderr
    assert "gattway: --mqtt: cannot load libmosquitto.so.1: " in out.stderr and "libmosquitto1" in out.stderr, out.stderr
    assert "listening" not in out.stderr
