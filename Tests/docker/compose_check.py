"""What the broker of Docker/compose.mqtt.yaml must hold once the house is up, and after one
gateway's container is killed. Run by Tests/docker/compose-mqtt.sh:

    compose_check.py PORT up          both gateways online; each heard sensors (retained, with
                                      its gateway id); Home Assistant configs for them, each
                                      unique id once, with availability and via_device
    compose_check.py PORT crash ID COMMAND...
                                      gattway/ID/availability is online; COMMAND (which kills
                                      it) runs; the availability turns offline (the last will),
                                      then online again (the container restarted). Watched
                                      from before the kill: a restart quicker than this
                                      script's start would otherwise hide the offline.
Prints what it saw; exit 1 when a condition did not hold within its bound."""
import json
import subprocess
import sys
import threading
import time

import paho.mqtt.client as mqtt

port, what = int(sys.argv[1]), sys.argv[2]
retained, lock, changed = {}, threading.Lock(), threading.Condition()
# Every payload of each topic, in order (an offline followed at once by online is both).
history = {}


def message(client, userdata, msg):
    with changed:
        history.setdefault(msg.topic, []).append(msg.payload.decode())
        if msg.payload:
            retained[msg.topic] = msg.payload.decode()
        else:
            retained.pop(msg.topic, None)
        changed.notify_all()


def connect(client, userdata, flags, reason, properties):
    client.subscribe([("gattway/#", 0), ("homeassistant/#", 0)])


client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
client.on_message, client.on_connect = message, connect
deadline = time.monotonic() + 60
while True:  # the broker's port is published once its container runs
    try:
        client.connect("127.0.0.1", port)
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit(f"no broker on 127.0.0.1:{port}")
        time.sleep(0.5)
client.loop_start()


def wait(predicate, timeout, what):
    with changed:
        if changed.wait_for(lambda: predicate(retained), timeout):
            return
    client.loop_stop()
    print(f"FAIL: {what} within {timeout} s; the broker holds:", file=sys.stderr)
    for topic in sorted(retained):
        print(f"  {topic} {retained[topic][:160]}", file=sys.stderr)
    sys.exit(1)


def sensors(held, gateway):
    return {t: json.loads(v) for t, v in held.items() if t.startswith(f"gattway/{gateway}/sensors/")}


def configs(held):
    return [json.loads(v) for t, v in held.items() if t.startswith("homeassistant/") and t.endswith("/config")]


if what == "up":
    wait(lambda h: all(h.get(f"gattway/{g}/availability") == "online" for g in ("upstairs", "downstairs")),
         90, "both gateways online")
    wait(lambda h: all(len(sensors(h, g)) >= 3 for g in ("upstairs", "downstairs")), 60,
         "three sensors or more heard by each gateway")
    def announced(held):  # a config for each sensor heard with measurements (not one sealed without its key)
        devices = {t.rsplit("/", 1)[1] for g in ("upstairs", "downstairs") for t, v in sensors(held, g).items()
                   if v["reading"].get("measurements")}
        topics = {c["state_topic"].rsplit("/", 1)[1] for c in configs(held)}
        return devices <= topics
    wait(announced, 60, "a Home Assistant config for every sensor heard")
    for gateway in ("upstairs", "downstairs"):
        values = sensors(retained, gateway)
        assert all(v["gateway"] == gateway for v in values.values()), values
        print(f"{gateway}: online, {len(values)} sensors retained: "
              + ", ".join(sorted(t.rsplit("/", 1)[1] for t in values)))
    found = configs(retained)
    ids = [c["unique_id"] for c in found]
    assert len(ids) == len(set(ids)), f"duplicate unique ids: {sorted(ids)}"
    heard = [c for c in found if "/sensors/" in c["state_topic"]]
    for c in heard:  # the others are each gateway's own connectivity, whose state is its availability
        for key in ("unique_id", "state_topic", "device", "availability", "unit_of_measurement"):
            assert key in c or key == "unit_of_measurement" and "device_class" not in c, f"{key} missing in {c}"
        assert c["device"].get("via_device"), c["device"]
    print(f"Home Assistant: {len(found)} entities ({len(heard)} of sensors heard), every unique id once,"
          " each sensor's with availability and via_device")
elif what == "crash":
    gateway, command = sys.argv[3], sys.argv[4:]
    topic = f"gattway/{gateway}/availability"
    wait(lambda h: h.get(topic) == "online", 60, f"{gateway} online before the crash")
    with changed:
        seen = len(history[topic])
    subprocess.run(command, check=True)
    wait(lambda h: "offline" in history[topic][seen:], 60, f"{gateway} offline (its last will)")
    print(f"{gateway}: offline")
    with changed:
        seen += history[topic][seen:].index("offline") + 1
    wait(lambda h: "online" in history[topic][seen:], 60, f"{gateway} online again")
    print(f"{gateway}: online again")
client.loop_stop()
client.disconnect()
