"""Issue 36 on the simulator: advertisements from the management events — the kernel's frames,
which the simulator serves for its adapters (`gattway-sim --management-socket`, and the embedded
one of `--simulate`) — instead of BlueZ's D-Bus signals. The path in use is said (log, GET
/v1/adapters); the ESPHome proxy sends each advertisement's bytes as the frame carried them, flags
and all; BlueZ's per-advertisement Device1 signals are no longer read (counted in /metrics) while
the watch still hears every device; `--advertisements dbus` keeps the D-Bus path. The real
kernel's socket is the lab's to prove (test_kernel_realbluez.py)."""
import asyncio
import os
import re
import socket
import struct
import subprocess
import threading
import time
import urllib.request

import pytest

from conftest import Gateway, wait_for
from esphome_client import ad_structures, address_int, connected, esphome_port

BTHOME = "F0:00:00:00:00:06"
HEART_RATE = "F0:00:00:00:00:01"


def adapters(gw):
    status, body, _ = gw.get("/v1/adapters")
    assert status == 200, body
    return {a["id"]: a["advertisements"] for a in body["adapters"]}


def signals_read(gw):
    """BlueZ's Device1 PropertiesChanged signals gattway read so far (/metrics)."""
    with urllib.request.urlopen(gw.base + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    m = re.search(r'^gattway_dbus_properties_signals_total\{interface="device"\} (\d+)', text, re.M)
    assert m, text
    return int(m.group(1))


class Simulator:
    """`gattway-sim --management-socket PATH` on its own bus (with `--config FILE` when given)."""

    def __init__(self, tmp_path, config=None):
        self.socket = str(tmp_path / "mgmt.sock")
        self.p = subprocess.Popen([os.path.join(os.environ["GATTWAY_BIN_DIR"], "gattway-sim"), "--management-socket", self.socket]
                                  + (["--config", config] if config else []),
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        first = self.p.stdout.readline()
        assert first.startswith("DBUS_SYSTEM_BUS_ADDRESS="), first
        self.bus = first.strip().split("=", 1)[1]
        threading.Thread(target=lambda: [None for _ in self.p.stdout], daemon=True).start()
        assert wait_for(lambda: os.path.exists(self.socket), 10)

    def control(self, method, *args):
        """Calls the simulator's control interface (io.gattway.Simulator1)."""
        out = subprocess.run(["dbus-send", "--bus=" + self.bus, "--print-reply", "--dest=org.bluez", "/io/gattway/simulator",
                              "io.gattway.Simulator1." + method, *args], capture_output=True, text=True, timeout=10)
        assert out.returncode == 0, out.stderr

    def stop(self):
        self.p.terminate()
        self.p.wait(10)


class Frames:
    """Another reader of the simulator's stream: the AD bytes of every Device Found frame, by address."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.connect(path)
        self.sock.settimeout(0.2)
        self.by_address = {}
        self.running = True
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        while self.running:
            try:
                frame = self.sock.recv(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            if not frame:
                return
            event, _, length = struct.unpack_from("<HHH", frame)
            assert length == len(frame) - 6
            if event != 0x0012:
                continue
            address = ":".join(f"{b:02X}" for b in reversed(frame[6:12]))
            data_length = struct.unpack_from("<H", frame, 6 + 12)[0]
            self.by_address.setdefault(address, set()).add(bytes(frame[6 + 14:6 + 14 + data_length]))

    def stop(self):
        self.running = False
        self.sock.shutdown(socket.SHUT_RDWR)


def test_the_path_in_use_is_said_and_dbus_when_asked():
    gw = Gateway(["--simulate"])
    try:
        assert set(adapters(gw).values()) == {"kernel"}, adapters(gw)
        assert any("advertisements: from the simulator's management events" in line for line in gw.log), gw.log
    finally:
        gw.stop()
    gw = Gateway(["--simulate", "--advertisements", "dbus"])
    try:
        assert set(adapters(gw).values()) == {"dbus"}, adapters(gw)
        assert any("advertisements: from BlueZ's D-Bus signals (--advertisements dbus)" in line for line in gw.log), gw.log
    finally:
        gw.stop()


def test_the_proxy_sends_each_advertisement_as_the_frame_carried_it(tmp_path):
    sim = Simulator(tmp_path)
    frames = Frames(sim.socket)
    gw = Gateway(["--management-socket", sim.socket, "--esphome-api", "127.0.0.1:0", "--watch"],
                 env={"DBUS_SYSTEM_BUS_ADDRESS": sim.bus})
    try:
        assert set(adapters(gw).values()) == {"kernel"}, adapters(gw)

        async def scenario():
            api = await connected(esphome_port(gw))
            reports = []
            api.subscribe_bluetooth_le_raw_advertisements(
                lambda r: reports.extend((a.address, bytes(a.data)) for a in r.advertisements))
            await asyncio.sleep(4)
            await api.disconnect()
            return reports

        reports = asyncio.run(asyncio.wait_for(scenario(), 60))
    finally:
        gw.stop()
        frames.stop()
        sim.stop()
    assert len(reports) >= 20, reports
    sent = {address_int(a): datas for a, datas in frames.by_address.items()}
    strangers = [(hex(a), d.hex()) for a, d in reports if d not in sent.get(a, set())]
    assert not strangers, f"sent on but never framed so: {strangers[:5]}"
    # The flags structure, which BlueZ's D-Bus properties do not carry (without --experimental).
    bthome = [d for a, d in reports if a == address_int(BTHOME)]
    assert bthome and all(any(t == 0x01 for t, _ in ad_structures(d)) for d in bthome), bthome[:3]


@pytest.mark.parametrize("path", ["kernel", "dbus"])
def test_bluez_device_signals_are_read_only_on_the_dbus_path(path):
    """The watch (on with --simulate) hears the built-in devices either way; on the kernel path
    BlueZ's Device1 signals for them are not read at all (none of them is engaged)."""
    gw = Gateway(["--simulate", "--advertisements", "auto" if path == "kernel" else "dbus"])
    try:
        assert wait_for(lambda: gw.get("/v1/watch")[1].get("devices", 0) >= 8, 10), gw.get("/v1/watch")
        before = signals_read(gw)
        time.sleep(3)  # a window of advertisements (the simulator's devices advertise every 0.1-1 s)
        read = signals_read(gw) - before
        status, sensors, _ = gw.get("/v1/sensors")
        heard_again = [s["id"] for s in sensors["sensors"] if s["age"] < 2]
    finally:
        gw.stop()
    assert len(heard_again) >= 3, (path, sensors)
    if path == "kernel":
        assert read == 0, f"{read} Device1 signals read on the kernel path"
    else:
        assert read >= 30, f"only {read} Device1 signals read on the D-Bus path"


@pytest.mark.parametrize("path", ["kernel", "dbus"])
def test_a_link_another_client_makes_shows_though_bluez_does_not_signal_it(path):
    """Another client of BlueZ connects a device (Device1.Connect), twice. As real bluetoothd was
    seen to do in the lab (test_kernel_realbluez.py's guest, a busctl Connect): the Connected=true
    signal never comes, only ServicesResolved=true; Get says connected. The first time the
    kernel's Device Connected engages the device and its properties are read; the second time it
    is engaged already, so nothing but ServicesResolved tells gattway: it reads the device again
    then. On the D-Bus path that signal is all there is, both times."""
    gw = Gateway(["--simulate", "--no-watch", "--advertisements", "auto" if path == "kernel" else "dbus"])
    device = f"/org/bluez/hci0/dev_{HEART_RATE.replace(':', '_')}"

    def other_client(member):
        out = subprocess.run(["dbus-send", "--bus=" + gw.bus, "--print-reply", "--dest=org.bluez", device,
                              "org.bluez.Device1." + member], capture_output=True, text=True, timeout=20)
        assert out.returncode == 0, out.stderr

    def state():
        return gw.get(f"/v1/devices/{HEART_RATE}")[1].get("state")

    try:
        gw.discover(HEART_RATE)
        assert adapters(gw)["hci0"] == path, adapters(gw)
        gw.simulator("SetFault", "string:" + HEART_RATE, 'string:{"suppressConnectedSignal": true}')
        for round in (1, 2):
            other_client("Connect")
            assert wait_for(lambda: state() == "connected", 5), (round, state())
            other_client("Disconnect")
            assert wait_for(lambda: state() == "disconnected", 5), (round, state())
    finally:
        gw.stop()


def test_an_adapter_plugged_in_later_is_read_from_the_kernel_and_one_pulled_out_leaves_the_others(tmp_path):
    """Index Added and Index Removed. hci1 is pulled out before gattway opens the channel, so the
    kernel's list lacks it; plugged in, the kernel tells every management socket (Index Added)
    before bluetoothd shows the adapter: gattway reads its advertisements from the channel too,
    with no fall back to D-Bus. Pulled out again (Index Removed), hci0 keeps the kernel's path."""
    from test_adapters import HR, SERIAL, configuration, heard_by, listed
    config = configuration()
    sim = Simulator(tmp_path, config)
    gw = None
    try:
        sim.control("RemoveAdapter", "string:hci1")
        gw = Gateway(["--management-socket", sim.socket, "--no-watch"], env={"DBUS_SYSTEM_BUS_ADDRESS": sim.bus})
        assert adapters(gw) == {"hci0": "kernel"}
        status, body, _ = gw.post("/v1/scan", {})
        assert status == 200, body
        assert wait_for(lambda: listed(gw, HR) is not None, 10)

        sim.control("AddAdapter", "string:hci1")
        assert wait_for(lambda: adapters(gw) == {"hci0": "kernel", "hci1": "kernel"}, 10), adapters(gw)
        # The scan goes on the adapter that came; what only it hears is heard there.
        assert wait_for(lambda: listed(gw, SERIAL) and heard_by(listed(gw, SERIAL)) == {"hci1": -50}, 10), listed(gw, SERIAL)
        # Its advertisements come from the kernel's events: a new RSSI shows while BlueZ's
        # Device1 signals (which would carry it on the D-Bus path) are not read at all.
        before = signals_read(gw)
        sim.control("SetRSSI", "string:" + SERIAL, "string:hci1", "int16:-62")
        assert wait_for(lambda: heard_by(listed(gw, SERIAL)) == {"hci1": -62}, 10), listed(gw, SERIAL)
        assert signals_read(gw) == before

        sim.control("RemoveAdapter", "string:hci1")
        assert wait_for(lambda: adapters(gw) == {"hci0": "kernel"}, 10), adapters(gw)
        before = signals_read(gw)
        sim.control("SetRSSI", "string:" + HR, "string:hci0", "int16:-60")
        assert wait_for(lambda: (listed(gw, HR) or {}).get("rssi") == -60, 10), listed(gw, HR)
        assert signals_read(gw) == before
        log = "\n".join(gw.log)
        assert "D-Bus signals" not in log and "advertisements: from the management events at" in log, log
        assert "advertisements: the kernel has a new controller, hci1" in log and "the kernel's controller hci1 is gone" in log, log
    finally:
        if gw:
            gw.stop()
        sim.stop()
        os.remove(config)


@pytest.mark.parametrize("path", ["kernel", "dbus"])
def test_an_adapter_not_in_use_has_no_advertisements_read(path):
    """--adapter hci0 of two: gattway reads none of hci1's advertisements, on either path."""
    from test_adapters import configuration
    config = configuration()
    gw = Gateway(["--simulate", config, "--adapter", "hci0", "--advertisements", "auto" if path == "kernel" else "dbus"])
    try:
        assert adapters(gw) == {"hci0": path, "hci1": "none"}
    finally:
        gw.stop()
        os.remove(config)
