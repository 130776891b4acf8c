"""What the MQTT tests share: a real mosquitto on free loopback ports, a paho-mqtt client that
records what arrives, and `gattway --simulate --mqtt` gateways."""
import json
import socket
import subprocess
import threading
import time
import uuid

import paho.mqtt.client as mqtt
import pytest

from conftest import Gateway


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    """A mosquitto without persistence (a restart forgets every retained message). `port` is an
    anonymous plain listener; `listeners` are more, each a list of mosquitto.conf lines, on
    ports of their own (`ports`, in order). With more than one listener, settings are per listener."""

    def __init__(self, tmp_path, listeners=()):
        self.port = free_port()
        self.ports = [free_port() for _ in listeners]
        lines = ["persistence false"]
        if listeners:
            lines.append("per_listener_settings true")
        lines += [f"listener {self.port} 127.0.0.1", "allow_anonymous true"]
        for port, settings in zip(self.ports, listeners):
            lines += [f"listener {port} 127.0.0.1", *settings]
        self.config = tmp_path / "mosquitto.conf"
        self.config.write_text("\n".join(lines) + "\n")
        self.proc = None
        self.start()

    @property
    def url(self):
        return f"mqtt://127.0.0.1:{self.port}"

    def start(self):
        self.proc = subprocess.Popen(["mosquitto", "-c", str(self.config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        for port in [self.port, *self.ports]:
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if self.proc.poll() is not None:
                        pytest.fail("mosquitto did not start: " + self.proc.stderr.read().decode(errors="replace"))
                    if time.monotonic() > deadline:
                        pytest.fail("mosquitto did not start")
                    time.sleep(0.05)  # the broker has no readiness signal but its ports

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


class Client:
    """A paho client that records what arrives; `wait` blocks (bounded) until a condition holds."""

    def __init__(self, broker, *topics, version=mqtt.MQTTv5):
        self.messages = []  # (topic, payload bytes, retain, properties)
        self.cond = threading.Condition()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="test-" + uuid.uuid4().hex[:8], protocol=version)
        self.subscribed = threading.Event()
        self.client.on_message = self._message
        self.client.on_subscribe = lambda *a: self.subscribed.set()
        self.client.connect("127.0.0.1", broker.port)
        self.client.loop_start()
        if topics:
            self.client.subscribe([(t, 1) for t in topics])
            assert self.subscribed.wait(5)

    def _message(self, client, userdata, message):
        with self.cond:
            self.messages.append((message.topic, message.payload, message.retain, message.properties))
            self.cond.notify_all()

    def wait(self, predicate, timeout=10):
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                value = predicate()
                if value or time.monotonic() > deadline:
                    return value
                self.cond.wait(max(0.01, deadline - time.monotonic()))

    def last(self, topic):
        found = [m for m in self.messages if m[0] == topic]
        return found[-1] if found else None

    def first(self, topic):
        """Right after subscribing, the broker's retained copy; a later message of a topic that
        changes may be a live one (retain flag off)."""
        return next((m for m in self.messages if m[0] == topic), None)

    def json(self, topic):
        m = self.last(topic)
        return json.loads(m[1]) if m else None

    def on(self, topic):
        return [json.loads(m[1]) for m in self.messages if m[0] == topic]

    def publish(self, topic, payload, properties=None):
        info = self.client.publish(topic, payload, qos=1, properties=properties)
        info.wait_for_publish(5)

    def close(self):
        self.client.loop_stop()
        self.client.disconnect()


def start_gateway(url, gateway_id, *args, scan=None):
    """`gattway --simulate --mqtt URL`, with a scan started (`scan`: its options) unless scan is False."""
    gw = Gateway(["--simulate", "--mqtt", url, "--gateway-id", gateway_id, *args])
    if scan is not False:
        assert gw.post("/v1/scan", scan or {})[0] == 200
    return gw
