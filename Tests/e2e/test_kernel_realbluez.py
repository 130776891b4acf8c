"""Issue 36 against the real kernel (the realbluez VM, `GATTWAY_TARGET=realbluez`; skipped on the
simulator, where test_kernel_advertisements.py is its twin): gattway runs inside the guest, as
root, so that it reads advertisements from the guest kernel's Bluetooth management socket, while
btmon records the controller's LE Advertising Reports and the management events the kernel sent
each socket (lab/kernel_view.py gathers, this test judges):

* the path is said: GET /v1/adapters says "kernel" for hci0, the log says from where;
* every Device Found the kernel sent gattway's socket carries the controller's bytes: an
  advertisement's data, with its scan response's after it as the kernel merges them;
* every raw advertisement aioesphomeapi gets of RB-Periph (and of a BTHome sensor advertising
  on hci2) is byte for byte one of those frames' AD part, flags included, and together they
  carry every AD structure the controller reported;
* REST and the sensors view agree with BlueZ's own properties of the same devices, and with the
  bytes; gattway's frame counters match btmon's count of the frames its socket was sent, none bad;
  BlueZ's Device1 signals are not read;
* a link another client of BlueZ makes (busctl), twice, shows in REST up and down each time
  (bluetoothd does not signal it up; the kernel's Device Connected and ServicesResolved tell it);
* passive scanning through gattway (bluetoothd 5.66 without --experimental has no
  AdvertisementMonitorManager1): a REST scan with `active: false`, then the proxy asked for
  passive mode as Home Assistant asks, each with no watch running: gattway adds an advertisement
  monitor on its management socket (the kernel's Command Complete to it, a handle), the
  controller is told to scan passively (LE Set Scan Parameters type 0) and never actively in
  those windows, it reports RB-Periph's ADV_IND alone (no scan request, no scan response), the
  kernel sends gattway Advertisement Monitor Device Found (handle 0) with those bytes, REST says
  `mode: passive`, the proxy's state says PASSIVE (configured ACTIVE) and every raw advertisement
  it sent then is the advertisement without its scan response; no monitor is left once gattway
  stopped. The lab's own probe (a monitor on a socket of its own, gattway gone) is kept as the
  kernel's fact."""
import json
import os
import shutil
import subprocess
import sys

import pytest

import targets
from conftest import ROOT, binary
from lab import btsnoop
from test_reliability_realbluez import LAB, forget_pairings

T = targets.current()
pytestmark = pytest.mark.skipif(T["name"] != "realbluez", reason="needs the realbluez VM (GATTWAY_TARGET=realbluez)")
PERIPH = T["heart_rate"]
SCRIPTS = ("kernel_view.py", "btsnoop.py", "bthome_advert.py", "advertising.py")
FLAGS = 0x01


def view():
    """Runs lab/kernel_view.py in the guest; its JSON and btmon's records. The scripts go through
    the state dir (the guest's /run/realbluez, mounted uncached): the guest's view of the host's
    files is cached, and may hold an older copy of a file changed since the VM booted."""
    copies = os.path.join(T["state_dir"], "kernel-view-lab")
    os.makedirs(copies, exist_ok=True)
    for script in SCRIPTS:
        shutil.copy(os.path.join(ROOT, "Tests", "e2e", "lab", script), copies)
    out = subprocess.run([os.path.join(LAB, "guest-exec"), f"{sys.executable} /run/realbluez/kernel-view-lab/kernel_view.py"
                          f" --gattway {binary('gattway')} --periph {PERIPH} --out /run/realbluez"],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "RB_STATE_DIR": T["state_dir"], "RB_EXEC_TIMEOUT": "280"})
    path = os.path.join(T["state_dir"], "kernel-view.json")
    assert os.path.exists(path), f"kernel_view.py wrote nothing (exit {out.returncode}):\n{out.stdout}\n{out.stderr}"
    with open(path) as f:
        result = json.load(f)
    assert "error" not in result, result["error"] + "\n" + "\n".join(result.get("gattway_log_tail", []))
    assert out.returncode == 0, out.stdout + out.stderr
    return result, btsnoop.read(os.path.join(T["state_dir"], "kernel-view.snoop"))


def controller_combinations(reports):
    """What the kernel may pass on from these reports of one device: each advertisement's data
    alone, each scan response's alone, or the two merged (advertisement first)."""
    adverts = {btsnoop.significant(r["data"]) for r in reports if r["pdu"] != "SCAN_RSP"}
    responses = {btsnoop.significant(r["data"]) for r in reports if r["pdu"] == "SCAN_RSP"}
    return adverts | responses | {a + r for a in adverts for r in responses}


