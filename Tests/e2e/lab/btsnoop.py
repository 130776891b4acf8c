"""btmon's files (`btmon -w FILE`): the btsnoop format with the Linux monitor's records (datalink
2001), read for what the real-BlueZ tests compare gattway with. Each record's flags are
(controller index << 16) | opcode (BlueZ's src/shared/btsnoop.h):

* 2 an HCI command, 3 an HCI event, each as the controller's transport carries it: the
  controller's LE Advertising Reports are the events, the scan's parameters the commands;
* 14 a management (control) socket opened, 17 a management event sent to one such socket: the
  kernel copies every event it sends a control socket to the monitor, marked with the socket's
  cookie, so the file holds the exact frames each socket read (a Device Found once per reader).

Plain python, no third-party module: it runs on the host (pytest) and in the guest."""
import struct

COMMAND, EVENT, CTRL_OPEN, CTRL_EVENT = 2, 3, 14, 17
DEVICE_FOUND, DISCOVERING, COMMAND_COMPLETE = 0x0012, 0x0013, 0x0001
DEVICE_CONNECTED, DEVICE_DISCONNECTED = 0x000B, 0x000C
HEADER = b"btsnoop\x00"


# btsnoop's timestamps count microseconds from the year 0; this one is 1970-01-01.
UNIX_EPOCH = 0x00DCDDB30F2F8000


def records(data):
    """[(index, opcode, payload, time)] of a btmon file's bytes, time in seconds since 1970 (the
    kernel's wall clock when it sent the packet to the monitor); a record cut short (the file read
    while btmon writes it) ends the list."""
    assert data[:8] == HEADER, "not a btsnoop file"
    version, datalink = struct.unpack_from(">II", data, 8)
    assert (version, datalink) == (1, 2001), f"btsnoop version {version}, datalink {datalink}: not btmon's monitor format"
    out, offset = [], 16
    while offset + 24 <= len(data):
        _, included, flags, _, stamp = struct.unpack_from(">IIIIq", data, offset)
        if offset + 24 + included > len(data):
            break
        out.append((flags >> 16, flags & 0xFFFF, data[offset + 24:offset + 24 + included], (stamp - UNIX_EPOCH) / 1e6))
        offset += 24 + included
    return out


def read(path):
    with open(path, "rb") as f:
        return records(f.read())


def address(raw):
    """Six bytes, least significant first, as AA:BB:CC:DD:EE:FF."""
    return ":".join(f"{b:02X}" for b in reversed(raw))


def significant(data):
    """AD bytes up to a zero length byte (the Core spec's early end; what follows is padding),
    as the kernel passes them on."""
    end = 0
    while end < len(data) and data[end] != 0:
        end += 1 + data[end]
    return bytes(data[:end]) if end <= len(data) else None


def ad_structures(data):
    """[(type, data)] of AD bytes; None when a structure runs past the end."""
    out, i = [], 0
    while i < len(data):
        length = data[i]
        if length == 0 or i + 1 + length > len(data):
            return None
        out.append((data[i + 1], bytes(data[i + 2:i + 1 + length])))
        i += 1 + length
    return out


def control_sockets(recs):
    """[(cookie, comm)] of the management sockets the file saw open, in order (those open when
    btmon started are replayed first). The kernel reuses a closed socket's cookie."""
    out = []
    for _, opcode, payload, _ in recs:
        if opcode == CTRL_OPEN and len(payload) >= 14:
            length = payload[13]
            out.append((struct.unpack_from("<I", payload)[0], payload[14:14 + length].split(b"\x00")[0].decode(errors="replace")))
    return out


def management_events(recs):
    """[(socket, frame, time)] of every management event sent to a socket: the socket as (cookie,
    comm) of its open, the frame as that socket read it: event code, controller index, parameter
    length (little-endian), the parameters."""
    out, sockets = [], {}
    for index, opcode, payload, time in recs:
        if opcode == CTRL_OPEN and len(payload) >= 14:
            cookie, length = struct.unpack_from("<I", payload)[0], payload[13]
            sockets[cookie] = (cookie, payload[14:14 + length].split(b"\x00")[0].decode(errors="replace"))
        elif opcode == CTRL_EVENT and len(payload) >= 6:
            cookie, code = struct.unpack_from("<IH", payload)
            parameters = payload[6:]
            out.append((sockets.get(cookie, (cookie, None)), struct.pack("<HHH", code, index, len(parameters)) + parameters, time))
    return out


