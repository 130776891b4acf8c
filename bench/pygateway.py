#!/usr/bin/env python3
"""pygateway: the Python baseline for gattway's benchmark.

A small BLE-over-HTTP gateway written the way a competent Python developer would write one:
bleak (BlueZ backend) for Bluetooth, aiohttp for HTTP, SSE and WebSocket, plain asyncio in
between. It serves the part of gattway's HTTP contract (docs/api.md, openapi.yaml) that
the benchmark uses, with the same paths, JSON shapes and error bodies, so that one benchmark
client can drive either gateway. It is neither slowed down on purpose nor tuned beyond what a
normal implementation does: each event is encoded with ``json.dumps`` once per client message,
every client has its own bounded ``asyncio.Queue`` and sender, aiohttp does the framing.

Run (bleak finds BlueZ, or gattway-sim, through DBUS_SYSTEM_BUS_ADDRESS)::

    DBUS_SYSTEM_BUS_ADDRESS=unix:path=... python bench/pygateway.py --listen 127.0.0.1:8081

    pip install bleak aiohttp      # (bleak also needs bluez's `bluetoothctl` on PATH)

Options: ``--listen HOST:PORT`` (default 127.0.0.1:8080; port 0 picks one, and the line says
which), ``--adapter hciN`` (default: bleak's choice, the first powered adapter),
``--keepalive SECONDS`` (SSE comment interval, default 15), ``--log-requests`` (one access-log
line per request; off by default). One line "pygateway listening on http://HOST:PORT" goes to
stderr at start. SIGTERM / SIGINT close the streams, stop the scan, disconnect the devices and
exit 0. At start RLIMIT_NOFILE is raised to its hard limit (the benchmark holds 10 000 idle
SSE streams open).

Routes
------
``GET /v1/state``
    ``{"state": "poweredOn", "code": 5, "adapter": "hci0"}`` when bleak finds a powered
    adapter; otherwise ``unsupported`` / ``poweredOff`` / ``unauthorized`` with ``reason``.
``POST /v1/scan`` / ``GET /v1/scan`` / ``DELETE /v1/scan``
    A ``BleakScanner`` (``services`` passed as its ``service_uuids``) that keeps running until
    DELETE. A POST while scanning restarts it with the new filters; the device cache starts
    empty on each POST. Answers gattway's scan status: ``scanning``, ``filters``,
    ``startedAt``, ``stopsAt``, ``discovered``. Also ``allowDuplicates`` (accepted; it makes
    no difference here because no advertisement events are streamed), ``active`` (false is
    501, as in gattway) and ``timeout`` (seconds, the scan stops by itself).
``GET /v1/devices``, ``GET /v1/devices/{id}``
    From the process's own cache of the scanner's detection callbacks (BLEDevice +
    AdvertisementData), plus devices this process is connected to.
``POST /v1/devices/{id}/connect`` (``{"timeout": s}``, default 30, at most 300),
``POST /v1/devices/{id}/disconnect``
    One ``BleakClient`` per device, kept in a dict; connect answers when bleak has connected
    and resolved the services. The device must have been seen by a scan (404 unknownDevice
    otherwise, as gattway).
``GET /v1/devices/{id}/characteristics/{char}/value?format=hex|base64|utf8``
    ``read_gatt_char``. ``{char}`` is a handle ``0x0015`` ("0x" and 4 hex digits, as gattway)
    or a UUID (``2a37``, 8 hex digits, 128-bit); a UUID that several characteristics share is
    400 with their handles. Answers gattway's value body ``{"handle", "uuid", "value",
    "format", "length"}`` plus ``"device"`` and ``"characteristic": {"handle", "uuid"}``.
``PUT /v1/devices/{id}/characteristics/{char}/value``
    ``{"value", "format", "withResponse"}`` -> ``write_gatt_char``.
``POST`` / ``DELETE /v1/devices/{id}/characteristics/{char}/notifications``
    A REST hold on the characteristic's notifications (``isNotifying``).
``GET /v1/ws``
    aiohttp ``WebSocketResponse``, JSON text messages: ``subscribe`` (``device``,
    ``characteristic``, ``format``, ``types``) -> ``{"op": "ack", "id", "subscription": "sN"}``,
    ``unsubscribe``, ``read``, ``write`` -> ``{"op": "result", ...}``; failures
    ``{"op": "error", "id", "error": {...}}``. Pings every 20 s, messages up to 64 KiB.
``GET /v1/events?types=&device=&characteristic=&format=``
    aiohttp ``StreamResponse`` as Server-Sent Events: ``retry: 2000`` first, then
    ``id: <seq>`` / ``event: notification`` / ``data: <event JSON>``, and a ``: keep-alive``
    comment after each idle ``--keepalive`` interval. With ``characteristic`` (needs
    ``device``) it subscribes as the WebSocket does; ``?types=state`` streams just stay open.

Notifications: one bleak ``start_notify`` per (device, characteristic) however many clients
subscribe. The set of subscribers is the hold count: the first subscriber starts the
notifications, the last one to leave (unsubscribe, socket closed or dropped, SSE client gone)
stops them. Each notification gets a gateway-wide ``seq`` and a ``time``; each client has a
queue of 256 events and one sender task (for SSE the response handler itself). When the
queue is full the oldest event is dropped and counted, and the client is sent
``{"type": "dropped", "count": n}`` before its next event. ``sequence`` counts, per
subscription and characteristic, the notifications delivered (1, 2, 3...), as gattway does.
A WebSocket subscription starts receiving once its ack has been sent, so the ack always comes
before the subscription's first event. SSE events carry no ``subscription`` (as in gattway).

Where it differs from gattway's contract
----------------------------------------
* Only ``notification`` (and ``dropped``) events are produced: no ``state``,
  ``advertisement`` or ``connection`` events. A stream selecting only those stays idle.
* No ``Last-Event-ID`` replay; no disconnection of a client after 10 000 drops in a row.
* Reads with ``offset`` other than 0 are 501 (bleak has no offset option); writes are one
  bleak call (no MTU fragmenting, ``writes`` is always 1, ``fragment`` is ignored); no
  property pre-checks: BlueZ's refusal is mapped instead.
* Scan filters ``name``, ``namePrefix``, ``rssi``, ``manufacturerData``, ``serviceData`` are
  answered 501; other unknown body fields are ignored instead of refused.
* Device objects have no ``mtu`` / ``maximumWriteValueLength`` (bleak's BlueZ backend does not
  know the MTU without AcquireWrite). Per-device operations are serialised by an
  ``asyncio.Lock`` with no queue limit (gattway: 32 waiting, then 503), and no 30 s GATT
  deadline beyond D-Bus's own.
* Routes not listed above (adapters, gatt, services, descriptors...) answer 404.
* An SSE client that vanishes is noticed at the next write (event or keep-alive), so an idle
  stream's subscription may outlive its client by up to one keep-alive interval.
* No permessage-deflate on the WebSocket (``compress=False``), as gattway has none either.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import functools
import json
import logging
import re
import resource
import signal
import sys
import uuid as uuidlib
from datetime import datetime, timezone

from aiohttp import WSMsgType, web
from bleak import BleakClient, BleakScanner
from bleak.backends.bluezdbus.manager import get_global_bluez_manager
from bleak.exc import (
    BleakBluetoothNotAvailableError,
    BleakBluetoothNotAvailableReason,
    BleakCharacteristicNotFoundError,
    BleakDBusError,
    BleakDeviceNotFoundError,
    BleakError,
    BleakGATTProtocolError,
)

log = logging.getLogger("pygateway")

QUEUE_LIMIT = 256
MAX_BODY = 64 * 1024
EVENT_TYPES = ("state", "advertisement", "connection", "notification")
FORMATS = ("hex", "base64", "utf8")
BASE_UUID = "-0000-1000-8000-00805f9b34fb"
ADDRESS_RE = re.compile(r"^[0-9A-F]{2}(:[0-9A-F]{2}){5}$")


def dumps(obj) -> str:
    return json.dumps(obj, separators=(",", ":"))


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def handle_text(handle: int) -> str:
    return f"0x{handle:04x}"


# ---------------------------------------------------------------------------------------------
# Errors: CoreBluetooth's codes, gattway's error body and HTTP statuses
# ---------------------------------------------------------------------------------------------

CB_ERRORS = {
    "unknown": (0, 503), "invalidParameters": (1, 400), "invalidHandle": (2, 404),
    "notConnected": (3, 409), "outOfSpace": (4, 503), "operationCancelled": (5, 409),
    "connectionTimeout": (6, 504), "peripheralDisconnected": (7, 502), "uuidNotAllowed": (8, 403),
    "alreadyAdvertising": (9, 409), "connectionFailed": (10, 502),
    "connectionLimitReached": (11, 503), "unknownDevice": (12, 404),
    "operationNotSupported": (13, 501), "peerRemovedPairingInformation": (14, 502),
    "encryptionTimedOut": (15, 504), "tooManyLEPairedDevices": (16, 503),
}

ATT_NAMES = {
    1: "invalidHandle", 2: "readNotPermitted", 3: "writeNotPermitted", 4: "invalidPdu",
    5: "insufficientAuthentication", 6: "requestNotSupported", 7: "invalidOffset",
    8: "insufficientAuthorization", 9: "prepareQueueFull", 10: "attributeNotFound",
    11: "attributeNotLong", 12: "insufficientEncryptionKeySize",
    13: "invalidAttributeValueLength", 14: "unlikelyError", 15: "insufficientEncryption",
    16: "unsupportedGroupType", 17: "insufficientResources",
}
ATT_STATUS = {2: 403, 3: 403, 5: 403, 8: 403, 12: 403, 15: 403, 4: 400, 7: 400, 13: 400, 1: 404, 10: 404}


class GatewayError(Exception):
    def __init__(self, name: str, message: str, *, detail: str | None = None, status: int | None = None):
        super().__init__(message)
        self.domain = "CBErrorDomain"
        self.name = name
        self.code, self.status = CB_ERRORS[name]
        if status is not None:
            self.status = status
        self.message = message
        self.detail = detail

    @classmethod
    def att(cls, code: int, message: str, detail: str | None = None) -> "GatewayError":
        e = cls("unknown", message, detail=detail)
        e.domain = "CBATTErrorDomain"
        e.code = code
        e.name = ATT_NAMES.get(code, f"{'applicationError' if 0x80 <= code <= 0x9F else 'attError'}0x{code:02X}")
        e.status = ATT_STATUS.get(code, 502)
        return e

    def body(self) -> dict:
        err = {"domain": self.domain, "code": self.code, "name": self.name, "message": self.message}
        if self.detail:
            err["detail"] = self.detail
        return {"error": err}


# (D-Bus error name suffix, text fragment or None, CBError name); the first match wins.
DBUS_RULES = [
    ("Failed", "le-connection-abort", "connectionFailed"),
    ("Failed", "le-connection-refused", "connectionFailed"),
    ("Failed", "le-connection-busy", "connectionFailed"),
    ("Failed", "le-connection-gatt-browsing", "connectionFailed"),
    ("Failed", "concurrent-connection-limit", "connectionLimitReached"),
    ("Failed", "connection-timeout", "connectionTimeout"),
    ("Failed", "page-timeout", "connectionTimeout"),
    ("Failed", "Not connected", "notConnected"),
    ("NotConnected", None, "notConnected"),
    ("InvalidArguments", None, "invalidParameters"),
    ("NotSupported", None, "operationNotSupported"),
    ("AuthenticationTimeout", None, "encryptionTimedOut"),
    ("DoesNotExist", None, "unknownDevice"),
    ("UnknownObject", None, "unknownDevice"),
    ("NoReply", None, "connectionTimeout"),
    ("Timeout", None, "connectionTimeout"),
]


def map_error(exc: BaseException, what: str) -> GatewayError:
    """A bleak / D-Bus / asyncio exception as the CoreBluetooth error gattway would answer."""
    if isinstance(exc, GatewayError):
        return exc
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return GatewayError("connectionTimeout", f"{what} timed out")
    if isinstance(exc, BleakGATTProtocolError):
        return GatewayError.att(int(exc.args[0]), f"{what}: {exc.args[1]}")
    if isinstance(exc, BleakDeviceNotFoundError):
        return GatewayError("unknownDevice", f"{what}: no device {exc.identifier} is known to the adapter; scan for it first")
    if isinstance(exc, BleakCharacteristicNotFoundError):
        return GatewayError("invalidHandle", f"{what}: {exc}")
    if isinstance(exc, BleakDBusError):
        name = exc.dbus_error or ""
        text = str(exc.args[1]) if len(exc.args) > 1 else ""
        detail = f"{name}: {text}" if text else name
        m = re.search(r"ATT error: 0x([0-9a-fA-F]{2})", text)
        if m:
            return GatewayError.att(int(m.group(1), 16), f"{what}: the device answered ATT error 0x{m.group(1)}", detail)
        if name.endswith("NotPermitted") or name.endswith("NotAuthorized"):
            code = 2 if "Read" in text else 3 if "Write" in text else 5 if "paired" in text else 8
            return GatewayError.att(code, f"{what}: {text or name}", detail)
        for suffix, fragment, cb in DBUS_RULES:
            if name.endswith("." + suffix) and (fragment is None or fragment in text):
                return GatewayError(cb, f"{what}: {text or name}", detail=detail)
        return GatewayError("unknown", f"{what}: {text or name}", detail=detail)
    if isinstance(exc, BleakError) and "not connected" in str(exc).lower():
        return GatewayError("notConnected", f"{what}: the peripheral is not connected")
    return GatewayError("unknown", f"{what}: {exc or type(exc).__name__}")


# ---------------------------------------------------------------------------------------------
# Parsing of path, query and body values
# ---------------------------------------------------------------------------------------------

def parse_address(text: str) -> str:
    address = (text or "").upper().replace("-", ":")
    if not ADDRESS_RE.match(address):
        raise GatewayError("invalidParameters", f'"{text}" is not a device id; use the address, AA:BB:CC:DD:EE:FF')
    return address


def parse_uuid(text: str) -> str:
    """Any Bluetooth UUID form to the 128-bit lowercase one; ValueError if none."""
    t = text.strip().lower()
    if t.startswith("0x"):
        t = t[2:]
    if re.fullmatch(r"[0-9a-f]{4}", t):
        return f"0000{t}{BASE_UUID}"
    if re.fullmatch(r"[0-9a-f]{8}", t):
        return f"{t}{BASE_UUID}"
    return str(uuidlib.UUID(t))


def parse_selector(text: str) -> tuple[str, object]:
    """ "0x0015" is a handle; anything else must be a UUID (so "2a19" is the UUID 0x2A19). """
    t = (text or "").lower()
    if re.fullmatch(r"0x[0-9a-f]{4}", t):
        return ("handle", int(t, 16))
    try:
        return ("uuid", parse_uuid(text))
    except ValueError:
        raise GatewayError("invalidParameters", f'"{text}" is neither a handle (0x0027) nor a UUID (2a19, or the 128-bit form)') from None


def parse_format(text: str | None) -> str:
    if text is None:
        return "hex"
    if text not in FORMATS:
        raise GatewayError("invalidParameters", f'format must be hex, base64 or utf8, not "{text}"')
    return text


def encode_value(data: bytes, fmt: str) -> str:
    if fmt == "hex":
        return data.hex()
    if fmt == "base64":
        return base64.b64encode(data).decode("ascii")
    return data.decode("utf-8", "replace")


def decode_value(text, fmt: str) -> bytes:
    if not isinstance(text, str):
        raise GatewayError("invalidParameters", "value must be a string")
    try:
        if fmt == "hex":
            return bytes.fromhex(text)
        if fmt == "base64":
            return base64.b64decode(text, validate=True)
        return text.encode("utf-8")
    except ValueError as e:
        raise GatewayError("invalidParameters", f"value is not {fmt}: {e}") from None


async def read_json(request: web.Request) -> dict:
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise GatewayError("invalidParameters", f"the body is larger than {MAX_BODY} bytes", status=413) from None
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError as e:
        raise GatewayError("invalidParameters", f"the body is not JSON: {e}") from None
    if not isinstance(body, dict):
        raise GatewayError("invalidParameters", "the body must be a JSON object")
    return body


# ---------------------------------------------------------------------------------------------
# Streams: clients, subscriptions, events
# ---------------------------------------------------------------------------------------------

class Notification:
    __slots__ = ("seq", "time", "device", "handle", "service", "characteristic", "value")

    def __init__(self, seq, time, device, handle, service, characteristic, value):
        self.seq = seq
        self.time = time
        self.device = device
        self.handle = handle
        self.service = service
        self.characteristic = characteristic
        self.value = value


class StreamClient:
    """One SSE response or WebSocket: a bounded queue of (event, subscription), drop-oldest."""

    def __init__(self, ws: web.WebSocketResponse | None = None):
        self.queue: asyncio.Queue = asyncio.Queue(QUEUE_LIMIT)
        self.dropped = 0
        self.ws = ws
        self.subscriptions: dict[str, Subscription] = {}
        self.next_name = 0

    def offer(self, item) -> None:
        if self.queue.full():
            self.queue.get_nowait()
            self.dropped += 1
        self.queue.put_nowait(item)

    def close(self) -> None:
        self.offer(None)


class Subscription:
    def __init__(self, client: StreamClient, name: str | None, types: set[str], device: str | None,
                 key: tuple[str, int] | None, fmt: str):
        self.client = client
        self.name = name
        self.types = types
        self.device = device
        self.key = key  # (device, characteristic handle) when it holds one characteristic
        self.format = fmt
        self.sequences: dict[tuple[str, int], int] = {}
        # A WebSocket subscription gets events once its ack is sent, so the ack comes first.
        self.active = True

    def render(self, event: Notification) -> str:
        """The event as this subscription's client sees it: one json.dumps per message."""
        key = (event.device, event.handle)
        sequence = self.sequences.get(key, 0) + 1
        self.sequences[key] = sequence
        body = {
            "type": "notification", "seq": event.seq, "time": event.time, "device": event.device,
            "service": event.service, "characteristic": event.characteristic,
            "value": encode_value(event.value, self.format), "format": self.format, "sequence": sequence,
        }
        if self.name:
            body["subscription"] = self.name
        return dumps(body)


