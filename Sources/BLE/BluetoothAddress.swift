/// A 48-bit Bluetooth device address, written "AA:BB:CC:DD:EE:FF" (most significant byte first).
public struct BluetoothAddress: Sendable, Hashable, Comparable {
    /// The address in the low 48 bits.
    private let value: UInt64

    /// 6 bytes, most significant first; nil for any other count.
    public init?(bytes: [UInt8]) {
        guard bytes.count == 6 else { return nil }
        value = Hex.integer(bigEndian: bytes)
    }

    /// Parses six two-digit hex groups separated by ':' or '-' (one kind throughout), any case.
    public init?(_ string: String) {
        self.init(groups: Substring(string).utf8, separators: [UInt8(ascii: ":"), UInt8(ascii: "-")])
    }

    /// Parses six two-digit hex groups separated by `separator` ("AA_BB_CC_DD_EE_FF" with "_").
    public init?(_ text: Substring, separator: Unicode.Scalar) {
        guard separator.isASCII else { return nil }
        self.init(groups: text.utf8, separators: [UInt8(separator.value)])
    }

    /// "XX?XX?XX?XX?XX?XX" where every '?' is the same character, one of `separators`.
    private init?(groups utf8: Substring.UTF8View, separators: Set<UInt8>) {
        guard utf8.count == 17 else { return nil }
        var digits: [UInt8] = []
        var separator: UInt8?
        for (i, c) in utf8.enumerated() {
            guard i % 3 == 2 else {
                digits.append(c)
                continue
            }
            guard separators.contains(c), separator == nil || separator == c else { return nil }
            separator = c
        }
        guard let bytes = Hex.bytes(digits) else { return nil }
        self.init(bytes: bytes)
    }

    /// 6 bytes, most significant first.
    public var bytes: [UInt8] { Hex.bigEndianBytes(value, count: 6) }

    /// The address as a 48-bit integer (AA:BB:CC:DD:EE:FF is 0xAABBCCDDEEFF), as the ESPHome API
    /// carries it.
    public var integer: UInt64 { value }

    /// From a 48-bit integer; nil when it has more bits.
    public init?(integer: UInt64) {
        guard integer >> 48 == 0 else { return nil }
        value = integer
    }

    /// The six uppercase groups joined by `separator` ("AA_BB_CC_DD_EE_FF" with "_").
    public func joined(by separator: String) -> String {
        bytes.map { Hex.string([$0], uppercase: true) }.joined(separator: separator)
    }

    public static func < (lhs: BluetoothAddress, rhs: BluetoothAddress) -> Bool {
        lhs.value < rhs.value
    }
}

extension BluetoothAddress: LosslessStringConvertible {
    /// "AA:BB:CC:DD:EE:FF", uppercase.
    public var description: String { joined(by: ":") }
}

extension BluetoothAddress: Codable {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let string = try container.decode(String.self)
        guard let address = BluetoothAddress(string) else {
            throw DecodingError.dataCorrupted(.init(
                codingPath: decoder.codingPath,
                debugDescription: "invalid Bluetooth address \"\(string)\": expected AA:BB:CC:DD:EE:FF"))
        }
        self = address
    }

    /// Encodes `description`.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}
