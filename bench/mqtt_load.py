#!/usr/bin/env python3
"""The broker's load from one gateway: N simulated sensors measuring every second (formats in
turn: bthome, atc1441, pvvx, mibeacon, ruuvi-rawv2), `gattway --simulate FILE --mqtt` on a
private mosquitto, a scan started over REST, then a window of steady state measured two ways:

  - at a subscriber on `#` (paho-mqtt): messages/s and bytes/s (topic + payload), by topic kind;
  - at the broker ($SYS, every second): messages and bytes received (MQTT framing included).

Usage: bench/mqtt_load.py [--sensors 50] [--seconds 30] [--bin DIR]   (needs mosquitto, paho-mqtt)
The warm-up (first readings, discovery) is left out of the window.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import paho.mqtt.client as mqtt

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORMATS = ["bthome", "atc1441", "pvvx", "mibeacon", "ruuvi-rawv2"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sensors", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--warmup", type=float, default=8)
    ap.add_argument("--bin", default=os.environ.get("GATTWAY_BIN_DIR", os.path.join(ROOT, ".build", "debug")))
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="mqtt-load-")
    port = free_port()
    conf = os.path.join(work, "mosquitto.conf")
    with open(conf, "w") as f:
        f.write(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\nsys_interval 1\n")
    devices = [{"address": f"F1:00:00:00:{n // 256:02X}:{n % 256:02X}", "name": f"Load {n}", "connectable": False,
                "advertisingIntervalMs": 200, "sensor": {"format": FORMATS[n % len(FORMATS)], "intervalMs": 1000}}
               for n in range(args.sensors)]
    config = os.path.join(work, "sensors.json")
    with open(config, "w") as f:
        json.dump({"devices": devices}, f)

    broker = subprocess.Popen(["mosquitto", "-c", conf], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    gateway = None
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        http_port = free_port()
        gateway = subprocess.Popen([os.path.join(args.bin, "gattway"), "--simulate", config, "--state-dir", "none",
                                    "--listen", f"127.0.0.1:{http_port}", "--mqtt", f"mqtt://127.0.0.1:{port}",
                                    "--gateway-id", "load"], stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "gattway.log"), "w"))

        lock = threading.Lock()
        counting = threading.Event()
        counts = {}      # topic kind -> [messages, bytes]
        sys_values = {}  # $SYS topic -> [(time, value)]

        def on_message(client, userdata, message):
            if message.topic.startswith("$SYS/"):
                try:
                    value = float(message.payload)
                except ValueError:
                    return
                with lock:
                    sys_values.setdefault(message.topic, []).append((time.monotonic(), value))
                return
            if not counting.is_set():
                return
            parts = message.topic.split("/")
            kind = parts[0] if parts[0] == "homeassistant" else parts[2]
            with lock:
                c = counts.setdefault(kind, [0, 0])
                c[0] += 1
                c[1] += len(message.topic) + len(message.payload)

        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="load-counter")
        client.on_message = on_message
        client.connect("127.0.0.1", port)
        client.subscribe([("gattway/#", 0), ("homeassistant/#", 0), ("$SYS/broker/messages/received", 0),
                          ("$SYS/broker/bytes/received", 0), ("$SYS/broker/messages/sent", 0)])
        client.loop_start()

        deadline = time.monotonic() + 20
        while True:
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{http_port}/v1/scan", data=b"{}", method="POST",
                                             headers={"Content-Type": "application/json"})
                urllib.request.urlopen(req, timeout=5).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    sys.exit("gattway did not start; see " + work)
                time.sleep(0.1)
        time.sleep(args.warmup)
        started = time.monotonic()
        counting.set()
        time.sleep(args.seconds)
        counting.clear()
        elapsed = time.monotonic() - started
        client.loop_stop()

        def sys_rate(topic):
            with lock:
                window = [(t, v) for t, v in sys_values.get(topic, []) if started <= t <= started + elapsed]
            if len(window) < 2:
                return None
            return (window[-1][1] - window[0][1]) / (window[-1][0] - window[0][0])

        total_messages = sum(c[0] for c in counts.values())
        total_bytes = sum(c[1] for c in counts.values())
        print(f"{args.sensors} sensors measuring every 1 s, one gateway, {elapsed:.0f} s window after {args.warmup:.0f} s warm-up")
        print(f"  at the subscriber: {total_messages / elapsed:.1f} messages/s, {total_bytes / elapsed:.0f} bytes/s (topic + payload)")
        for kind, (m, b) in sorted(counts.items()):
            print(f"    {kind:<14} {m / elapsed:7.1f} messages/s {b / elapsed:9.0f} bytes/s  {b / max(m, 1):6.0f} bytes/message")
        received, received_bytes = sys_rate("$SYS/broker/messages/received"), sys_rate("$SYS/broker/bytes/received")
        if received is not None and received_bytes is not None:
            print(f"  at the broker ($SYS): {received:.1f} messages/s received, {received_bytes:.0f} bytes/s received (MQTT framing included)")
    finally:
        if gateway:
            gateway.terminate()
            gateway.wait(10)
        broker.terminate()
        broker.wait(10)


if __name__ == "__main__":
    main()
