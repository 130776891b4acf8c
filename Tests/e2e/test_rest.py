"""The REST contract of the first issue, against `gattway --simulate`."""
import time

from conftest import Gateway, wait_for

HEART_RATE = "F0:00:00:00:00:01"
SERIAL = "F0:00:00:00:00:02"
BEACON = "F0:00:00:00:00:04"
EDDYSTONE = "F0:00:00:00:00:05"
# The sensors, each with where its payload is: service data UUID or manufacturer data company id.
SENSORS = {
    "F0:00:00:00:00:06": ("serviceData", "0000fcd2-0000-1000-8000-00805f9b34fb"),  # BTHome
    "F0:00:00:00:00:07": ("serviceData", "0000fcd2-0000-1000-8000-00805f9b34fb"),  # BTHome, encrypted
    "F0:00:00:00:00:08": ("serviceData", "0000181a-0000-1000-8000-00805f9b34fb"),  # ATC1441
    "F0:00:00:00:00:09": ("serviceData", "0000181a-0000-1000-8000-00805f9b34fb"),  # PVVX
    "F0:00:00:00:00:0A": ("serviceData", "0000fe95-0000-1000-8000-00805f9b34fb"),  # MiBeacon
    "F0:00:00:00:00:0B": ("manufacturerData", "1177"),                            # Ruuvi (0x0499)
    "F0:00:00:00:00:0C": ("serviceData", "0000fe95-0000-1000-8000-00805f9b34fb"),  # MiBeacon, encrypted
    "F0:00:00:00:00:0D": ("serviceData", "0000feaa-0000-1000-8000-00805f9b34fb"),  # Eddystone-TLM
}
HR_SERVICE = "0000180d-0000-1000-8000-00805f9b34fb"


def assert_error(status, body, expected_status, name, domain="CBErrorDomain"):
    assert status == expected_status, body
    err = body["error"]
    assert err["domain"] == domain
    assert err["name"] == name
    assert isinstance(err["code"], int)
    assert err["message"]


def test_state_is_powered_on(gateway):
    status, body, headers = gateway.get("/v1/state")
    assert status == 200
    assert body["state"] == "poweredOn" and body["code"] == 5
    assert body["adapter"] == "hci0"
    assert headers["Content-Type"] == "application/json"


def test_adapters(gateway):
    status, body, _ = gateway.get("/v1/adapters")
    assert status == 200
    [adapter] = body["adapters"]
    assert adapter["id"] == "hci0" and adapter["powered"] and adapter["selected"]


def test_scan_lists_devices_with_advertisement_data_within_3s(gateway):
    started = time.monotonic()
    status, body, _ = gateway.post("/v1/scan", {})
    assert status == 200 and body["scanning"] is True

    def all_seen():
        _, devices, _ = gateway.get("/v1/devices")
        ids = {d["id"] for d in devices["devices"]}
        return devices if {HEART_RATE, SERIAL, "F0:00:00:00:00:03", BEACON, EDDYSTONE, *SENSORS} <= ids else None

    devices = wait_for(all_seen, 3.0)
    assert devices, "not all simulated devices were listed within 3 s"
    assert time.monotonic() - started < 3.0
    by_id = {d["id"]: d for d in devices["devices"]}
    hr = by_id[HEART_RATE]
    assert hr["name"] == "Sim Heart Rate"
    assert hr["state"] == "disconnected"
    assert isinstance(hr["rssi"], int) and -100 < hr["rssi"] < 0
    assert hr["lastSeen"].endswith("Z")
    adv = hr["advertisement"]
    assert HR_SERVICE in adv["serviceUUIDs"]
    assert "65535" in adv["manufacturerData"]
    assert adv["localName"] == "Sim Heart Rate"
    assert adv["txPowerLevel"] == 4
    beacon = by_id[BEACON]["advertisement"]
    assert beacon["manufacturerData"]["76"].startswith("0215")
    assert "0000feaa-0000-1000-8000-00805f9b34fb" in by_id[EDDYSTONE]["advertisement"]["serviceData"]
    for address, (kind, key) in SENSORS.items():
        assert key in by_id[address]["advertisement"][kind], by_id[address]

    status, one, _ = gateway.get("/v1/devices/" + HEART_RATE.lower())
    assert status == 200 and one["id"] == HEART_RATE

    status, body, _ = gateway.delete("/v1/scan")
    assert status == 200 and body["scanning"] is False


