"""Issue 3: connect, discover, read, write, notify, with CoreBluetooth errors, against the simulator."""
import concurrent.futures
import time

import pytest

HR = "F0:00:00:00:00:01"
SERIAL = "F0:00:00:00:00:02"
SECURE = "F0:00:00:00:00:03"
BEACON = "F0:00:00:00:00:04"
SECURE_SERVICE = "12345678-1234-5678-1234-56789abc0000"


def error_of(reply, status, domain, code, name=None):
    got_status, body, _ = reply
    assert got_status == status, body
    err = body["error"]
    assert err["domain"] == domain and err["code"] == code, err
    if name:
        assert err["name"] == name, err
    return err


@pytest.fixture
def connected(gateway):
    """The heart-rate monitor and the serial module, discovered and connected."""
    gateway.discover(HR, SERIAL, SECURE, BEACON)
    for device in (HR, SERIAL):
        status, body, _ = gateway.post(f"/v1/devices/{device}/connect", {"timeout": 10})
        assert status == 200, body
        assert body["state"] == "connected"
    return gateway


def test_connect_resolves_services_and_reports_write_lengths(connected):
    status, body, _ = connected.get(f"/v1/devices/{SERIAL}")
    assert body["state"] == "connected"
    assert body["mtu"] == 185
    assert body["maximumWriteValueLength"] == {"withResponse": 512, "withoutResponse": 182}
    status, tree, _ = connected.get(f"/v1/devices/{HR}/gatt")
    assert status == 200
    uuids = [s["uuid"][4:8] for s in tree["services"]]
    assert {"180d", "180f", "180a"} <= set(uuids)
    hrm = next(c for s in tree["services"] for c in s["characteristics"] if c["uuid"].startswith("00002a37"))
    assert hrm["properties"] == ["notify"]
    assert hrm["handle"].startswith("0x") and hrm["isNotifying"] is False
    assert any(d["uuid"].startswith("00002902") for d in hrm["descriptors"])


def test_services_with_and_without_filter(connected):
    _, all_services, _ = connected.get(f"/v1/devices/{HR}/services")
    assert len(all_services["services"]) >= 3
    _, only, _ = connected.get(f"/v1/devices/{HR}/services?uuids=180f")
    assert [s["uuid"] for s in only["services"]] == ["0000180f-0000-1000-8000-00805f9b34fb"]
    _, chars, _ = connected.get(f"/v1/devices/{HR}/services/180d/characteristics?uuids=2a37,2a38")
    assert sorted(c["uuid"][4:8] for c in chars["characteristics"]) == ["2a37", "2a38"]
    _, descs, _ = connected.get(f"/v1/devices/{HR}/characteristics/2a37/descriptors")
    assert [d["uuid"][4:8] for d in descs["descriptors"]] == ["2902"]


def test_read_battery_level_in_three_formats(connected):
    _, hexv, _ = connected.get(f"/v1/devices/{HR}/characteristics/2a19/value")
    level = int(hexv["value"], 16)
    assert 0 < level <= 100 and hexv["format"] == "hex" and hexv["length"] == 1
    _, b64, _ = connected.get(f"/v1/devices/{HR}/characteristics/2a19/value?format=base64")
    import base64
    assert abs(base64.b64decode(b64["value"])[0] - level) <= 1
    _, name, _ = connected.get(f"/v1/devices/{HR}/characteristics/2a29/value?format=utf8")
    assert name["value"] == "gattway simulator"
    _, utf, _ = connected.get(f"/v1/devices/{HR}/characteristics/2a19/value?format=utf8")
    assert utf["format"] == "utf8" and utf["length"] == 1


def test_write_with_and_without_response_and_read_back(connected):
    status, body, _ = connected.request("PUT", f"/v1/devices/{SERIAL}/characteristics/ffe1/value",
                                        {"value": "hello", "format": "utf8", "withResponse": True})
    assert status == 200 and body["written"] == 5 and body["withResponse"] is True
    assert connected.get(f"/v1/devices/{SERIAL}/characteristics/ffe1/value?format=utf8")[1]["value"] == "hello"
    status, body, _ = connected.request("PUT", f"/v1/devices/{SERIAL}/characteristics/ffe1/value",
                                        {"value": "0102ff", "withResponse": False})
    assert status == 200 and body["withResponse"] is False
    assert connected.get(f"/v1/devices/{SERIAL}/characteristics/ffe1/value")[1]["value"] == "0102ff"


