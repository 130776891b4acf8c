"""Issue 34 against real BlueZ (the realbluez VM with three controllers, `GATTWAY_TARGET=realbluez`;
skipped elsewhere, where test_peripheral.py is its twin): gattway's peripheral registered on the
lab's hci0 (GattManager1, LEAdvertisingManager1 of Debian's bluetoothd 5.66), and gattway's own
central on hci2 — the same gattway, through REST on both sides — hears the advertisement, connects,
reads, writes (the peripheral side's event says so), and gets a notification that `PUT …/value`
sends. After `restart-bluetoothd` the application and the advertisement are registered again
without a client doing anything, and the central reads again."""
import os
import subprocess

import pytest

import targets
from conftest import ROOT, Gateway, wait_for
from test_reconnect import SSE

T = targets.current()
pytestmark = pytest.mark.skipif(T["name"] != "realbluez", reason="needs the realbluez VM (GATTWAY_TARGET=realbluez)")
LAB = os.environ.get("RB_LAB", os.path.join(os.path.dirname(ROOT), "shared", "realbluez"))
SERVICE = "5a1e0001-0000-4000-8000-00805f9b34fb"
GREETING = "5a1e0002-0000-4000-8000-00805f9b34fb"
DEFINITION = {"uuid": SERVICE, "adapter": "hci0", "characteristics": [
    {"uuid": GREETING, "properties": ["read", "write", "notify"], "value": "hello", "format": "utf8"}]}
ADVERTISEMENT = {"localName": "gattway-rb", "serviceUUIDs": [SERVICE], "adapter": "hci0"}


def lab(*command, timeout=120):
    out = subprocess.run([os.path.join(LAB, command[0]), *command[1:]], capture_output=True, text=True,
                         timeout=timeout, env={**os.environ, "RB_STATE_DIR": T["state_dir"]})
    assert out.returncode == 0, f"{command}: {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out.stdout


@pytest.fixture
def gw():
    args = [a for a in T["args"] if a not in ("--adapter", "hci0")]
    gw = Gateway(args + ["--adapter", "hci0,hci2"], env=T["env"])
    yield gw
    for device in gw.get("/v1/devices")[1]["devices"]:
        if device.get("state") == "connected":
            gw.post(f"/v1/devices/{device['id']}/disconnect", {})
    gw.stop()


def put(gw, value):
    status, body, _ = gw.request("PUT", f"/v1/peripheral/characteristics/{GREETING}/value", {"value": value, "format": "utf8"})
    assert status == 200, body
    return body


def connect_and_read(gw, address):
    """The central on hci2: hears the advertisement, connects, reads the greeting."""
    gw.discover(address, timeout=30)
    assert wait_for(lambda: gw.get(f"/v1/devices/{address}")[1].get("name") == "gattway-rb", 30), gw.get(f"/v1/devices/{address}")
    status, body, _ = gw.post(f"/v1/devices/{address}/connect", {"timeout": T["connect_timeout"], "adapter": "hci2"})
    assert status == 200 and body["adapter"] == "hci2", body
    status, body, _ = gw.get(f"/v1/devices/{address}/characteristics/{GREETING}/value?format=utf8")
    assert status == 200, body
    gw.delete("/v1/scan")
    return body["value"]


def test_gattways_peripheral_on_hci0_served_to_its_central_on_hci2_and_back_after_a_bluetoothd_restart(gw):
    address = next(a["address"] for a in gw.get("/v1/adapters")[1]["adapters"] if a["id"] == "hci0")
    status, body, _ = gw.post("/v1/peripheral/services", DEFINITION)
    assert status == 201 and body["registered"] and body["handle"], body
    status, body, _ = gw.post("/v1/peripheral/advertisements", ADVERTISEMENT)
    assert status == 201 and body["registered"], body
    events = SSE(gw, "types=notification,peripheralWrite,peripheralRead,centralConnected,subscribed&format=utf8")

    assert connect_and_read(gw, address) == "hello"
    hci2 = next(a["address"] for a in gw.get("/v1/adapters")[1]["adapters"] if a["id"] == "hci2")
    read = events.wait(lambda e: e["type"] == "peripheralRead", 10)
    assert read and read["central"] == hci2 and read["value"] == "hello", events.events
    status, body, _ = gw.request("PUT", f"/v1/devices/{address}/characteristics/{GREETING}/value",
                                 {"value": "from hci2", "format": "utf8", "withResponse": True})
    assert status == 200, body
    assert events.wait(lambda e: e["type"] == "peripheralWrite" and e["value"] == "from hci2" and e["central"] == hci2, 10), events.events
    assert gw.post(f"/v1/devices/{address}/characteristics/{GREETING}/notifications")[0] == 200
    assert events.wait(lambda e: e["type"] == "subscribed", 10), events.events
    assert put(gw, "notified")["sent"] is True
    assert events.wait(lambda e: e["type"] == "notification" and e["device"] == address and e["value"] == "notified", 10), events.events
    assert gw.post(f"/v1/devices/{address}/disconnect", {})[0] == 200

    lab("restart-bluetoothd", "2")
    # Registered again by gattway itself once bluetoothd is back.
    assert wait_for(lambda: (lambda p: p["services"][0]["registered"] and p["advertisements"][0]["registered"])(gw.get("/v1/peripheral")[1]), 60), \
        gw.get("/v1/peripheral")[1]
    assert wait_for(lambda: gw.get("/v1/state")[1]["state"] == "poweredOn", 30)
    assert connect_and_read(gw, address) == "notified"
    print(f"\n[realbluez] peripheral on hci0, central on hci2: read, write, notification; registered again after a bluetoothd restart")