def test_services_filter_returns_only_matching_devices(gateway):
    status, body, _ = gateway.post("/v1/scan", {"services": ["180D"]})
    assert status == 200
    assert body["filters"]["services"] == [HR_SERVICE]
    assert wait_for(lambda: any(d["id"] == HEART_RATE for d in gateway.get("/v1/devices")[1]["devices"]), 3.0)
    # Let several advertising intervals of the other devices pass (they advertise every
    # second); none of them may appear.
    time.sleep(2.5)
    _, devices, _ = gateway.get("/v1/devices")
    assert [d["id"] for d in devices["devices"]] == [HEART_RATE]


def test_name_prefix_filter(gateway):
    gateway.post("/v1/scan", {"namePrefix": "Sim Se"})
    assert wait_for(lambda: any(d["id"] == SERIAL for d in gateway.get("/v1/devices")[1]["devices"]), 3.0)
    time.sleep(1.5)
    ids = {d["id"] for d in gateway.get("/v1/devices")[1]["devices"]}
    assert ids <= {SERIAL, "F0:00:00:00:00:03"}  # "Sim Serial", "Sim Secure"


def test_scan_timeout_stops_the_scan(gateway):
    status, body, _ = gateway.post("/v1/scan", {"timeout": 1})
    assert status == 200 and body["stopsAt"]
    assert wait_for(lambda: gateway.get("/v1/scan")[1]["scanning"] is False, 3.0)


def test_scan_status(gateway):
    _, body, _ = gateway.get("/v1/scan")
    assert body["scanning"] is False
    gateway.post("/v1/scan", {"services": ["180f"], "rssi": -90})
    _, body, _ = gateway.get("/v1/scan")
    assert body["scanning"] is True
    assert body["filters"]["rssi"] == -90


def test_bad_requests_get_clear_errors(gateway):
    assert_error(*gateway.post("/v1/scan", raw=b"{oops")[:2], 400, "invalidParameters")
    assert_error(*gateway.post("/v1/scan", {"services": ["not-a-uuid"]})[:2], 400, "invalidParameters")
    assert_error(*gateway.post("/v1/scan", {"sevrices": ["180d"]})[:2], 400, "invalidParameters")
    assert_error(*gateway.get("/v1/devices/zz:zz")[:2], 400, "invalidParameters")
    assert_error(*gateway.get("/v1/devices/AA:BB:CC:DD:EE:FF")[:2], 404, "unknownDevice")
    assert_error(*gateway.get("/v1/no/such/route")[:2], 404, "operationNotSupported")
    assert_error(*gateway.post("/v1/scan", raw=b"{" + b" " * 70000 + b"}")[:2], 413, "invalidParameters")
    status, body, headers = gateway.request("PATCH", "/v1/scan")
    assert_error(status, body, 405, "operationNotSupported")
    assert "POST" in headers["Allow"]
    # Still alive and well.
    assert gateway.get("/v1/state")[0] == 200


def test_sigterm_shuts_down_cleanly():
    gw = Gateway(["--simulate"])
    assert gw.get("/v1/state")[0] == 200
    assert gw.stop() == 0
    assert any("shutting down" in line for line in gw.log)


def test_help_describes_the_options():
    import subprocess
    from conftest import binary
    out = subprocess.run([binary("gattway"), "--help"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0
    for flag in ("--listen", "--adapter", "--simulate", "DBUS_SYSTEM_BUS_ADDRESS"):
        assert flag in out.stdout
    bad = subprocess.run([binary("gattway"), "--bogus"], capture_output=True, text=True, timeout=10)
    assert bad.returncode == 2 and "unknown argument" in bad.stderr