def test_long_write_with_response(connected):
    value = "ab" * 300
    status, body, _ = connected.request("PUT", f"/v1/devices/{SERIAL}/characteristics/ffe1/value", {"value": value})
    assert status == 200 and body["written"] == 300
    assert connected.get(f"/v1/devices/{SERIAL}/characteristics/ffe1/value")[1]["length"] == 300


def test_write_without_response_fragments_or_refuses(connected):
    value = "cd" * 400  # 400 bytes; one packet carries 182
    status, body, _ = connected.request("PUT", f"/v1/devices/{SERIAL}/characteristics/ffe1/value",
                                        {"value": value, "withResponse": False})
    assert status == 200 and body["writes"] == 3
    error_of(connected.request("PUT", f"/v1/devices/{SERIAL}/characteristics/ffe1/value",
                               {"value": value, "withResponse": False, "fragment": False}), 400, "CBATTErrorDomain", 13)


def test_write_to_read_only_is_write_not_permitted(connected):
    error_of(connected.request("PUT", f"/v1/devices/{HR}/characteristics/2a19/value", {"value": "01"}),
             403, "CBATTErrorDomain", 3, "writeNotPermitted")


def test_read_of_write_only_is_read_not_permitted(connected):
    error_of(connected.get(f"/v1/devices/{HR}/characteristics/2a39/value"), 403, "CBATTErrorDomain", 2, "readNotPermitted")


def test_application_att_error_passes_through(connected):
    err = error_of(connected.request("PUT", f"/v1/devices/{HR}/characteristics/2a39/value", {"value": "02"}),
                   502, "CBATTErrorDomain", 0x80)
    assert "ATT error: 0x80" in err["detail"]


def test_injected_att_error_maps_through_the_table(connected):
    connected.simulator("SetFault", "string:" + HR, 'string:{"attErrors": [{"uuid": "2a38", "operation": "read", "code": "0x05"}]}')
    err = error_of(connected.get(f"/v1/devices/{HR}/characteristics/2a38/value"), 403, "CBATTErrorDomain", 5,
                   "insufficientAuthentication")
    assert err["detail"].startswith("org.bluez.Error.NotPermitted")


def test_encrypted_read_pairs_and_authenticated_read_fails(gateway):
    gateway.discover(SECURE)
    assert gateway.post(f"/v1/devices/{SECURE}/connect", {"timeout": 10})[0] == 200
    _, body, _ = gateway.get(f"/v1/devices/{SECURE}/characteristics/12345678-1234-5678-1234-56789abc0001/value?format=utf8")
    assert body["value"] == "secret-jw"
    assert gateway.get(f"/v1/devices/{SECURE}")[1]["paired"] is True
    err = error_of(gateway.get(f"/v1/devices/{SECURE}/characteristics/12345678-1234-5678-1234-56789abc0002/value"),
                   502, "CBATTErrorDomain", 0x0E, "unlikelyError")
    assert "0x0e" in err["detail"]


def test_connect_to_non_connectable_times_out_on_our_deadline(gateway):
    gateway.discover(BEACON)
    started = time.monotonic()
    error_of(gateway.post(f"/v1/devices/{BEACON}/connect", {"timeout": 2}), 504, "CBErrorDomain", 6, "connectionTimeout")
    elapsed = time.monotonic() - started
    assert 1.8 <= elapsed < 4.0, elapsed
    assert gateway.get(f"/v1/devices/{BEACON}")[1]["state"] == "disconnected"


def test_connect_failure_from_bluez_is_connection_failed(gateway):
    gateway.discover(HR)
    gateway.simulator("SetFault", "string:" + HR,
                      'string:{"connectError": {"message": "le-connection-abort-by-remote", "count": 1}}')
    err = error_of(gateway.post(f"/v1/devices/{HR}/connect", {"timeout": 5}), 502, "CBErrorDomain", 10, "connectionFailed")
    assert err["detail"] == "org.bluez.Error.Failed: le-connection-abort-by-remote"
    assert gateway.post(f"/v1/devices/{HR}/connect", {"timeout": 5})[0] == 200


def test_connection_limit(gateway):
    gateway.discover(HR)
    gateway.simulator("SetFault", "string:" + HR,
                      'string:{"connectError": {"message": "le-connection-concurrent-connection-limit", "count": 1}}')
    error_of(gateway.post(f"/v1/devices/{HR}/connect", {"timeout": 5}), 503, "CBErrorDomain", 11, "connectionLimitReached")


