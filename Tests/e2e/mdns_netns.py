"""Run by test_esphome_mdns.py inside a network and mount namespace of its own (unshare -n -m),
as root: loopback up with multicast, a private system bus, Debian's avahi-daemon on it, gattway
with --esphome-api beyond loopback; then what a browser sees. Prints one JSON object.

Usage: mdns_netns.py GATTWAY WORKDIR"""
import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time

GATTWAY, WORK = sys.argv[1], sys.argv[2]
KEY = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="  # bytes 0..31
NODE = "proxy-e2e"
TYPE = "_esphomelib._tcp"
result = {"steps": []}
processes = []


def step(text):
    result["steps"].append(f"{time.monotonic():.2f} {text}")


def spawn(args, env=None, name=None):
    log = open(os.path.join(WORK, (name or os.path.basename(args[0])) + ".log"), "w")
    p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    processes.append(p)
    return p


class Gattway:
    def __init__(self, name, bus):
        self.lines = []
        self.p = subprocess.Popen([GATTWAY, "--simulate", "--listen", "127.0.0.1:0", "--state-dir", "none", "--gateway-id", NODE,
                                   "--esphome-api", "0.0.0.0:0", "--esphome-key", KEY],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  env={**os.environ, "DBUS_SYSTEM_BUS_ADDRESS": bus})
        processes.append(self.p)
        self.log = open(os.path.join(WORK, name + ".log"), "w")
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        for line in self.p.stderr:
            self.lines.append(line.rstrip())
            self.log.write(line)
            self.log.flush()

    def wait(self, pattern, timeout=15):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.lines:
                m = re.search(pattern, line)
                if m:
                    return m
            time.sleep(0.05)
        raise RuntimeError(f"no {pattern!r} in gattway's log:\n" + "\n".join(self.lines[-30:]))

    def mdns_lines(self):
        return [line.split(" ", 1)[1] for line in self.lines if " mdns: " in line]


def browse(bus):
    """avahi-browse's resolved entries of the type: {name: (host, address, port, {key: value})}.
    An avahi-browse that has not ended within 10 s (seen once in CI, right after avahi-daemon
    started again on a loaded machine) gives what it printed by then."""
    try:
        stdout = subprocess.run(["avahi-browse", "-r", "-p", "-t", TYPE], capture_output=True, text=True, timeout=10,
                                env={**os.environ, "DBUS_SYSTEM_BUS_ADDRESS": bus}).stdout
    except subprocess.TimeoutExpired as e:
        step("avahi-browse did not end within 10 s")
        stdout = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
    found = {}
    for line in stdout.splitlines():
        fields = line.split(";")
        if fields[0] != "=" or len(fields) < 10:
            continue
        txt = dict(t.split("=", 1) for t in re.findall(r'"((?:[^"\\]|\\.)*)"', fields[9]) if "=" in t)
        name = re.sub(r"\\(\d{3})", lambda m: chr(int(m.group(1))), fields[3])  # avahi-browse's escapes: decimal
        found[name] = (fields[6], fields[7], int(fields[8]), txt)
    return found


async def zeroconf_lookup(name):
    from zeroconf import IPVersion
    from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

    aiozc = AsyncZeroconf(interfaces=["127.0.0.1"], ip_version=IPVersion.V4Only)
    try:
        info = AsyncServiceInfo(TYPE + ".local.", f"{name}.{TYPE}.local.")
        if not await info.async_request(aiozc.zeroconf, 5000):
            return None
        return {"port": info.port, "addresses": info.parsed_addresses(), "server": info.server,
                "txt": {k.decode(): (v or b"").decode() for k, v in info.properties.items()}}
    finally:
        await aiozc.async_close()


async def device_info(port):
    from aioesphomeapi import APIClient

    client = APIClient("127.0.0.1", port, None, noise_psk=KEY, client_info="mdns e2e")
    await client.connect(login=False)
    try:
        info = await client.device_info()
        return {"name": info.name, "mac": info.mac_address}
    finally:
        await client.disconnect()


