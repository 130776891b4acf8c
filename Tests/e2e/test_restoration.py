"""Issue 11: state restoration. What clients asked for (devices kept connected, REST holds, a
scan) is kept in --state-dir and restored by the next gattway, also after SIGKILL; a corrupt
state file is set aside, never fatal."""
import json
import os
import signal
import time

from conftest import Gateway, wait_for

HR = "F0:00:00:00:00:01"


def device(gw, id=HR):
    return gw.get(f"/v1/devices/{id}")[1]


def test_sigkill_and_restart_restore_the_connection_and_the_hold(tmp_path):
    state_dir = str(tmp_path / "state")
    gw = Gateway(["--simulate", "--state-dir", state_dir])
    try:
        gw.discover(HR)
        assert gw.post(f"/v1/devices/{HR}/connect", {"timeout": 10, "autoReconnect": True})[0] == 200
        assert gw.post(f"/v1/devices/{HR}/characteristics/2a37/notifications")[0] == 200
        assert gw.post("/v1/scan", {"services": ["180d"]})[0] == 200
        kept = gw.get("/v1/restoration")[1]["kept"]
        assert kept["devices"] == [HR] and kept["holds"][0]["device"] == HR and kept["scan"]["services"] == ["180d"], kept
        with open(os.path.join(state_dir, "state.json")) as f:
            assert json.load(f) == kept
        gw.proc.send_signal(signal.SIGKILL)
        gw.proc.wait(5)
    finally:
        gw.stop()

    started = time.monotonic()
    gw = Gateway(["--simulate", "--state-dir", state_dir])
    try:
        # A new simulator (BlueZ knows nothing): gattway scans for the device and connects it.
        assert wait_for(lambda: device(gw).get("state") == "connected", 10), device(gw)
        assert wait_for(lambda: gw.get(f"/v1/devices/{HR}/characteristics/2a37")[1].get("isNotifying") is True, 10 - (time.monotonic() - started))
        assert time.monotonic() - started < 10
        report = gw.get("/v1/restoration")[1]
        assert report["loaded"] is True and report["enabled"] is True, report
        results = {(i["kind"], i["target"]): i["result"] for i in report["restored"]}
        assert results[("device", HR)] == "restored", report
        assert results[("scan", "scan")] == "restored", report
        assert [r for (kind, _), r in results.items() if kind == "hold"] == ["restored"], report
        assert gw.get("/v1/scan")[1]["scanning"] is True
        assert gw.get("/v1/scan")[1]["filters"]["services"] == ["0000180d-0000-1000-8000-00805f9b34fb"]
        # Notifications flow to a new stream without any client asking BlueZ again.
        import urllib.request
        with urllib.request.urlopen(gw.base + f"/v1/events?types=notification&device={HR}&characteristic=2a37", timeout=5) as resp:
            assert any(line.startswith(b"data:") for line in (resp.readline() for _ in range(12)))
    finally:
        gw.stop()


def test_an_explicit_disconnect_and_release_are_kept_too(tmp_path):
    state_dir = str(tmp_path / "state")
    gw = Gateway(["--simulate", "--state-dir", state_dir])
    try:
        gw.discover(HR)
        assert gw.post(f"/v1/devices/{HR}/connect", {"autoReconnect": True})[0] == 200
        assert gw.post(f"/v1/devices/{HR}/characteristics/2a37/notifications")[0] == 200
        assert gw.delete(f"/v1/devices/{HR}/characteristics/2a37/notifications")[0] == 200
        assert gw.post(f"/v1/devices/{HR}/disconnect")[0] == 200
        assert gw.get("/v1/restoration")[1]["kept"] == {"version": 1, "devices": [], "holds": [], "scan": {}}
        assert gw.delete("/v1/scan")[0] == 200
        assert gw.get("/v1/restoration")[1]["kept"] == {"version": 1, "devices": [], "holds": []}
    finally:
        gw.stop()
    gw = Gateway(["--simulate", "--state-dir", state_dir])
    try:
        report = gw.get("/v1/restoration")[1]
        assert report["loaded"] is True and report["restored"] == [], report
    finally:
        gw.stop()


def test_a_corrupt_state_file_is_set_aside_and_gattway_serves(tmp_path):
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    (state_dir / "state.json").write_text('{"version": 1, "devices": [')
    gw = Gateway(["--simulate", "--state-dir", str(state_dir)])
    try:
        assert wait_for(lambda: gw.get("/v1/restoration")[1].get("problem"), 5)
        report = gw.get("/v1/restoration")[1]
        assert report["loaded"] is False and "set aside" in report["problem"], report
        assert gw.get("/v1/state")[1]["state"] == "poweredOn"
        assert any("set aside" in line for line in gw.log), gw.log
        aside = [p.name for p in state_dir.iterdir() if p.name.startswith("state.json.corrupt-")]
        assert len(aside) == 1, list(state_dir.iterdir())
        # The next change writes a good file again.
        gw.discover(HR)
        assert gw.post(f"/v1/devices/{HR}/connect", {"autoReconnect": True})[0] == 200
        assert json.loads((state_dir / "state.json").read_text())["devices"] == [HR]
    finally:
        gw.stop()


def test_state_is_off_when_asked(tmp_path):
    gw = Gateway(["--simulate", "--state-dir", "none"])
    try:
        report = gw.get("/v1/restoration")[1]
        assert report["enabled"] is False and "file" not in report, report
    finally:
        gw.stop()


def test_a_kept_scan_waits_for_bluetooth_and_a_kept_hold_for_its_device(tmp_path):
    """Issue 22: nothing kept is dropped because the adapter or the device is not ready at start.
    The adapter starts powered off: the scan is `pending`, then starts when it powers on; the
    hold is held from the start and restored when its device connects, without a client."""
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    (state_dir / "state.json").write_text(json.dumps({
        "version": 1, "devices": [HR], "holds": [{"device": HR, "characteristic": "0x0015"}], "scan": {"services": ["180d"]}}))
    config = tmp_path / "sim.json"
    config.write_text(json.dumps({"adapter": {"powered": False}, "devices": [{
        "address": HR, "name": "Sim Heart Rate", "uuids": ["180d"], "advertisingIntervalMs": 200,
        "services": [{"uuid": "180d", "handle": 20, "characteristics": [
            {"uuid": "2a37", "flags": ["notify"], "value": "0648", "generator": "heartRate", "notifyIntervalMs": 200}]}]}]}))
    gw = Gateway(["--simulate", str(config), "--state-dir", str(state_dir)])
    try:
        results = lambda: {(i["kind"], i["target"]): i["result"] for i in gw.get("/v1/restoration")[1]["restored"]}
        assert wait_for(lambda: results().get(("scan", "scan")) == "pending", 5), results()
        assert results()[("hold", f"{HR} 0x0015")] == "pending", results()
        assert gw.get("/v1/scan")[1]["scanning"] is False
        gw.simulator("SetPowered", "boolean:true")
        assert wait_for(lambda: results().get(("scan", "scan")) == "restored", 10), results()
        assert gw.get("/v1/scan")[1]["scanning"] is True
        assert wait_for(lambda: results().get(("hold", f"{HR} 0x0015")) == "restored", 20), results()
        assert results()[("device", HR)] == "restored", results()
        assert gw.get(f"/v1/devices/{HR}/characteristics/0x0015")[1]["isNotifying"] is True
    finally:
        gw.stop()