def test_connect_survives_missing_connected_signal(gateway):
    gateway.discover(HR)
    gateway.simulator("SetFault", "string:" + HR, 'string:{"suppressConnectedSignal": true}')
    status, body, _ = gateway.post(f"/v1/devices/{HR}/connect", {"timeout": 5})
    assert status == 200 and body["state"] == "connected"


def test_unknown_device_is_404(gateway):
    error_of(gateway.post("/v1/devices/AA:BB:CC:DD:EE:FF/connect", {"timeout": 2}), 404, "CBErrorDomain", 12, "unknownDevice")
    error_of(gateway.get("/v1/devices/AA:BB:CC:DD:EE:FF/services"), 404, "CBErrorDomain", 12, "unknownDevice")


def test_operations_on_a_disconnected_device_are_not_connected(gateway):
    gateway.discover(HR)
    error_of(gateway.get(f"/v1/devices/{HR}/services"), 409, "CBErrorDomain", 3, "notConnected")


def test_twenty_concurrent_reads_all_succeed(connected):
    connected.simulator("SetFault", "string:" + HR, 'string:{"responseDelayMs": 20}')
    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        replies = list(pool.map(lambda _: connected.get(f"/v1/devices/{HR}/characteristics/2a19/value"), range(20)))
    assert [r[0] for r in replies] == [200] * 20, [r[1] for r in replies if r[0] != 200]


def test_duplicated_uuid_is_an_error_listing_handles(connected):
    status, body, _ = connected.get(f"/v1/devices/{SERIAL}/services/180a")
    assert status == 400
    message = body["error"]["message"]
    handles = [s["handle"] for s in connected.get(f"/v1/devices/{SERIAL}/services?uuids=180a")[1]["services"]]
    assert len(handles) == 2 and all(h in message for h in handles), message
    _, one, _ = connected.get(f"/v1/devices/{SERIAL}/services/{handles[1]}/characteristics/2a29/value?format=utf8")
    assert one["value"] == "gattway simulator"


def test_notifications_on_and_off(connected):
    _, on, _ = connected.post(f"/v1/devices/{HR}/characteristics/2a37/notifications")
    assert on["isNotifying"] is True
    _, c, _ = connected.get(f"/v1/devices/{HR}/characteristics/2a37")
    assert c["isNotifying"] is True
    _, off, _ = connected.delete(f"/v1/devices/{HR}/characteristics/2a37/notifications")
    assert off["isNotifying"] is False
    error_of(connected.post(f"/v1/devices/{HR}/characteristics/2a38/notifications"), 502, "CBATTErrorDomain", 6)


def test_link_loss_during_operation_is_peripheral_disconnected(connected):
    connected.simulator("SetFault", "string:" + HR, 'string:{"responseDelayMs": 3000}')
    connected.simulator("ResetCounters")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(lambda: connected.get(f"/v1/devices/{HR}/characteristics/2a19/value"))
        from conftest import wait_for
        assert wait_for(lambda: connected.call_count("ReadValue", "") >= 1, 5)  # the read waits in the simulator
        connected.simulator("DropLink", "string:" + HR)
        reply = pending.result(10)
    error_of(reply, 502, "CBErrorDomain", 7, "peripheralDisconnected")


def test_disconnect(connected):
    status, body, _ = connected.post(f"/v1/devices/{HR}/disconnect")
    assert status == 200 and body["state"] == "disconnected"
    error_of(connected.get(f"/v1/devices/{HR}/characteristics/2a19/value"), 409, "CBErrorDomain", 3, "notConnected")


def test_devices_connect_at_the_same_time(gateway):
    gateway.discover(HR, SERIAL, SECURE)
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        replies = list(pool.map(lambda d: gateway.post(f"/v1/devices/{d}/connect", {"timeout": 10}), (HR, SERIAL, SECURE)))
    assert [r[0] for r in replies] == [200, 200, 200], [r[1] for r in replies]
    for device, services in ((HR, {"1801", "180d", "180f", "180a"}), (SERIAL, {"1801", "ffe0", "180a"}), (SECURE, {"1801", "5678"})):
        _, tree, _ = gateway.get(f"/v1/devices/{device}/gatt")
        assert {s["uuid"][4:8] for s in tree["services"]} == services
