/// A 128-bit Bluetooth UUID. 16- and 32-bit short forms are expanded with the Bluetooth Base UUID
/// 00000000-0000-1000-8000-00805F9B34FB, so every spelling of one UUID compares equal.
public struct BluetoothUUID: Sendable, Hashable, Comparable {
    // Big-endian halves: `high` holds bytes 0...7, `low` bytes 8...15.
    private let high: UInt64
    private let low: UInt64

    // The Base UUID with the 32-bit slot (bytes 0...3) zeroed.
    private static let baseHigh: UInt64 = 0x0000_0000_0000_1000
    private static let baseLow: UInt64 = 0x8000_0080_5F9B_34FB

    /// A 16-bit assigned number, e.g. 0x180D.
    public init(uint16: UInt16) {
        self.init(uint32: UInt32(uint16))
    }

    /// A 32-bit assigned number.
    public init(uint32: UInt32) {
        high = UInt64(uint32) << 32 | Self.baseHigh
        low = Self.baseLow
    }

    /// 16 bytes, most significant first (the order of the written form); nil for any other count.
    public init?(bytes: [UInt8]) {
        guard bytes.count == 16 else { return nil }
        high = Hex.integer(bigEndian: bytes[0..<8])
        low = Hex.integer(bigEndian: bytes[8..<16])
    }

    /// Parses "180D", "0x180d" (16-bit), "0000180D" (32-bit, also with "0x"), the dashed
    /// 36-character form and the same 32 hex digits without dashes. Any case; no surrounding spaces.
    public init?(_ string: String) {
        var utf8 = Substring(string).utf8
        if utf8.count == 6 || utf8.count == 10, Hex.hasPrefix0x(utf8) {
            utf8 = utf8.dropFirst(2)
        }
        switch utf8.count {
        case 4, 8:
            guard let bytes = Hex.bytes(utf8) else { return nil }
            self.init(uint32: UInt32(Hex.integer(bigEndian: bytes)))
        case 32:
            guard let bytes = Hex.bytes(utf8) else { return nil }
            self.init(bytes: bytes)
        case 36:
            let dashes: Set<Int> = [8, 13, 18, 23]
            var digits: [UInt8] = []
            for (i, c) in utf8.enumerated() {
                if dashes.contains(i) {
                    guard c == UInt8(ascii: "-") else { return nil }
                } else {
                    digits.append(c)
                }
            }
            guard let bytes = Hex.bytes(digits) else { return nil }
            self.init(bytes: bytes)
        default:
            return nil
        }
    }

    /// 16 bytes, most significant first.
    public var bytes: [UInt8] {
        Hex.bigEndianBytes(high, count: 8) + Hex.bigEndianBytes(low, count: 8)
    }

    /// The canonical lowercase dashed form, as BlueZ writes it:
    /// "0000180d-0000-1000-8000-00805f9b34fb".
    public var uuidString: String {
        let hex = Array(Hex.string(bytes).utf8)
        var out: [UInt8] = []
        out.reserveCapacity(36)
        for (i, c) in hex.enumerated() {
            if i == 8 || i == 12 || i == 16 || i == 20 { out.append(UInt8(ascii: "-")) }
            out.append(c)
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The assigned number when this is a Base UUID, else nil.
    public var uint32: UInt32? {
        guard low == Self.baseLow, high & 0xFFFF_FFFF == Self.baseHigh else { return nil }
        return UInt32(truncatingIfNeeded: high >> 32)
    }

    /// The 16-bit assigned number when this is a 16-bit Base UUID, else nil.
    public var uint16: UInt16? {
        uint32.flatMap { UInt16(exactly: $0) }
    }

    /// "180d" (4 lowercase hex digits) for a 16-bit Base UUID, 8 digits for a 32-bit one, else nil.
    public var shortForm: String? {
        if let short = uint16 { return Hex.string(UInt64(short), byteCount: 2) }
        if let short = uint32 { return Hex.string(UInt64(short), byteCount: 4) }
        return nil
    }

    public static func < (lhs: BluetoothUUID, rhs: BluetoothUUID) -> Bool {
        (lhs.high, lhs.low) < (rhs.high, rhs.low)
    }
}

extension BluetoothUUID: LosslessStringConvertible {
    /// Same as `uuidString`.
    public var description: String { uuidString }
}

extension BluetoothUUID: Codable {
    /// Decodes any form `init?(_:)` accepts.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let string = try container.decode(String.self)
        guard let uuid = BluetoothUUID(string) else {
            throw DecodingError.dataCorrupted(.init(
                codingPath: decoder.codingPath,
                debugDescription: "invalid Bluetooth UUID \"\(string)\": expected 4 or 8 hex digits "
                    + "(optionally 0x-prefixed), 32 hex digits, or the dashed 8-4-4-4-12 form"))
        }
        self = uuid
    }

    /// Encodes `uuidString`.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(uuidString)
    }
}

extension BluetoothUUID {
    /// The Bluetooth SIG name of a few common services, characteristics and descriptors;
    /// nil for everything else.
    public var name: String? {
        switch uint16 {
        // Services
        case 0x1800: "Generic Access"
        case 0x1801: "Generic Attribute"
        case 0x1802: "Immediate Alert"
        case 0x1803: "Link Loss"
        case 0x1804: "Tx Power"
        case 0x1805: "Current Time"
        case 0x1809: "Health Thermometer"
        case 0x180A: "Device Information"
        case 0x180D: "Heart Rate"
        case 0x180F: "Battery"
        case 0x1812: "Human Interface Device"
        case 0x1816: "Cycling Speed and Cadence"
        case 0x1818: "Cycling Power"
        case 0x181A: "Environmental Sensing"
        // Characteristics
        case 0x2A00: "Device Name"
        case 0x2A01: "Appearance"
        case 0x2A04: "Peripheral Preferred Connection Parameters"
        case 0x2A05: "Service Changed"
        case 0x2A19: "Battery Level"
        case 0x2A1C: "Temperature Measurement"
        case 0x2A23: "System ID"
        case 0x2A24: "Model Number String"
        case 0x2A25: "Serial Number String"
        case 0x2A26: "Firmware Revision String"
        case 0x2A27: "Hardware Revision String"
        case 0x2A28: "Software Revision String"
        case 0x2A29: "Manufacturer Name String"
        case 0x2A37: "Heart Rate Measurement"
        case 0x2A38: "Body Sensor Location"
        case 0x2A39: "Heart Rate Control Point"
        case 0x2A6E: "Temperature"
        case 0x2A6F: "Humidity"
        // Descriptors
        case 0x2900: "Characteristic Extended Properties"
        case 0x2901: "Characteristic User Description"
        case 0x2902: "Client Characteristic Configuration"
        case 0x2903: "Server Characteristic Configuration"
        case 0x2904: "Characteristic Presentation Format"
        default: nil
        }
    }
}
