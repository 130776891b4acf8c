import BLE
import Glibc
import Management

/// Lowercase hex, no separators.
func hex(_ bytes: some Sequence<UInt8>) -> String { Hex.string(bytes) }

/// `digits` lowercase hex digits (an even number).
func hex(_ value: some BinaryInteger, digits: Int) -> String { Hex.string(UInt64(value), byteCount: digits / 2) }

/// Bytes from hex digits with spaces anywhere; nil for anything else.
func bytes(hex text: some StringProtocol) -> [UInt8]? {
    let digits = Array(text.utf8.filter { $0 != UInt8(ascii: " ") && $0 != UInt8(ascii: "\t") })
    guard digits.count % 2 == 0 else { return nil }
    var out: [UInt8] = []
    for i in stride(from: 0, to: digits.count, by: 2) {
        guard let byte = UInt8(String(decoding: digits[i..<i + 2], as: UTF8.self), radix: 16) else { return nil }
        out.append(byte)
    }
    return out
}

/// What the parser makes of a frame, in the words of Frames/*.hex.
func outcome(_ frame: [UInt8]) -> String {
    guard let event = try? Event(parsing: frame) else { return "dropped" }
    switch event {
    case .deviceFound(let found):
        return outcome(found)
    case .deviceConnected(let connected):
        return "device-connected \(connected.controller) \(connected.address) \(connected.addressType)"
            + " flags=0x\(hex(connected.flags.rawValue, digits: 8)) ad=\(outcome(connected.advertisingData, dropped: connected.advertisingDataDropped))"
    case .deviceDisconnected(let disconnected):
        return "device-disconnected \(disconnected.controller) \(disconnected.address) \(disconnected.addressType)"
            + " reason=0x\(hex(disconnected.reason.rawValue, digits: 2))"
    case .commandComplete(let opcode, let status, let controller, let parameters):
        return "command-complete 0x\(hex(opcode.rawValue, digits: 4)) \(controller) status=0x\(hex(status.rawValue, digits: 2))"
            + " params=\(hex(parameters))"
    case .commandStatus(let opcode, let status, let controller):
        return "command-status 0x\(hex(opcode.rawValue, digits: 4)) \(controller) status=0x\(hex(status.rawValue, digits: 2))"
    case .index(.added(let controller)):
        return "index-added \(controller)"
    case .index(.removed(let controller)):
        return "index-removed \(controller)"
    case .other(let code, let controller):
        return "other 0x\(hex(code.rawValue, digits: 4)) \(controller)"
    }
}

func outcome(_ found: DeviceFound) -> String {
    let kind = found.monitor.map { "monitor-device-found handle=\($0)" } ?? "device-found"
    return "\(kind) \(found.controller) \(found.address) \(found.addressType) rssi=\(found.rssi.map(String.init) ?? "none")"
        + " flags=0x\(hex(found.flags.rawValue, digits: 8)) ad=\(outcome(found.advertisingData, dropped: found.advertisingDataDropped))"
}

/// "[TT:DATA]..." or "dropped".
func outcome(_ data: AdvertisingData, dropped: Bool) -> String {
    dropped ? "dropped" : data.structures.map { "[\(hex($0.type, digits: 2)):\(hex($0.data))]" }.joined()
}

/// A device found on `controller` with these AD structures, as a frame.
func deviceFound(_ controller: UInt16, _ address: String, _ type: AddressType = .leRandom, rssi: Int? = -50,
                 ad structures: [(type: UInt8, data: [UInt8])] = [(0x01, [0x06])]) -> DeviceFound {
    DeviceFound(controller: ControllerIndex(controller), address: BluetoothAddress(address)!, addressType: type, rssi: rssi,
                advertisingData: AdvertisingData(structures))
}

/// Two connected sockets that keep each write a frame of its own, as the management socket does.
func framePair() -> (channel: Int32, kernel: Int32) {
    var fds: [Int32] = [-1, -1]
    let made = socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds)
    precondition(made == 0, "socketpair: \(String(cString: strerror(errno)))")
    return (fds[0], fds[1])
}

/// Writes one frame; false when the other end is gone.
@discardableResult
func write(_ fd: Int32, _ frame: [UInt8]) -> Bool {
    send(fd, frame, frame.count, Int32(MSG_NOSIGNAL)) == frame.count
}

/// Whether the other end of `fd` has closed within `timeout` (its hang-up is an event: no sleep).
func hungUp(_ fd: Int32, within timeout: Duration) -> Bool {
    var watched = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
    let milliseconds = Int32(timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)
    while true {
        let ready = poll(&watched, 1, milliseconds)
        if ready < 0 && errno == EINTR { continue }
        guard ready > 0 else { return false }
        if watched.revents & Int16(POLLHUP) != 0 { return true }
        // Frames still waiting: read them, look again.
        var scratch = [UInt8](repeating: 0, count: 70_000)
        if recv(fd, &scratch, scratch.count, Int32(MSG_DONTWAIT)) == 0 { return true }
    }
}