def main():
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(["ip", "link", "set", "lo", "multicast", "on"], check=True)
    # avahi-daemon's runtime directory (pid file, socket), ours alone in this mount namespace.
    os.makedirs("/run/avahi-daemon", exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", "/run/avahi-daemon"], check=True)

    bus_conf = os.path.join(WORK, "bus.conf")
    socket_path = os.path.join(WORK, "system_bus_socket")
    with open(bus_conf, "w") as f:
        f.write(f"""<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig><type>system</type><listen>unix:path={socket_path}</listen>
<policy context="default"><allow user="*"/><allow own="*"/><allow send_destination="*" eavesdrop="true"/>
<allow receive_sender="*"/></policy></busconfig>
""")
    spawn(["dbus-daemon", "--nofork", "--config-file=" + bus_conf], name="dbus-daemon")
    bus = "unix:path=" + socket_path
    deadline = time.monotonic() + 10
    while not os.path.exists(socket_path):
        assert time.monotonic() < deadline, "the private bus did not start"
        time.sleep(0.05)

    # 1. No avahi-daemon yet: one log line, and the API works.
    first = Gattway("gattway-1", bus)
    port = int(first.wait(r"esphome: listening on 0\.0\.0\.0:(\d+) ").group(1))
    first.wait(r"mdns: avahi-daemon is not running")
    result["before_avahi"] = first.mdns_lines()
    result["device_info"] = asyncio.run(device_info(port))
    step("API served without avahi-daemon")

    # 2. avahi-daemon starts: gattway announces the proxy by itself.
    avahi_conf = os.path.join(WORK, "avahi-daemon.conf")
    with open(avahi_conf, "w") as f:
        f.write("[server]\nhost-name=gattway-test\nuse-ipv4=yes\nuse-ipv6=no\nallow-interfaces=lo\nenable-dbus=yes\n"
                "ratelimit-interval-usec=1000000\nratelimit-burst=1000\n"
                "[publish]\npublish-hinfo=no\npublish-workstation=no\n")
    avahi = spawn(["avahi-daemon", "--no-drop-root", "--no-chroot", "--no-rlimits", "-f", avahi_conf],
                  env={"DBUS_SYSTEM_BUS_ADDRESS": bus}, name="avahi-daemon")
    first.wait(r'mdns: announced "proxy-e2e"', timeout=20)
    step("announced once avahi-daemon came")
    result["port"] = port
    result["avahi_browse"] = browse(bus)
    result["zeroconf"] = asyncio.run(zeroconf_lookup(NODE))

    # 3. A second proxy with the same node name: Avahi's alternative name.
    second = Gattway("gattway-2", bus)
    second.wait(r"esphome: listening on 0\.0\.0\.0:(\d+) ")
    result["second"] = second.wait(r'mdns: announced "([^"]+)"', timeout=20).group(1)
    result["both"] = sorted(browse(bus))

    # 4. Stopped: withdrawn.
    second.p.terminate()
    second.p.wait(10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and result["second"] in browse(bus):
        time.sleep(0.2)
    result["after_stop"] = sorted(browse(bus))

    # 5. avahi-daemon restarts: announced again, by itself.
    avahi.terminate()
    avahi.wait(10)
    first.wait(r"mdns: avahi-daemon left the bus")
    announcements = sum('mdns: announced "proxy-e2e"' in line for line in first.lines)
    spawn(["avahi-daemon", "--no-drop-root", "--no-chroot", "--no-rlimits", "-f", avahi_conf],
          env={"DBUS_SYSTEM_BUS_ADDRESS": bus}, name="avahi-daemon-2")
    # gattway says when it has announced again; then what a browser sees.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and sum('mdns: announced "proxy-e2e"' in line for line in first.lines) == announcements:
        time.sleep(0.05)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "proxy-e2e" not in browse(bus):
        time.sleep(0.2)
    result["after_restart"] = sorted(browse(bus))
    result["first_log"] = first.mdns_lines()


try:
    main()
except Exception as e:  # the test prints it with the logs
    result["error"] = f"{type(e).__name__}: {e}"
finally:
    for p in reversed(processes):
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
    print(json.dumps(result))