def frames_to_others(recs, known=("bluetoothd", "btmgmt")):
    """[(socket, frame, time)] of the management events sent to sockets that are not bluetoothd's or
    btmgmt's: in the lab, gattway's. (A socket is named after the thread that opened it: gattway's
    shows as "oot.default-qos", the end of Dispatch's "com.apple.root.default-qos".)"""
    return [event for event in management_events(recs) if event[0][1] not in known]


def device_found(frame):
    """A Device Found frame's fields: controller, address, type (1 public, 2 random), rssi (None
    for 127), flags, data (the AD part)."""
    code, index, length = struct.unpack_from("<HHH", frame)
    assert code == DEVICE_FOUND and length == len(frame) - 6, frame.hex()
    p = frame[6:]
    rssi, flags, data_length = struct.unpack_from("<bIH", p, 7)
    assert data_length == len(p) - 14, frame.hex()
    return {"controller": index, "address": address(p[:6]), "type": p[6], "rssi": None if rssi == 127 else rssi,
            "flags": flags, "data": bytes(p[14:])}


# Legacy PDUs as LE Extended Advertising Reports name them (Core Vol 4 Part E 7.7.65.13).
LEGACY_EXTENDED = {0x13: "ADV_IND", 0x15: "ADV_DIRECT_IND", 0x12: "ADV_SCAN_IND", 0x10: "ADV_NONCONN_IND",
                   0x1B: "SCAN_RSP", 0x1A: "SCAN_RSP"}
LEGACY = {0: "ADV_IND", 1: "ADV_DIRECT_IND", 2: "ADV_SCAN_IND", 3: "ADV_NONCONN_IND", 4: "SCAN_RSP"}


def le_reports(recs, controller):
    """The LE Advertising Reports of `controller` (LE Meta event 0x3E, subevent 0x02 legacy or 0x0D
    extended), one dict per report: address, address_type (0 public, 1 random), pdu, extended,
    data as the controller reported it, t."""
    out = []
    for index, opcode, payload, t in recs:
        if index != controller or opcode != EVENT or len(payload) < 4 or payload[0] != 0x3E:
            continue
        subevent, p = payload[2], payload[3:]
        if subevent == 0x02:
            offset = 1
            for _ in range(p[0]):
                kind, address_type = p[offset], p[offset + 1]
                length = p[offset + 8]
                out.append({"address": address(p[offset + 2:offset + 8]), "address_type": address_type,
                            "pdu": LEGACY.get(kind, f"0x{kind:02x}"), "extended": False,
                            "data": bytes(p[offset + 9:offset + 9 + length]), "t": t})
                offset += 9 + length + 1
        elif subevent == 0x0D:
            offset = 1
            for _ in range(p[0]):
                kind = struct.unpack_from("<H", p, offset)[0]
                length = p[offset + 23]
                pdu = LEGACY_EXTENDED.get(kind & 0x1F) if kind & 0x10 else ("SCAN_RSP" if kind & 0x08 else f"EXT 0x{kind:04x}")
                out.append({"address": address(p[offset + 3:offset + 9]), "address_type": p[offset + 2], "pdu": pdu,
                            "extended": True, "data": bytes(p[offset + 24:offset + 24 + length]), "t": t})
                offset += 24 + length
    return out


def scan_settings(recs, controller):
    """What the host set for `controller`'s scanning, in order, each with its time:
    ("parameters", "active"|"passive", t) from LE Set (Extended) Scan Parameters, ("enable",
    True|False, t) from LE Set (Extended) Scan Enable."""
    out = []
    for index, opcode, payload, t in recs:
        if index != controller or opcode != COMMAND or len(payload) < 4:
            continue
        command = struct.unpack_from("<H", payload)[0]
        p = payload[3:]
        if command == 0x200B:  # LE Set Scan Parameters: type first
            out.append(("parameters", "active" if p[0] == 1 else "passive", t))
        elif command == 0x2041:  # LE Set Extended Scan Parameters: own type, policy, PHYs, then per PHY
            out.append(("parameters", "active" if p[3] == 1 else "passive", t))
        elif command in (0x200C, 0x2042):  # LE Set (Extended) Scan Enable: enable first
            out.append(("enable", p[0] == 1, t))
    return out