class DeviceEntry:
    __slots__ = ("device", "adv", "last_seen")

    def __init__(self, device, adv, last_seen):
        self.device = device
        self.adv = adv
        self.last_seen = last_seen


# ---------------------------------------------------------------------------------------------
# The gateway
# ---------------------------------------------------------------------------------------------

class Gateway:
    def __init__(self, adapter: str | None, keepalive: float):
        self.adapter = adapter
        self.bluez_args = {"adapter": adapter} if adapter else {}
        self.keepalive = keepalive
        self.scanner: BleakScanner | None = None
        self.scan_filters: dict | None = None
        self.scan_started: str | None = None
        self.scan_stops: str | None = None
        self.scan_timer: asyncio.TimerHandle | None = None
        self.devices: dict[str, DeviceEntry] = {}
        self.clients: dict[str, BleakClient] = {}
        self.device_locks: dict[str, asyncio.Lock] = {}
        self.notify_locks: dict[tuple[str, int], asyncio.Lock] = {}
        self.subscribers: dict[tuple[str, int], set[Subscription]] = {}
        self.broad: set[Subscription] = set()  # notifications selected without one characteristic
        self.notifying: set[tuple[str, int]] = set()
        self.attributes: dict[tuple[str, int], tuple[dict, dict]] = {}
        self.rest_holds: dict[tuple[str, int], Subscription] = {}
        self.streams: set[StreamClient] = set()
        self.background: set[asyncio.Task] = set()
        self.seq = 0

    # -- helpers ------------------------------------------------------------------------------

    def lock(self, address: str) -> asyncio.Lock:
        return self.device_locks.setdefault(address, asyncio.Lock())

    def spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    def connected(self, address: str) -> BleakClient:
        client = self.clients.get(address)
        if client is None or not client.is_connected:
            if address in self.devices or client is not None:
                raise GatewayError("notConnected", f"{address} is not connected; POST /v1/devices/{address}/connect first")
            raise GatewayError("unknownDevice", f"no device {address} is known to the adapter; scan for it first")
        return client

    def characteristic(self, client: BleakClient, text: str):
        kind, value = parse_selector(text)
        chars = client.services.characteristics.values()
        if kind == "handle":
            matches = [c for c in chars if c.handle == value]
        else:
            matches = [c for c in chars if c.uuid == value]
        if len(matches) == 1:
            return matches[0]
        label = handle_text(value) if kind == "handle" else text.lower()
        if not matches:
            raise GatewayError("invalidHandle", f"no characteristic {label} on this device")
        handles = ", ".join(handle_text(c.handle) for c in matches)
        raise GatewayError("invalidParameters", f"characteristic UUID {label} is ambiguous: {len(matches)} characteristics have it, "
                                                f"at handles {handles}; name one by its handle")

    def device_body(self, address: str) -> dict:
        entry = self.devices.get(address)
        client = self.clients.get(address)
        body = {"id": address, "address": address}
        if entry is not None:
            props = entry.device.details.get("props", {}) if isinstance(entry.device.details, dict) else {}
            adv = entry.adv
            if "AddressType" in props:
                body["addressType"] = props["AddressType"]
            if entry.device.name:
                body["name"] = entry.device.name
            body["rssi"] = adv.rssi
            body["lastSeen"] = entry.last_seen
            body["state"] = "connected" if client is not None and client.is_connected else "disconnected"
            body["paired"] = bool(props.get("Paired", False))
            advertisement = {
                "serviceUUIDs": list(adv.service_uuids),
                "manufacturerData": {str(k): bytes(v).hex() for k, v in adv.manufacturer_data.items()},
                "serviceData": {k: bytes(v).hex() for k, v in adv.service_data.items()},
            }
            if adv.local_name is not None:
                advertisement["localName"] = adv.local_name
            if adv.tx_power is not None:
                advertisement["txPowerLevel"] = adv.tx_power
            body["advertisement"] = advertisement
        else:
            if client is not None and client.name:
                body["name"] = client.name
            body["state"] = "connected" if client is not None and client.is_connected else "disconnected"
            body["paired"] = False
            body["advertisement"] = {"serviceUUIDs": [], "manufacturerData": {}, "serviceData": {}}
        return body

    # -- state and scanning -------------------------------------------------------------------

    async def state(self) -> dict:
        try:
            manager = await get_global_bluez_manager()
            path = manager.get_default_adapter()
        except BleakBluetoothNotAvailableError as e:
            names = {BleakBluetoothNotAvailableReason.POWERED_OFF: ("poweredOff", 4),
                     BleakBluetoothNotAvailableReason.DENIED_BY_SYSTEM: ("unauthorized", 3),
                     BleakBluetoothNotAvailableReason.DENIED_BY_USER: ("unauthorized", 3)}
            state, code = names.get(e.reason, ("unsupported", 2))
            body = {"state": state, "code": code, "reason": str(e.args[0])}
            if self.adapter:
                body["adapter"] = self.adapter
            return body
        except Exception as e:  # no bus, no org.bluez
            return {"state": "unsupported", "code": 2, "reason": f"BlueZ is not reachable: {e or type(e).__name__}"}
        return {"state": "poweredOn", "code": 5, "adapter": self.adapter or path.rsplit("/", 1)[-1]}

    def on_advertisement(self, device, adv) -> None:
        self.devices[device.address] = DeviceEntry(device, adv, now_iso())

    def scan_status(self) -> dict:
        body = {"scanning": self.scanner is not None, "discovered": len(self.devices)}
        if self.scan_filters is not None:
            body["filters"] = self.scan_filters
        if self.scan_started:
            body["startedAt"] = self.scan_started
        if self.scan_stops and self.scanner is not None:
            body["stopsAt"] = self.scan_stops
        return body

    async def start_scan(self, body: dict) -> dict:
        for unsupported in ("name", "namePrefix", "rssi", "manufacturerData", "serviceData"):
            if unsupported in body:
                raise GatewayError("operationNotSupported", f"pygateway does not implement the scan filter {unsupported}")
        if body.get("active", True) is False:
            raise GatewayError("operationNotSupported", "passive scanning is not supported through BlueZ's Adapter1")
        services = body.get("services") or []
        if not isinstance(services, list):
            raise GatewayError("invalidParameters", "services must be a list of UUIDs")
        uuids = []
        for i, text in enumerate(services):
            try:
                uuids.append(parse_uuid(str(text)))
            except ValueError:
                raise GatewayError("invalidParameters", f'services[{i}]: "{text}" is not a Bluetooth UUID') from None
        timeout = body.get("timeout")
        if timeout is not None and (not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600):
            raise GatewayError("invalidParameters", "timeout must be more than 0 and at most 3600 seconds")
        state = await self.state()
        if state["state"] != "poweredOn":
            raise GatewayError("unknown", f"Bluetooth is {state['state']}: {state.get('reason', '')}")

        await self.stop_scan()
        self.devices = {a: e for a, e in self.devices.items() if a in self.clients}
        scanner = BleakScanner(self.on_advertisement, uuids or None, bluez=self.bluez_args)
        try:
            await scanner.start()
        except Exception as e:
            raise map_error(e, "start scanning") from e
        self.scanner = scanner
        self.scan_filters = {"services": uuids, "allowDuplicates": bool(body.get("allowDuplicates", False)),
                             "manufacturerData": [], "serviceData": [], "active": True}
        if timeout is not None:
            self.scan_filters["timeout"] = timeout
        self.scan_started = now_iso()
        self.scan_stops = None
        if timeout is not None:
            loop = asyncio.get_running_loop()
            self.scan_stops = datetime.fromtimestamp(datetime.now(timezone.utc).timestamp() + timeout, timezone.utc) \
                .isoformat(timespec="milliseconds").replace("+00:00", "Z")
            self.scan_timer = loop.call_later(timeout, lambda: self.spawn(self.stop_scan()))
        return self.scan_status()

    async def stop_scan(self) -> dict:
        if self.scan_timer is not None:
            self.scan_timer.cancel()
            self.scan_timer = None
        scanner, self.scanner = self.scanner, None
        if scanner is not None:
            try:
                await scanner.stop()
            except Exception as e:
                raise map_error(e, "stop scanning") from e
        return self.scan_status()

    # -- connections --------------------------------------------------------------------------

    def on_disconnected(self, address: str, client: BleakClient) -> None:
        if self.clients.get(address) is client:
            del self.clients[address]
        # BlueZ forgets notification state with the link; a later subscriber starts it again.
        for key in [k for k in self.notifying if k[0] == address]:
            self.notifying.discard(key)

    async def connect(self, address: str, timeout: float) -> dict:
        async with self.lock(address):
            existing = self.clients.get(address)
            if existing is not None and existing.is_connected:
                return self.device_body(address)
            entry = self.devices.get(address)
            if entry is None:
                raise GatewayError("unknownDevice", f"no device {address} is known to the adapter; scan for it first")
            client = BleakClient(entry.device, functools.partial(self.on_disconnected, address),
                                 timeout=timeout, bluez=self.bluez_args)
            try:
                await client.connect()
            except Exception as e:
                raise map_error(e, f"connect to {address}") from e
            self.clients[address] = client
            return self.device_body(address)

    async def disconnect(self, address: str) -> dict:
        async with self.lock(address):
            client = self.clients.pop(address, None)
            if client is None and address not in self.devices:
                raise GatewayError("unknownDevice", f"no device {address} is known to the adapter; scan for it first")
            if client is not None:
                try:
                    await asyncio.wait_for(client.disconnect(), 10)
                except Exception as e:
                    raise map_error(e, f"disconnect {address}") from e
                self.on_disconnected(address, client)
            return self.device_body(address)

    # -- attribute values ---------------------------------------------------------------------

    async def read(self, address: str, char_text: str, fmt: str) -> tuple[object, bytes]:
        client = self.connected(address)
        char = self.characteristic(client, char_text)
        async with self.lock(address):
            try:
                value = bytes(await client.read_gatt_char(char))
            except Exception as e:
                raise map_error(e, f"read {handle_text(char.handle)}") from e
        return char, value

    async def write(self, address: str, char_text: str, value: bytes, with_response: bool):
        client = self.connected(address)
        char = self.characteristic(client, char_text)
        async with self.lock(address):
            try:
                await client.write_gatt_char(char, value, response=with_response)
            except Exception as e:
                raise map_error(e, f"write {handle_text(char.handle)}") from e
        return char

    # -- notifications ------------------------------------------------------------------------

    def on_notify(self, address: str, char, data: bytearray) -> None:
        key = (address, char.handle)
        self.seq += 1
        service, characteristic = self.attributes[key]
        event = Notification(self.seq, now_iso(), address, char.handle, service, characteristic, bytes(data))
        for sub in self.subscribers.get(key, ()):
            if sub.client is not None and sub.active:
                sub.client.offer((event, sub))
        for sub in self.broad:
            if sub.active and (sub.device is None or sub.device == address):
                sub.client.offer((event, sub))

    def selection(self, client: StreamClient | None, name: str | None, types, device, characteristic, fmt):
        """A subscription from SSE query values or a WebSocket subscribe command (not yet held)."""
        if types is None:
            type_set = set(EVENT_TYPES)
        else:
            parts = types.split(",") if isinstance(types, str) else list(types)
            type_set = set()
            for t in parts:
                t = str(t).strip()
                if t not in EVENT_TYPES:
                    raise GatewayError("invalidParameters", f'unknown event type "{t}"; types are state, advertisement, connection, notification')
                type_set.add(t)
        address = parse_address(device) if device is not None else None
        key = None
        if characteristic is not None:
            if address is None:
                raise GatewayError("invalidParameters", "characteristic needs a device")
            if types is None:
                type_set = {"notification"}
            if "notification" in type_set:
                ble = self.connected(address)
                char = self.characteristic(ble, characteristic)
                if not {"notify", "indicate"} & set(char.properties):
                    raise GatewayError.att(6, f"characteristic {handle_text(char.handle)} neither notifies nor indicates")
                key = (address, char.handle)
                self.attributes[key] = ({"handle": handle_text(char.service_handle), "uuid": char.service_uuid},
                                        {"handle": handle_text(char.handle), "uuid": char.uuid})
        return Subscription(client, name, type_set, address, key, parse_format(fmt))

    async def subscribe(self, sub: Subscription) -> None:
        if sub.key is None:
            if "notification" in sub.types:
                self.broad.add(sub)
            return
        key = sub.key
        async with self.notify_locks.setdefault(key, asyncio.Lock()):
            subs = self.subscribers.setdefault(key, set())
            subs.add(sub)
            if key in self.notifying:
                return
            address, handle = key
            try:
                client = self.connected(address)
                async with self.lock(address):
                    await client.start_notify(handle, functools.partial(self.on_notify, address))
            except Exception as e:
                subs.discard(sub)
                raise map_error(e, f"start notifications of {handle_text(handle)}") from e
            self.notifying.add(key)

    def unsubscribe(self, sub: Subscription) -> None:
        self.broad.discard(sub)
        if sub.key is None:
            return
        subs = self.subscribers.get(sub.key)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                self.spawn(self.release(sub.key))

    async def release(self, key: tuple[str, int]) -> None:
        """Stops the notifications when nobody holds them any more (checked again under the lock)."""
        async with self.notify_locks.setdefault(key, asyncio.Lock()):
            if self.subscribers.get(key) or key not in self.notifying:
                return
            self.notifying.discard(key)
            client = self.clients.get(key[0])
            if client is None or not client.is_connected:
                return
            try:
                async with self.lock(key[0]):
                    await client.stop_notify(key[1])
            except Exception as e:
                log.warning("stop_notify %s %s failed: %s", key[0], handle_text(key[1]), e)

    # -- shutdown -----------------------------------------------------------------------------

    async def close_streams(self) -> None:
        for client in list(self.streams):
            client.close()
            if client.ws is not None:
                await client.ws.close(code=1001, message=b"server shutting down")

    async def shutdown(self) -> None:
        try:
            await self.stop_scan()
        except Exception as e:
            log.warning("stopping the scan failed: %s", e)
        for address, client in list(self.clients.items()):
            try:
                await asyncio.wait_for(client.disconnect(), 5)
            except Exception as e:
                log.warning("disconnecting %s failed: %s", address, e)
        if self.background:
            await asyncio.wait(list(self.background), timeout=5)


