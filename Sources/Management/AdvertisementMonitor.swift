import BLE

// The advertisement monitor commands (mgmt-api.txt: Read Advertisement Monitor Features, Add
// Advertisement Patterns Monitor, Remove Advertisement Monitor): a monitor added to a controller
// makes the kernel scan passively (no scan requests) whenever no discovery runs, and report what
// it hears as Advertisement Monitor Device Found.

/// One pattern of a monitor: an AD structure of `type` whose data holds `value` at `offset`.
public struct AdvertisementPattern: Sendable, Hashable, CustomStringConvertible {
    public let type: UInt8
    public let offset: UInt8
    public let value: [UInt8]

    /// What a pattern may look into: a legacy advertisement's 31 bytes (HCI_MAX_AD_LENGTH).
    public static let maxLength = 31
    /// Type, offset, length, then the value padded to `maxLength`.
    static let wireSize = 3 + maxLength

    /// Nil for what the kernel refuses: no value, or one past the 31 bytes.
    public init?(type: UInt8, offset: UInt8 = 0, value: [UInt8]) {
        guard !value.isEmpty, Int(offset) + value.count <= Self.maxLength else { return nil }
        self.type = type
        self.offset = offset
        self.value = value
    }

    /// "01@0=06".
    public var description: String { "\(Hex.string([type]))@\(offset)=\(Hex.string(value))" }
}

/// A monitor's commands and answers.
public enum AdvertisementMonitor {
    /// The most patterns one monitor takes (MGMT_ADV_MONITOR_MAX_PATTERNS).
    public static let maxPatterns = 16

    /// Patterns that match what nearly every advertiser sends: its Flags (0x01) with the values
    /// usual for LE-only devices (general or limited discoverable, BR/EDR not supported, with or
    /// without simultaneous LE and BR/EDR bits), as Home Assistant's passive scanner asks BlueZ.
    /// A kernel that filters in software (no offloading controller) reports every advertisement
    /// whatever the patterns; an offloading controller only those that match.
    public static let everyAdvertisement: [AdvertisementPattern] = [0x02, 0x04, 0x06, 0x1A].map {
        AdvertisementPattern(type: 0x01, value: [$0])!
    }

    /// Add Advertisement Patterns Monitor's parameters: the count (u8), then each pattern's AD
    /// type, offset, length and value padded to 31 bytes.
    public static func addParameters(_ patterns: [AdvertisementPattern]) -> [UInt8] {
        precondition((1...maxPatterns).contains(patterns.count), "a monitor has 1 to \(maxPatterns) patterns")
        var bytes = [UInt8(patterns.count)]
        for p in patterns {
            bytes += [p.type, p.offset, UInt8(p.value.count)] + p.value
            bytes += [UInt8](repeating: 0, count: AdvertisementPattern.maxLength - p.value.count)
        }
        return bytes
    }

    /// The patterns of Add Advertisement Patterns Monitor's parameters, checked as the kernel
    /// checks them; nil when it would answer Invalid Parameters.
    public static func patterns(parsing parameters: [UInt8]) -> [AdvertisementPattern]? {
        guard let count = parameters.first, (1...maxPatterns).contains(Int(count)),
              parameters.count == 1 + Int(count) * AdvertisementPattern.wireSize else { return nil }
        var patterns: [AdvertisementPattern] = []
        for i in 0..<Int(count) {
            let start = 1 + i * AdvertisementPattern.wireSize
            let length = Int(parameters[start + 2])
            guard length <= AdvertisementPattern.maxLength,
                  let pattern = AdvertisementPattern(type: parameters[start], offset: parameters[start + 1],
                                                     value: Array(parameters[start + 3..<start + 3 + length])) else { return nil }
            patterns.append(pattern)
        }
        return patterns
    }

    /// A monitor handle as commands and answers carry it (u16); Remove Advertisement Monitor with
    /// handle 0 removes every monitor.
    public static func handleParameters(_ handle: UInt16) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.appendLittleEndian(handle)
        return bytes
    }

    /// The handle an answer carries; nil for any other size.
    public static func handle(parsing parameters: [UInt8]) -> UInt16? {
        guard parameters.count == 2 else { return nil }
        return UInt16(parameters[0]) | UInt16(parameters[1]) << 8
    }
}

/// Read Advertisement Monitor Features' answer.
public struct AdvertisementMonitorFeatures: Sendable, Equatable {
    /// Offloading the controller supports (bit 0: OR patterns, Microsoft's extension).
    public var supported: UInt32
    public var enabled: UInt32
    public var maxHandles: UInt16
    public var maxPatterns: UInt8
    /// The monitors the controller has now (anyone's).
    public var handles: [UInt16]

    public init(supported: UInt32 = 0, enabled: UInt32 = 0, maxHandles: UInt16, maxPatterns: UInt8, handles: [UInt16]) {
        self.supported = supported
        self.enabled = enabled
        self.maxHandles = maxHandles
        self.maxPatterns = maxPatterns
        self.handles = handles
    }

    /// Supported (u32), enabled (u32), max handles (u16), max patterns (u8), handle count (u16),
    /// the handles (u16 each); nil when the sizes do not match.
    public init?(parameters: [UInt8]) {
        guard parameters.count >= 13 else { return nil }
        func u32(_ i: Int) -> UInt32 { (0..<4).reduce(0) { $0 | UInt32(parameters[i + $1]) << (8 * $1) } }
        guard let (counts, rest) = littleEndianU16s(parameters[8...], count: 1),
              let maxPatterns = rest.first,
              let (count, list) = littleEndianU16s(rest.dropFirst(), count: 1),
              let (handles, end) = littleEndianU16s(list, count: Int(count[0])), end.isEmpty else { return nil }
        supported = u32(0)
        enabled = u32(4)
        maxHandles = counts[0]
        self.maxPatterns = maxPatterns
        self.handles = handles
    }

    /// The answer's parameters.
    public var parameters: [UInt8] {
        var bytes: [UInt8] = []
        bytes.appendLittleEndian(supported)
        bytes.appendLittleEndian(enabled)
        bytes.appendLittleEndian(maxHandles)
        bytes.append(maxPatterns)
        bytes.appendLittleEndian(UInt16(handles.count))
        for handle in handles { bytes.appendLittleEndian(handle) }
        return bytes
    }

    /// Another monitor fits.
    public var hasRoom: Bool { handles.count < Int(maxHandles) }
}
