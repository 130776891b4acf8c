/// The management protocol's framing: every command and event is one datagram, a little-endian
/// header (code u16, controller index u16, parameter length u16) then the parameters
/// (mgmt-api.txt, "Packet Structures").
public enum Frame {
    public static let headerSize = 6
    /// The largest frame the header can describe.
    public static let maxSize = headerSize + Int(UInt16.max)

    /// A frame with `code`, for `controller`, carrying `parameters` (at most 65 535 bytes).
    public static func encode(code: UInt16, controller: ControllerIndex, parameters: [UInt8]) -> [UInt8] {
        precondition(parameters.count <= Int(UInt16.max), "a management frame carries at most 65535 parameter bytes")
        var frame: [UInt8] = []
        frame.reserveCapacity(headerSize + parameters.count)
        frame.appendLittleEndian(code)
        frame.appendLittleEndian(controller.rawValue)
        frame.appendLittleEndian(UInt16(parameters.count))
        frame += parameters
        return frame
    }

    /// A command frame (commands take no parameters here: the ones this module sends have none).
    public static func command(_ opcode: Opcode, controller: ControllerIndex = .none) -> [UInt8] {
        encode(code: opcode.rawValue, controller: controller, parameters: [])
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
}