# ---------------------------------------------------------------------------------------------
# HTTP
# ---------------------------------------------------------------------------------------------

def json_response(body, status: int = 200, headers=None) -> web.Response:
    return web.Response(text=dumps(body), status=status, content_type="application/json", headers=headers)


@web.middleware
async def errors_middleware(request: web.Request, handler):
    try:
        return await handler(request)
    except GatewayError as e:
        return json_response(e.body(), e.status)
    except web.HTTPMethodNotAllowed as e:
        err = GatewayError("operationNotSupported", f"{request.method} is not allowed on {request.path}", status=405)
        return json_response(err.body(), 405, headers={"Allow": ", ".join(sorted(e.allowed_methods))})
    except web.HTTPNotFound:
        err = GatewayError("operationNotSupported", f"no route {request.method} {request.path}", status=404)
        return json_response(err.body(), 404)
    except web.HTTPException as e:
        err = GatewayError("invalidParameters", e.reason or "bad request", status=e.status)
        return json_response(err.body(), e.status)
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception as e:
        log.exception("unexpected error in %s %s", request.method, request.path)
        return json_response(GatewayError("unknown", f"{type(e).__name__}: {e}").body(), 503)


class Routes:
    def __init__(self, gateway: Gateway):
        self.g = gateway

    def add_to(self, app: web.Application) -> None:
        dev = "/v1/devices/{id}"
        char = dev + "/characteristics/{char}"
        app.router.add_get("/v1/state", self.state, allow_head=False)
        app.router.add_get("/v1/scan", self.scan_status, allow_head=False)
        app.router.add_post("/v1/scan", self.scan_start)
        app.router.add_delete("/v1/scan", self.scan_stop)
        app.router.add_get("/v1/devices", self.devices, allow_head=False)
        app.router.add_get(dev, self.device, allow_head=False)
        app.router.add_post(dev + "/connect", self.connect)
        app.router.add_post(dev + "/disconnect", self.disconnect)
        app.router.add_get(char + "/value", self.read, allow_head=False)
        app.router.add_put(char + "/value", self.write)
        app.router.add_post(char + "/notifications", self.notify_on)
        app.router.add_delete(char + "/notifications", self.notify_off)
        app.router.add_get("/v1/events", self.events, allow_head=False)
        app.router.add_get("/v1/ws", self.websocket, allow_head=False)

    async def state(self, request):
        return json_response(await self.g.state())

    async def scan_status(self, request):
        return json_response(self.g.scan_status())

    async def scan_start(self, request):
        return json_response(await self.g.start_scan(await read_json(request)))

    async def scan_stop(self, request):
        return json_response(await self.g.stop_scan())

    async def devices(self, request):
        addresses = list(self.g.devices) + [a for a in self.g.clients if a not in self.g.devices]
        return json_response({"devices": [self.g.device_body(a) for a in addresses]})

    async def device(self, request):
        address = parse_address(request.match_info["id"])
        if address not in self.g.devices and address not in self.g.clients:
            raise GatewayError("unknownDevice", f"no device {address} is known to the adapter; scan for it first")
        return json_response(self.g.device_body(address))

    async def connect(self, request):
        address = parse_address(request.match_info["id"])
        body = await read_json(request)
        timeout = body.get("timeout", 30)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 300:
            raise GatewayError("invalidParameters", "timeout must be more than 0 and at most 300 seconds")
        return json_response(await self.g.connect(address, float(timeout)))

    async def disconnect(self, request):
        return json_response(await self.g.disconnect(parse_address(request.match_info["id"])))

    async def read(self, request):
        address = parse_address(request.match_info["id"])
        fmt = parse_format(request.query.get("format"))
        if request.query.get("offset", "0") != "0":
            raise GatewayError("operationNotSupported", "pygateway does not read with an offset")
        char, value = await self.g.read(address, request.match_info["char"], fmt)
        handle, uuid = handle_text(char.handle), char.uuid
        return json_response({"handle": handle, "uuid": uuid, "value": encode_value(value, fmt), "format": fmt,
                              "length": len(value), "device": address,
                              "characteristic": {"handle": handle, "uuid": uuid}})

    async def write(self, request):
        address = parse_address(request.match_info["id"])
        body = await read_json(request)
        if "value" not in body:
            raise GatewayError("invalidParameters", "the body needs a value")
        value = decode_value(body["value"], parse_format(body.get("format")))
        with_response = body.get("withResponse", True) is not False
        char = await self.g.write(address, request.match_info["char"], value, with_response)
        return json_response({"handle": handle_text(char.handle), "uuid": char.uuid, "written": len(value),
                              "withResponse": with_response, "writes": 1})

    async def notify_on(self, request):
        return await self.set_notify(request, True)

    async def notify_off(self, request):
        return await self.set_notify(request, False)

    async def set_notify(self, request, enabled: bool):
        address = parse_address(request.match_info["id"])
        sub = self.g.selection(None, None, None, address, request.match_info["char"], None)
        if enabled and sub.key not in self.g.rest_holds:
            await self.g.subscribe(sub)
            self.g.rest_holds[sub.key] = sub
        elif not enabled and sub.key in self.g.rest_holds:
            self.g.unsubscribe(self.g.rest_holds.pop(sub.key))
        _, char = self.g.attributes[sub.key]
        return json_response({"handle": char["handle"], "uuid": char["uuid"],
                              "isNotifying": bool(self.g.subscribers.get(sub.key))})

    # -- Server-Sent Events -------------------------------------------------------------------

    async def events(self, request):
        q = request.query
        client = StreamClient()
        sub = self.g.selection(client, None, q.get("types"), q.get("device"), q.get("characteristic"), q.get("format"))
        await self.g.subscribe(sub)  # errors go out as JSON, before the stream starts
        self.g.streams.add(client)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
        try:
            await resp.prepare(request)
            await resp.write(b"retry: 2000\n: connected\n\n")
            while True:
                try:
                    item = await asyncio.wait_for(client.queue.get(), self.g.keepalive)
                except asyncio.TimeoutError:
                    await resp.write(b": keep-alive\n\n")
                    continue
                if item is None:
                    break
                if client.dropped:
                    count, client.dropped = client.dropped, 0
                    await resp.write(f"event: dropped\ndata: {dumps({'type': 'dropped', 'count': count})}\n\n".encode())
                event, s = item
                await resp.write(f"id: {event.seq}\nevent: notification\ndata: {s.render(event)}\n\n".encode())
        except ConnectionResetError:
            pass  # the client went away
        finally:
            self.g.streams.discard(client)
            self.g.unsubscribe(sub)
        return resp

    # -- WebSocket ----------------------------------------------------------------------------

    async def websocket(self, request):
        ws = web.WebSocketResponse(heartbeat=20.0, max_msg_size=64 * 1024, compress=False)
        await ws.prepare(request)
        client = StreamClient(ws)
        self.g.streams.add(client)
        sender = asyncio.create_task(self.ws_sender(ws, client))
        try:
            async for msg in ws:
                new = None
                if msg.type == WSMsgType.TEXT:
                    reply, new = await self.ws_command(client, msg.data)
                else:
                    reply = {"op": "error", "error": GatewayError("invalidParameters", "send JSON text messages").body()["error"]}
                await ws.send_str(dumps(reply))
                if new is not None:
                    new.active = True
        except ConnectionResetError:
            pass  # the client went away
        finally:
            self.g.streams.discard(client)
            for sub in client.subscriptions.values():
                self.g.unsubscribe(sub)
            client.subscriptions.clear()
            sender.cancel()
        return ws

    async def ws_sender(self, ws, client: StreamClient) -> None:
        try:
            while True:
                item = await client.queue.get()
                if item is None:
                    return
                if client.dropped:
                    count, client.dropped = client.dropped, 0
                    await ws.send_str(dumps({"type": "dropped", "count": count}))
                event, sub = item
                await ws.send_str(sub.render(event))
        except ConnectionResetError:
            pass  # the socket closed under us; the receive loop ends too

    async def ws_command(self, client: StreamClient, text: str) -> tuple[dict, Subscription | None]:
        """The reply to one command, and the subscription it made (to activate after the ack)."""
        cid = None
        try:
            try:
                cmd = json.loads(text)
            except ValueError as e:
                raise GatewayError("invalidParameters", f"the message is not JSON: {e}") from None
            if not isinstance(cmd, dict):
                raise GatewayError("invalidParameters", "the message must be a JSON object")
            cid = cmd.get("id")
            op = cmd.get("op")
            if op == "subscribe":
                name = f"s{client.next_name + 1}"
                sub = self.g.selection(client, name, cmd.get("types"), cmd.get("device"), cmd.get("characteristic"), cmd.get("format"))
                sub.active = False
                await self.g.subscribe(sub)
                client.next_name += 1
                client.subscriptions[name] = sub
                return {"op": "ack", "id": cid, "subscription": name}, sub
            if op == "unsubscribe":
                name = cmd.get("subscription")
                sub = client.subscriptions.pop(name, None)
                if sub is None:
                    raise GatewayError("invalidParameters", f'no subscription "{name or ""}" on this socket')
                self.g.unsubscribe(sub)
                return {"op": "ack", "id": cid, "subscription": name}, None
            if op in ("read", "write"):
                if cmd.get("device") is None or cmd.get("characteristic") is None:
                    raise GatewayError("invalidParameters", f"{op} needs a device and a characteristic")
                address = parse_address(cmd["device"])
                fmt = parse_format(cmd.get("format"))
                if op == "read":
                    char, value = await self.g.read(address, cmd["characteristic"], fmt)
                    return {"op": "result", "id": cid, "device": address, "characteristic": handle_text(char.handle),
                            "value": encode_value(value, fmt), "format": fmt, "length": len(value)}, None
                if "value" not in cmd:
                    raise GatewayError("invalidParameters", "write needs a value")
                value = decode_value(cmd["value"], fmt)
                char = await self.g.write(address, cmd["characteristic"], value, cmd.get("withResponse", True) is not False)
                return {"op": "result", "id": cid, "device": address, "characteristic": handle_text(char.handle),
                        "written": len(value)}, None
            raise GatewayError("invalidParameters", f'unknown op "{op}"; ops are subscribe, unsubscribe, read, write')
        except GatewayError as e:
            return {"op": "error", "id": cid, "error": e.body()["error"]}, None
        except Exception as e:
            log.exception("unexpected error in a WebSocket command")
            return {"op": "error", "id": cid, "error": GatewayError("unknown", f"{type(e).__name__}: {e}").body()["error"]}, None


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------

