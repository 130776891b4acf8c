// The return parameters of the commands the channel sends when it opens (mgmt-api.txt).

/// Read Management Version Information's answer.
public struct ManagementVersion: Sendable, Equatable, CustomStringConvertible {
    public var version: UInt8
    public var revision: UInt16

    public init(version: UInt8, revision: UInt16) {
        self.version = version
        self.revision = revision
    }

    /// Version (u8), revision (u16); nil for any other size.
    public init?(parameters: [UInt8]) {
        guard parameters.count == 3 else { return nil }
        version = parameters[0]
        revision = UInt16(parameters[1]) | UInt16(parameters[2]) << 8
    }

    /// The answer's parameters.
    public var parameters: [UInt8] { [version, UInt8(truncatingIfNeeded: revision), UInt8(truncatingIfNeeded: revision >> 8)] }

    /// "1.22".
    public var description: String { "\(version).\(revision)" }
}

/// Read Management Supported Commands' answer: what this socket may send and will be sent. The
/// kernel answers an untrusted socket (one opened without CAP_NET_ADMIN) with the short lists it
/// allows it, which have no Device Found.
public struct SupportedCommands: Sendable, Equatable {
    public var commands: [UInt16]
    public var events: [UInt16]

    public init(commands: [UInt16], events: [UInt16]) {
        self.commands = commands
        self.events = events
    }

    /// Command count (u16), event count (u16), the commands, the events (u16 each); nil when the
    /// counts do not match the size.
    public init?(parameters: [UInt8]) {
        guard let (counts, lists) = littleEndianU16s(parameters[...], count: 2),
              let (commands, rest) = littleEndianU16s(lists, count: Int(counts[0])),
              let (events, end) = littleEndianU16s(rest, count: Int(counts[1])), end.isEmpty else { return nil }
        self.commands = commands
        self.events = events
    }

    /// The answer's parameters.
    public var parameters: [UInt8] {
        var bytes: [UInt8] = []
        for value in [UInt16(commands.count), UInt16(events.count)] + commands + events { bytes.appendLittleEndian(value) }
        return bytes
    }

    /// The kernel sends this socket device-found events: it is trusted.
    public var includesDeviceFound: Bool { events.contains(EventCode.deviceFound.rawValue) }
}

/// Read Controller Index List's answer: the controllers the kernel knows.
public struct IndexList: Sendable, Equatable {
    public var controllers: [ControllerIndex]

    public init(_ controllers: [ControllerIndex]) { self.controllers = controllers }

    /// Count (u16), then the indexes (u16 each); nil when the count does not match the size.
    public init?(parameters: [UInt8]) {
        guard let (count, list) = littleEndianU16s(parameters[...], count: 1),
              let (indexes, end) = littleEndianU16s(list, count: Int(count[0])), end.isEmpty else { return nil }
        controllers = indexes.map(ControllerIndex.init(rawValue:))
    }

    /// The answer's parameters.
    public var parameters: [UInt8] {
        var bytes: [UInt8] = []
        for value in [UInt16(controllers.count)] + controllers.map(\.rawValue) { bytes.appendLittleEndian(value) }
        return bytes
    }
}

/// `count` little-endian u16s from the front of `bytes`, and what follows them; nil when too few.
func littleEndianU16s(_ bytes: ArraySlice<UInt8>, count: Int) -> ([UInt16], ArraySlice<UInt8>)? {
    guard bytes.count >= 2 * count else { return nil }
    var values: [UInt16] = []
    values.reserveCapacity(count)
    var i = bytes.startIndex
    for _ in 0..<count {
        values.append(UInt16(bytes[i]) | UInt16(bytes[i + 1]) << 8)
        i += 2
    }
    return (values, bytes[i...])
}
