import BLE

/// The management protocol's framing: every command and event is one datagram, a little-endian
/// header (code u16, controller index u16, parameter length u16) then the parameters
/// (mgmt-api.txt, "Packet Structures").
public enum Frame {
    public static let headerSize = 6
    /// The largest frame the header can describe.
    public static let maxSize = headerSize + Int(UInt16.max)

    /// A frame with `code`, for `controller`, carrying `parameters` (at most 65 535 bytes).
    public static func encode(code: UInt16, controller: ControllerIndex, parameters: [UInt8]) -> [UInt8] {
        var frame: [UInt8] = []
        frame.reserveCapacity(headerSize + parameters.count)
        append(code: code, controller: controller, to: &frame) { $0 += parameters }
        return frame
    }

    /// Appends a frame to `buffer`: the header, then the parameters `write` appends (at most
    /// 65 535 bytes), whose count the header gets once they are in. A caller that keeps its buffer
    /// (`removeAll(keepingCapacity: true)`) encodes frame after frame without allocating.
    public static func append(code: UInt16, controller: ControllerIndex, to buffer: inout [UInt8],
                              parameters write: (inout [UInt8]) -> Void) {
        let start = buffer.count
        buffer.appendLittleEndian(code)
        buffer.appendLittleEndian(controller.rawValue)
        buffer.appendLittleEndian(UInt16(0))
        write(&buffer)
        buffer.setLittleEndian(UInt16(checkedLength: buffer.count - start - headerSize), at: start + 4)
    }

    /// A command frame.
    public static func command(_ opcode: Opcode, controller: ControllerIndex = .none, parameters: [UInt8] = []) -> [UInt8] {
        encode(code: opcode.rawValue, controller: controller, parameters: parameters)
    }

    /// Command Complete: `opcode` done with `status`, and its return parameters (what a kernel, or
    /// the simulator in its place, answers).
    public static func commandComplete(_ opcode: Opcode, _ status: Status, controller: ControllerIndex,
                                       parameters: [UInt8] = []) -> [UInt8] {
        var frame: [UInt8] = []
        append(code: EventCode.commandComplete.rawValue, controller: controller, to: &frame) {
            $0.appendLittleEndian(opcode.rawValue)
            $0.append(status.rawValue)
            $0 += parameters
        }
        return frame
    }

    /// Command Status: `opcode` failed early with `status`.
    public static func commandStatus(_ opcode: Opcode, _ status: Status, controller: ControllerIndex) -> [UInt8] {
        var frame: [UInt8] = []
        append(code: EventCode.commandStatus.rawValue, controller: controller, to: &frame) {
            $0.appendLittleEndian(opcode.rawValue)
            $0.append(status.rawValue)
        }
        return frame
    }
}

/// Why a frame was dropped.
public enum FrameError: Error, Equatable, Sendable, CustomStringConvertible {
    /// Fewer bytes than the header.
    case short(count: Int)
    /// The header's parameter length is not what the datagram carries (truncated, or bytes after).
    case lengthMismatch(declared: Int, carried: Int)
    /// The parameters do not fit the event's format.
    case malformed(EventCode, String)

    public var description: String {
        switch self {
        case .short(let count): "a frame of \(count) bytes, shorter than the 6-byte header"
        case .lengthMismatch(let declared, let carried): "the header declares \(declared) parameter bytes, the frame carries \(carried)"
        case .malformed(let code, let why): "\(code): \(why)"
        }
    }
}

/// Little-endian reads over one frame's bytes, each checked against the end.
struct ByteReader {
    let bytes: UnsafeRawBufferPointer
    private(set) var offset = 0

    init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    var remaining: Int { bytes.count - offset }

    mutating func u8() -> UInt8? {
        guard remaining >= 1 else { return nil }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func u16() -> UInt16? {
        guard remaining >= 2 else { return nil }
        defer { offset += 2 }
        return UInt16(bytes[offset]) | UInt16(bytes[offset + 1]) << 8
    }

    mutating func u32() -> UInt32? {
        guard let low = u16(), let high = u16() else { return nil }
        return UInt32(low) | UInt32(high) << 16
    }

    /// The next `count` bytes.
    mutating func take(_ count: Int) -> UnsafeRawBufferPointer? {
        guard count >= 0, remaining >= count else { return nil }
        defer { offset += count }
        return UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + count])
    }

    /// All that is left.
    mutating func rest() -> UnsafeRawBufferPointer {
        take(remaining)!
    }

    /// The rest of the frame, which the u16 `length` read before it must count exactly.
    mutating func counted(_ length: UInt16, _ event: EventCode) throws(FrameError) -> UnsafeRawBufferPointer {
        guard Int(length) == remaining else { throw .malformed(event, "the data length says \(length) bytes, \(remaining) follow") }
        return rest()
    }

    /// An address (least significant byte first) and its type's byte; nil when the bytes run out.
    mutating func address() -> (BluetoothAddress, type: UInt8)? {
        guard let wire = take(6), let type = u8() else { return nil }
        return (BluetoothAddress(bytes: wire.reversed())!, type)
    }
}

extension Array where Element == UInt8 {
    mutating func appendLittleEndian(_ value: UInt16) {
        append(UInt8(truncatingIfNeeded: value))
        append(UInt8(truncatingIfNeeded: value >> 8))
    }

    mutating func appendLittleEndian(_ value: UInt32) {
        appendLittleEndian(UInt16(truncatingIfNeeded: value))
        appendLittleEndian(UInt16(truncatingIfNeeded: value >> 16))
    }

    mutating func setLittleEndian(_ value: UInt16, at index: Int) {
        self[index] = UInt8(truncatingIfNeeded: value)
        self[index + 1] = UInt8(truncatingIfNeeded: value >> 8)
    }

    /// An address as frames carry it: least significant byte first, then its type.
    mutating func append(_ address: BluetoothAddress, _ type: AddressType) {
        self += address.bytes.reversed()
        append(type.rawValue)
    }

    /// A u16 length, then what `write` appends (the data of an event's AD or EIR part), counted.
    mutating func appendCounted(_ write: (inout [UInt8]) -> Void) {
        let start = count
        appendLittleEndian(UInt16(0))
        write(&self)
        setLittleEndian(UInt16(checkedLength: count - start - 2), at: start)
    }
}

extension UInt16 {
    /// A frame's length field; a longer part is a bug of the encoder's caller.
    init(checkedLength length: Int) {
        precondition(length <= Int(UInt16.max), "a management frame's part is at most 65535 bytes, not \(length)")
        self.init(length)
    }
}