def raise_file_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as e:
            log.warning("cannot raise RLIMIT_NOFILE from %s to %s: %s", soft, hard, e)


async def serve(args) -> None:
    host, _, port = args.listen.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    gateway = Gateway(args.adapter, args.keepalive)
    app = web.Application(middlewares=[errors_middleware], client_max_size=MAX_BODY)
    Routes(gateway).add_to(app)
    runner = web.AppRunner(app, access_log=log if args.log_requests else None, shutdown_timeout=2.0)
    await runner.setup()
    site = web.TCPSite(runner, host, int(port), backlog=1024)
    await site.start()
    bound = runner.addresses[0]
    print(f"pygateway listening on http://{host}:{bound[1]}", file=sys.stderr, flush=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()

    await gateway.close_streams()
    await runner.cleanup()
    await gateway.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description="Python BLE-over-HTTP gateway (bleak + aiohttp), the benchmark's baseline")
    parser.add_argument("--listen", default="127.0.0.1:8080", help="HOST:PORT (default 127.0.0.1:8080; port 0 picks one)")
    parser.add_argument("--adapter", default=None, help="hciN (default: the first powered adapter)")
    parser.add_argument("--keepalive", type=float, default=15.0, help="seconds between SSE keep-alive comments")
    parser.add_argument("--log-requests", action="store_true", help="one access-log line per request on stderr")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO if args.log_requests else logging.WARNING,
                        format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    raise_file_limit()
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
