#!/usr/bin/env python3
"""
bleak faithfulness test for the gattway BlueZ simulator.

Runs bleak (unchanged, public API only, default backend arguments) against
whatever owns org.bluez on the bus named by DBUS_SYSTEM_BUS_ADDRESS.

    DBUS_SYSTEM_BUS_ADDRESS=unix:path=/tmp/gattway-bus.sock \
        python3 bleak_faithfulness.py [options]

Every step prints exactly one line, "PASS <step>" or "FAIL <step>: <reason>",
and the process exits 0 only if every step passed (1 otherwise, 2 on a hard
watchdog timeout). Every step is bounded by asyncio.wait_for, and a SIGALRM
watchdog kills the process if the event loop itself gets stuck, so the script
never hangs.

Device addresses and UUIDs are options because the simulator defines them.
UUIDs may be given in 16-bit ("2A37"), 32-bit or 128-bit form. With --adapter
hciN, bleak scans and connects through that adapter (its ``bluez`` argument),
and the devices it finds must be that adapter's.
"""

import argparse
import asyncio
import os
import signal
import sys
import time
import traceback

try:
    from bleak import BleakClient, BleakScanner
    from bleak.uuids import normalize_uuid_str
except Exception as e:  # pragma: no cover
    print(f"FAIL import-bleak: {e!r}")
    sys.exit(1)


RESULTS = []  # (step, ok, reason)


def report(step, ok, reason=""):
    RESULTS.append((step, ok, reason))
    if ok:
        print(f"PASS {step}" + (f" ({reason})" if reason else ""), flush=True)
    else:
        print(f"FAIL {step}: {reason}", flush=True)


def describe(exc):
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    text = str(exc) or ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def step(name, coro_fn, timeout, verbose=False):
    """Run one step with a timeout. Returns (ok, value)."""
    t0 = time.monotonic()
    try:
        value = await asyncio.wait_for(coro_fn(), timeout)
    except AssertionError as e:
        report(name, False, str(e) or "assertion failed")
        return False, None
    except BaseException as e:  # noqa: BLE001 - we report everything
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        if verbose:
            traceback.print_exc()
        report(name, False, describe(e))
        return False, None
    detail = value if isinstance(value, str) else ""
    dt = time.monotonic() - t0
    report(name, True, (detail + "; " if detail else "") + f"{dt:.2f}s")
    return True, value


def skip(name, why):
    report(name, False, f"skipped ({why})")


def norm(u):
    return normalize_uuid_str(u)