def structures(datas):
    return {s for d in datas for s in btsnoop.ad_structures(d)}


def test_gattway_in_the_guest_passes_on_the_kernels_advertisements_byte_for_byte():
    forget_pairings()
    result, recs = view()

    # The path in use, said twice.
    hci0 = next(a for a in result["adapters"]["adapters"] if a["id"] == "hci0")
    assert hci0["advertisements"] == "kernel", result["adapters"]
    assert any("advertisements: from the kernel's management socket" in line for line in result["advertisements_log"]), \
        result["advertisements_log"]

    # gattway's management socket, as btmon saw the kernel open it, and the frames it was sent.
    probe = result["passive"]["monitor_probe"]
    others = btsnoop.frames_to_others(recs, known=("bluetoothd", "btmgmt", probe["comm"]))
    ours = {socket for socket, _, _ in others}
    assert len(ours) == 1, btsnoop.control_sockets(recs)
    (cookie, comm), = ours
    frames = [f for _, f, _ in others]
    found = [{**btsnoop.device_found(f), "t": t} for _, f, t in others if f[:2] == b"\x12\x00"]
    reports = btsnoop.le_reports(recs, 0)
    # The sensor's addresses: those whose reports carry its service data (it broadcasts from
    # non-resolvable private addresses).
    marker = bytes.fromhex("16d2fc" + result["sensor_data"])
    sensors = result["sensors_heard"]
    reported = {r["address"] for r in reports if marker in r["data"]}
    assert sensors and set(sensors) <= reported, (sensors, reported)
    devices = [PERIPH, *sensors]
    heard_by = {a: [r for r in reports if r["address"] == a] for a in devices}
    framed = {a: [d for d in found if d["address"] == a and d["controller"] == 0] for a in devices}
    esphome = {a: [r for r in result["esphome"]["reports"] if r["address"] == a] for a in devices}

    # The subscription's window, on the guest's wall clock as btmon's records: from when the proxy
    # listened (it tells the scanner state then) to the end, less its batching (100 ms) and the way.
    window = result["esphome"]
    inner = (window["listening_at"], window["ended_at"] - 0.3)
    outer = (window["subscribed_at"], window["ended_at"])
    compared = in_window = 0
    for a in devices:
        assert heard_by[a], f"the controller reported nothing of {a}"
        assert framed[a], f"the kernel sent gattway no Device Found of {a}"
        assert esphome[a], f"aioesphomeapi got no advertisement of {a}"
        # The kernel's frames carry the controller's bytes, merged as the kernel merges them.
        possible = controller_combinations(heard_by[a])
        strangers = [d["data"].hex() for d in framed[a] if d["data"] not in possible]
        assert not strangers, (a, strangers[:3], [p.hex() for p in possible])
        # The proxy sends each as its frame carried it: byte for byte, the address type too.
        sent = {d["data"] for d in framed[a]}
        rebuilt = [r["data"] for r in esphome[a] if bytes.fromhex(r["data"]) not in sent]
        assert not rebuilt, (a, rebuilt[:3], [s.hex() for s in sent])
        assert {r["address_type"] for r in esphome[a]} == {heard_by[a][0]["address_type"]}, esphome[a][:2]
        # Each one, duplicates included: what the kernel sent while the proxy listened, no more.
        sent_inside = sum(inner[0] <= d["t"] <= inner[1] for d in framed[a])
        sent_around = sum(outer[0] <= d["t"] <= outer[1] for d in framed[a])
        assert sent_inside <= len(esphome[a]) <= sent_around, (a, sent_inside, len(esphome[a]), sent_around)
        in_window += sent_inside
        # Together they carry every AD structure the controller reported, the flags too.
        seen = structures(bytes.fromhex(r["data"]) for r in esphome[a])
        controller = structures(btsnoop.significant(r["data"]) for r in heard_by[a])
        assert controller <= seen, (a, controller - seen)
        compared += sum(len(r["data"]) // 2 for r in esphome[a])
    periph_structures = structures(btsnoop.significant(r["data"]) for r in heard_by[PERIPH])
    assert any(t == FLAGS for t, _ in periph_structures), periph_structures
    # RB-Periph is scannable and the scan active: the kernel merged its scan responses in.
    merged = [d for d in framed[PERIPH] if d["data"] not in {btsnoop.significant(r["data"]) for r in heard_by[PERIPH]}]

    # REST and the sensors view agree with BlueZ's properties and with the bytes.
    bluez = result["bluez"]
    status, device = result["rest"]["device"]
    assert status == 200, device
    periph_bluez = bluez[PERIPH]
    ad = dict(periph_structures)
    assert device["name"] == periph_bluez["Name"] == ad.get(0x09, ad.get(0x08, b"")).decode(), (device, periph_bluez)
    assert {u.lower() for u in device["advertisement"]["serviceUUIDs"]} == set(periph_bluez["UUIDs"]), (device, periph_bluez)
    # Connectable, as its ADV_IND said (the kernel's Not Connectable flag is clear), the sensor not.
    assert device["advertisement"].get("isConnectable") is True, device
    assert {r["pdu"] for r in heard_by[PERIPH]} == {"ADV_IND", "SCAN_RSP"}, heard_by[PERIPH][:2]
    assert all(d["flags"] & 0x4 == 0 for d in framed[PERIPH]) and all(d["flags"] & 0x4 for a in sensors for d in framed[a])
    advertised = {f"0000{int.from_bytes(v[i:i + 2], 'little'):04x}-0000-1000-8000-00805f9b34fb"
                  for t, v in periph_structures if t in (0x02, 0x03) for i in range(0, len(v), 2)}
    assert advertised == set(periph_bluez["UUIDs"]), (advertised, periph_bluez)
    assert {k: v.lower() for k, v in device["advertisement"]["manufacturerData"].items()} == periph_bluez["ManufacturerData"], \
        (device, periph_bluez)
    assert {k: bytes.fromhex(v) for k, v in periph_bluez["ManufacturerData"].items()} == \
        {str(int.from_bytes(v[:2], "little")): v[2:] for t, v in periph_structures if t == 0xFF}, periph_bluez
    fcd2 = "0000fcd2-0000-1000-8000-00805f9b34fb"
    for sensor in sensors:
        assert bluez[sensor]["ServiceData"] == {fcd2: result["sensor_data"]}, bluez[sensor]
        status, reading = result["rest"]["sensor"][sensor]
        assert status == 200, reading
        measurements = {k: v["value"] for k, v in reading["reading"]["measurements"].items()}
        # lab/kernel_view.py's BTHome data: battery 93 %, temperature 25.06 °C.
        assert reading["reading"]["format"] == "bthome" and measurements.get("battery") == 93 \
            and abs(measurements.get("temperature", 0) - 25.06) < 1e-6, reading
    status, watch = result["rest"]["watch"]
    assert status == 200 and watch["watching"] and watch["devices"] >= 2, watch

    # gattway's counters against btmon's record of what its socket was sent.
    m = result["metrics"]
    delivered = m['gattway_management_frames_total{outcome="delivered"}']
    device_events = [f for _, f, t in others if f[:2] in (b"\x12\x00", b"\x0b\x00", b"\x0c\x00") and f[2:4] == b"\x00\x00"
                     and t <= result["metrics_at"]]
    assert result["discovery_ended"], "BlueZ's discovery did not end after DELETE /v1/watch"
    assert delivered == len(device_events), (m, len(device_events))
    assert m['gattway_management_frames_total{outcome="bad"}'] == 0, m
    assert m['gattway_dbus_properties_signals_total{interface="device"}'] == 0, m

    # Another client's links, twice: shown up and down, though bluetoothd does not signal them up.
    links = result["other_client"]
    assert all(r["connect"]["rc"] == 0 and r["disconnect"]["rc"] == 0 for r in links), links
    assert [(r["shown_connected"], r["shown_disconnected"]) for r in links] == [(True, True)] * 2, links
    ups = [f for f, t in ((f, t) for _, f, t in others)
           if f[:4] == b"\x0b\x00\x00\x00" and result["metrics_at"] < t < result["passive_rest"]["started_at"]]
    assert len(ups) == 2, [f.hex() for f in ups]

    # The proxy's scanner, not asked for a mode, scanned actively (so did the controller).
    states = result["esphome"]["scanner_states"]
    assert states and all((s["mode"], s["configured_mode"]) == ("ACTIVE", "ACTIVE") for s in states), states
    settings = btsnoop.scan_settings(recs, 0)
    # While gattway discovered (later, a Connect scans passively for its device).
    with_gattway = [(k, v) for k, v, t in settings if t < result["metrics_at"]]
    assert ("parameters", "active") in with_gattway and ("parameters", "passive") not in with_gattway, settings

    # Passive scanning through gattway: a REST scan, then the proxy asked by aioesphomeapi.
    adv_only = {btsnoop.significant(r["data"]) for r in heard_by[PERIPH] if r["pdu"] == "ADV_IND"}
    periph_wire = bytes.fromhex(PERIPH.replace(":", ""))[::-1]

    def passive_window(start, end, what):
        """What btmon saw in [start, end]: only passive scan parameters, RB-Periph's ADV_IND alone,
        and Advertisement Monitor Device Found frames (handle 0) of it to gattway's socket."""
        set_then = [(k, v) for k, v, t in settings if start <= t <= end]
        assert ("parameters", "active") not in set_then, (what, set_then)
        # The parameters the controller scans with then: the last set before the window's end.
        last = [v for k, v, t in settings if k == "parameters" and t <= end]
        assert last and last[-1] == "passive", (what, settings)
        heard = [r for r in btsnoop.le_reports(recs, 0) if r["address"] == PERIPH and start <= r["t"] <= end]
        assert heard and {r["pdu"] for r in heard} == {"ADV_IND"}, (what, heard[:3])
        monitored = [f for _, f, t in others if f[:4] == b"\x2f\x00\x00\x00" and start <= t <= end and f[8:14] == periph_wire]
        assert monitored and all(f[6:8] == b"\x00\x00" and f[22:] in adv_only for f in monitored), (what, [f.hex() for f in monitored[:3]])
        found_then = [f for _, f, t in others if f[:2] == b"\x12\x00" and start <= t <= end]
        assert not found_then, (what, [f.hex() for f in found_then[:3]])
        return len(heard), len(monitored), sum(k == "parameters" and v == "passive" for k, v in set_then)

    rest = result["passive_rest"]
    status, answer = rest["answer"]
    assert status == 200 and answer["mode"] == "passive" and answer["filters"]["active"] is False, answer
    assert rest["state"][1]["mode"] == "passive", rest["state"]
    # RB-Periph, removed from BlueZ before, heard only passively: listed by gattway, its name
    # (in the scan response) unknown, and bluetoothd made no object of it.
    assert rest["removed"]["rc"] == 0, rest["removed"]
    status, heard_only = rest["device"]
    assert status == 200 and heard_only.get("name") is None and "stale" not in heard_only, heard_only
    assert not rest["bluez_object"], "bluetoothd made a device of a passive scan's report"
    # Connected all the same (a short discovery lets BlueZ learn it), then the scan is passive again.
    status, linked, _ = rest["connect"]
    assert status == 200 and linked["state"] == "connected", linked
    assert rest["read"][0] == 200 and rest["read"][1]["value"] == "RealBlueZ Emulated Devices", rest["read"]
    assert rest["disconnect"][0] == 200 and rest["passive_again"], (rest["disconnect"], rest["passive_again"])
    assert rest["stopped"][0] == 200 and "mode" not in rest["stopped"][1], rest["stopped"]
    added = [f for _, f, t in others if f[:2] == b"\x01\x00" and f[6:9] == b"\x52\x00\x00" and t >= rest["started_at"]]
    assert added, "the kernel did not complete gattway's Add Advertisement Patterns Monitor"
    assert any("advertisement monitor" in line and "added on hci0" in line for line in result["passive_log"]), result["passive_log"]
    # The monitor added, the kernel sets the controller to scan passively (LE Set Scan
    # Parameters type 0), and not actively, until the scan stops; its first second is the switch.
    rest_set = [(v, round(t - rest["started_at"], 3)) for k, v, t in settings
                if k == "parameters" and rest["started_at"] <= t <= rest["ended_at"]]
    assert [v for v, _ in rest_set] and {v for v, _ in rest_set} == {"passive"}, rest_set
    rest_heard = passive_window(rest["started_at"] + 1.0, rest["ended_at"], "REST passive scan")
    proxy = result["esphome_passive"]
    assert proxy["answered"], proxy["states"]
    asked = [s for s in proxy["states"] if proxy["asked_at"] <= s["t"] <= proxy["ended_at"]]
    assert asked and asked[-1]["mode"] == "PASSIVE" and all(s["configured_mode"] == "ACTIVE" for s in proxy["states"]), proxy["states"]
    status, watch = proxy["watch"]
    assert status == 200 and watch["mode"] == "passive" and watch["filters"] == {"active": False}, watch
    # Asked for passive, the proxy's watch stops BlueZ's discovery: the kernel turns to the monitor.
    proxy_set = [(v, round(t - proxy["asked_at"], 3)) for k, v, t in settings
                 if k == "parameters" and proxy["asked_at"] <= t <= proxy["ended_at"]]
    assert proxy_set and {v for v, _ in proxy_set} == {"passive"}, proxy_set
    proxy_heard = passive_window(proxy["started_at"] + 0.5, proxy["ended_at"], "proxy in passive mode")
    sent_passively = [bytes.fromhex(r["data"]) for r in proxy["reports"] if r["phase"] == "passive"]
    assert sent_passively and set(sent_passively) <= adv_only, ([d.hex() for d in sent_passively[:3]], [a.hex() for a in adv_only])
    assert not any(t == 0x09 for d in sent_passively for t, _ in btsnoop.ad_structures(d)), "a name, which only the scan response has"
    passive = result["passive"]
    left = passive["btmgmt_monitor_features"]["output"]
    assert "Handles list with 0 item" in left or "0 items" in left, left
    monitor = "org.bluez.AdvertisementMonitorManager1" in passive["adapter_interfaces"]
    # The kernel's own passive scan: a monitor added on a management socket, gattway gone.
    assert probe.get("handle") is not None, probe
    during = (probe["started_at"], probe["stopped_at"])
    assert ("parameters", "passive") in [(k, v) for k, v, t in settings if during[0] <= t <= during[1]], settings
    monitored = [bytes.fromhex(f) for f in probe["events"].get("0x002f", [])]
    periph_monitored = [f for f in monitored if f[8:14] == bytes.fromhex(PERIPH.replace(":", ""))[::-1]]
    heard_passively = [r for r in reports if r["address"] == PERIPH and during[0] <= r["t"] <= during[1]]
    assert periph_monitored and heard_passively, (probe, heard_passively)
    # No scan request, so no scan response: the advertisement alone.
    assert {r["pdu"] for r in heard_passively} == {"ADV_IND"}, heard_passively
    adv_data = {btsnoop.significant(r["data"]) for r in heard_passively}
    assert all(f[6:8] == b"\x00\x00" and f[22:] in adv_data for f in periph_monitored), [f.hex() for f in periph_monitored]

    print(f"[realbluez] kernel path in the guest: {len(reports)} LE reports on hci0"
          f" ({sum(r['pdu'] == 'SCAN_RSP' for r in reports)} scan responses, "
          f"{'extended' if any(r['extended'] for r in reports) else 'legacy'}), {len(found)} Device Found frames to gattway's"
          f" socket ({comm}), {len(frames)} frames in all; RB-Periph: {len(esphome[PERIPH])} raw advertisements"
          f" through the proxy, {len(framed[PERIPH])} frames ({len(merged)} with the scan response merged),"
          f" AD types {sorted(f'0x{t:02x}' for t, _ in periph_structures)}; BTHome sensor at {', '.join(sensors)}:"
          f" {sum(len(esphome[a]) for a in sensors)} reports, read {measurements}; {compared} bytes compared, all equal;"
          f" {sum(len(esphome[a]) for a in devices)} reports through the proxy for {in_window} frames sent well inside its window; counters: delivered {delivered:.0f},"
          f" bad 0, Device1 signals read 0; another client's link up and down twice, shown each time;"
          f" passive REST scan: LE Set Scan Parameters {rest_set} (s after the POST), none active; then {rest_heard[0]} ADV_IND of"
          f" RB-Periph, no SCAN_RSP, {rest_heard[1]} Advertisement Monitor Device Found (handle 0) to gattway; RB-Periph removed from"
          f" BlueZ first: listed without its name, no BlueZ object, connected through REST ({rest['connect'][2]:.0f} ms), passive again after;"
          f" proxy asked passive:"
          f" LE Set Scan Parameters {proxy_set} (s after the request), none active; {len(sent_passively)} raw advertisements"
          f" without scan response ({proxy_heard[1]} monitor frames, {proxy_heard[0]} ADV_IND);"
          f" AdvertisementMonitorManager1 on hci0: {'yes' if monitor else 'no'}; the kernel's monitor (0x0052): passive"
          f" scan, {len(monitored)} Advertisement Monitor Device Found in {during[1] - during[0]:.1f} s"
          f" ({len(periph_monitored)} of RB-Periph, handle 0, no scan response)")
    print("[realbluez] passive-scanning facts: " + json.dumps({
        "bluetoothd": passive["bluetoothd_cmdline"], "version": passive["bluetoothd_version"], "kernel": passive["kernel"],
        "interfaces": passive["adapter_interfaces"]}))
    monitors = [line.strip() for line in passive["btmgmt_commands"]["output"].splitlines() if "Monitor" in line]
    print(f"[realbluez] the kernel's monitor commands (btmgmt commands): {monitors}; btmgmt monitor.features:"
          f" {' / '.join(line.strip() for line in passive['btmgmt_monitor_features']['output'].splitlines())};"
          f" btmgmt expinfo: {' / '.join(line.strip() for line in passive['btmgmt_exp_info']['output'].splitlines())}")