async def run(args):
    hr_addr = args.hr_address.upper()
    ser_addr = args.serial_address.upper()
    hr_service = norm(args.hr_service)
    hr_char = norm(args.hr_char)
    bat_service = norm(args.battery_service)
    bat_char = norm(args.battery_char)
    ser_service = norm(args.serial_service)
    ser_char = norm(args.serial_char)
    T = args.step_timeout
    V = args.verbose
    # bleak's own arguments unless an adapter is named.
    kw = {"bluez": {"adapter": args.adapter}} if args.adapter else {}

    def check_adapter(dev):
        path = dev.details.get("path", "") if isinstance(dev.details, dict) else ""
        if args.adapter:
            assert path.startswith(f"/org/bluez/{args.adapter}/"), f"{dev.address}: path {path!r} is not under {args.adapter}"
        return path

    # ------------------------------------------------------------------ scan
    found = {}

    async def do_scan():
        devs = await BleakScanner.discover(timeout=args.scan_time, return_adv=True, **kw)
        for addr, (dev, adv) in devs.items():
            found[addr.upper()] = (dev, adv)
        missing = [a for a in (hr_addr, ser_addr) if a not in found]
        assert not missing, f"not discovered: {missing}; discovered: {sorted(found)}"
        dev, adv = found[hr_addr]
        check_adapter(dev)
        assert dev.name, f"{hr_addr}: BLEDevice.name is empty (Alias missing or equal to address?)"
        uuids = [u.lower() for u in adv.service_uuids]
        assert hr_service in uuids, f"{hr_addr}: advertised UUIDs {uuids} lack {hr_service}"
        assert -127 < adv.rssi < 20, f"{hr_addr}: implausible RSSI {adv.rssi} (RSSI property missing?)"
        return f"{len(found)} device(s); {hr_addr} name={dev.name!r} rssi={adv.rssi} uuids={uuids}"

    ok_scan, _ = await step("scan", do_scan, args.scan_time + T, V)

    hr_dev = None

    async def do_find():
        nonlocal hr_dev
        hr_dev = await BleakScanner.find_device_by_address(hr_addr, timeout=args.find_timeout, **kw)
        assert hr_dev is not None, f"find_device_by_address({hr_addr}) returned None"
        assert hr_dev.address.upper() == hr_addr, f"wrong address {hr_dev.address}"
        return f"path={check_adapter(hr_dev) or '?'}"

    await step("find_device_by_address", do_find, args.find_timeout + T, V)

    # ------------------------------------------------- heart-rate device
    # Connect with the BLEDevice from find_device_by_address when we have it
    # (the usual bleak pattern); fall back to the address string.
    hr_disconnected = asyncio.Event()
    hr_client = BleakClient(
        hr_dev if hr_dev is not None else hr_addr,
        disconnected_callback=lambda c: hr_disconnected.set(),
        timeout=args.connect_timeout,
        **kw,
    )

    async def do_connect_hr():
        await hr_client.connect()
        assert hr_client.is_connected, "is_connected is False after connect()"
        return f"connected to {hr_addr}"

    ok_conn_hr, _ = await step("connect", do_connect_hr, args.connect_timeout + T, V)

    if ok_conn_hr:

        async def do_services_hr():
            svcs = hr_client.services
            have = sorted(s.uuid for s in svcs)
            for want in (hr_service, bat_service):
                assert svcs.get_service(want) is not None, f"service {want} missing; have {have}"
            c = svcs.get_characteristic(hr_char)
            assert c is not None, f"characteristic {hr_char} missing"
            assert "notify" in c.properties or "indicate" in c.properties, \
                f"{hr_char} properties {c.properties} lack notify/indicate"
            assert c.service_uuid == hr_service, f"{hr_char} is in {c.service_uuid}, expected {hr_service}"
            b = svcs.get_characteristic(bat_char)
            assert b is not None, f"characteristic {bat_char} missing"
            assert "read" in b.properties, f"{bat_char} properties {b.properties} lack read"
            n_chars = len(svcs.characteristics)
            n_desc = len(svcs.descriptors)
            return f"services={have}; {n_chars} chars, {n_desc} descriptors"

        await step("list services", do_services_hr, T, V)

        async def do_read_battery():
            data = await hr_client.read_gatt_char(bat_char)
            assert len(data) == 1, f"battery level should be 1 byte, got {data.hex()}"
            assert 0 <= data[0] <= 100, f"battery level {data[0]} out of range"
            return f"battery={data[0]}%"

        await step("read battery level", do_read_battery, T, V)

        hr_values = []
        hr_event = asyncio.Event()

        def on_hr(sender, data):
            hr_values.append(bytes(data))
            if len(hr_values) >= args.min_notifications:
                hr_event.set()

        async def do_hr_notify():
            await hr_client.start_notify(hr_char, on_hr)
            await hr_event.wait()
            for v in hr_values:
                assert len(v) >= 2, f"heart-rate measurement too short: {v.hex()}"
            await hr_client.stop_notify(hr_char)
            return f"{len(hr_values)} notifications, first={hr_values[0].hex()}"

        await step("start_notify heart-rate (>= %d notifications)" % args.min_notifications,
                   do_hr_notify, args.notify_timeout + T, V)

        async def do_disconnect_hr():
            await hr_client.disconnect()
            assert not hr_client.is_connected, "is_connected still True after disconnect()"
            await asyncio.wait_for(hr_disconnected.wait(), 2.0)
            return "disconnected_callback fired"

        await step("disconnect heart-rate", do_disconnect_hr, T, V)
    else:
        for n in ("list services", "read battery level", "start_notify heart-rate",
                  "disconnect heart-rate"):
            skip(n, "connect failed")

    # ----------------------------------------------------- serial device
    # Connect by address string: exercises bleak's internal scan+connect path.
    ser_client = BleakClient(args.serial_address, timeout=args.connect_timeout, **kw)

    async def do_connect_ser():
        await ser_client.connect()
        assert ser_client.is_connected, "is_connected is False after connect()"
        return f"connected to {ser_addr} (by address string)"

    ok_conn_ser, _ = await step("connect serial", do_connect_ser, args.connect_timeout + T, V)

    if ok_conn_ser:

        async def do_services_ser():
            svcs = ser_client.services
            have = sorted(s.uuid for s in svcs)
            assert svcs.get_service(ser_service) is not None, f"service {ser_service} missing; have {have}"
            c = svcs.get_characteristic(ser_char)
            assert c is not None, f"characteristic {ser_char} missing"
            for p in ("read", "write", "write-without-response", "notify"):
                assert p in c.properties, f"{ser_char} properties {c.properties} lack {p}"
            mwr = c.max_write_without_response_size
            assert mwr >= 20, f"max_write_without_response_size={mwr}"
            return f"services={have}; {ser_char} props={c.properties}; max_wwr={mwr}"

        await step("list services serial", do_services_ser, T, V)

        payload1 = b"gattway-write-req-" + os.urandom(2).hex().encode()

        async def do_write_req():
            await ser_client.write_gatt_char(ser_char, payload1, response=True)
            back = await ser_client.read_gatt_char(ser_char)
            assert bytes(back) == payload1, f"read back {bytes(back)!r}, wrote {payload1!r}"
            return f"wrote+read {len(payload1)} bytes"

        await step("write with response + read back", do_write_req, T, V)

        payload2 = b"gattway-write-cmd-" + os.urandom(2).hex().encode()

        async def do_write_cmd():
            await ser_client.write_gatt_char(ser_char, payload2, response=False)
            if args.no_wwr_readback:
                return "sent (read-back disabled)"
            # a command has no ack; poll until the peripheral has applied it
            while True:
                back = bytes(await ser_client.read_gatt_char(ser_char))
                if back == payload2:
                    return "sent + read back"
                await asyncio.sleep(0.05)

        await step("write without response", do_write_cmd, T, V)

        echoes = []
        echo_cond = asyncio.Condition()

        async def note(data):
            async with echo_cond:
                echoes.append(bytes(data))
                echo_cond.notify_all()

        def on_echo(sender, data):
            asyncio.get_running_loop().create_task(note(data))

        async def wait_echo(expected):
            async with echo_cond:
                await echo_cond.wait_for(lambda: expected in echoes)

        async def do_echo():
            await ser_client.start_notify(ser_char, on_echo)
            p3 = b"echo-req-" + os.urandom(2).hex().encode()
            await ser_client.write_gatt_char(ser_char, p3, response=True)
            await wait_echo(p3)
            p4 = b"echo-cmd-" + os.urandom(2).hex().encode()
            await ser_client.write_gatt_char(ser_char, p4, response=False)
            await wait_echo(p4)
            await ser_client.stop_notify(ser_char)
            return f"echoed request+command writes ({len(echoes)} notifications)"

        await step("start_notify serial echo", do_echo, args.notify_timeout + T, V)

        async def do_disconnect_ser():
            await ser_client.disconnect()
            assert not ser_client.is_connected, "is_connected still True after disconnect()"
            return ""

        await step("disconnect", do_disconnect_ser, T, V)
    else:
        for n in ("list services serial", "write with response + read back",
                  "write without response", "start_notify serial echo", "disconnect"):
            skip(n, "connect serial failed")

    # best-effort cleanup, never fatal, never hangs
    for c in (hr_client, ser_client):
        try:
            if c.is_connected:
                await asyncio.wait_for(c.disconnect(), 5)
        except BaseException:
            pass


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hr-address", default="F0:00:00:00:00:01")
    ap.add_argument("--hr-service", default="180D")
    ap.add_argument("--hr-char", default="2A37")
    ap.add_argument("--battery-service", default="180F")
    ap.add_argument("--battery-char", default="2A19")
    ap.add_argument("--serial-address", default="F0:00:00:00:00:02")
    ap.add_argument("--serial-service", default="FFE0")
    ap.add_argument("--serial-char", default="FFE1")
    ap.add_argument("--scan-time", type=float, default=3.0, help="BleakScanner.discover timeout")
    ap.add_argument("--find-timeout", type=float, default=10.0)
    ap.add_argument("--connect-timeout", type=float, default=20.0)
    ap.add_argument("--notify-timeout", type=float, default=10.0)
    ap.add_argument("--step-timeout", type=float, default=10.0, help="extra slack per step")
    ap.add_argument("--min-notifications", type=int, default=2)
    ap.add_argument("--no-wwr-readback", action="store_true",
                    help="do not require FFE1 to read back a write-without-response value")
    ap.add_argument("--total-timeout", type=float, default=180.0)
    ap.add_argument("--adapter", help="scan and connect through this adapter (bleak's bluez={'adapter': ...})")
    ap.add_argument("-v", "--verbose", action="store_true", help="tracebacks + bleak debug logging")
    args = ap.parse_args()

    if not os.environ.get("DBUS_SYSTEM_BUS_ADDRESS"):
        print("WARNING: DBUS_SYSTEM_BUS_ADDRESS is not set; bleak will use the real system bus",
              file=sys.stderr)

    if args.verbose:
        import logging
        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)

    # Hard watchdog in case the event loop itself is wedged.
    def on_alarm(signum, frame):
        print(f"FAIL watchdog: no completion within {args.total_timeout + 30:.0f}s", flush=True)
        os._exit(2)

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(int(args.total_timeout + 30))

    async def top():
        try:
            await asyncio.wait_for(run(args), args.total_timeout)
        except asyncio.TimeoutError:
            report("overall", False, f"exceeded --total-timeout {args.total_timeout}s")

    asyncio.run(top())
    signal.alarm(0)

    failed = [r for r in RESULTS if not r[1]]
    print(f"SUMMARY {len(RESULTS) - len(failed)} passed, {len(failed)} failed", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
