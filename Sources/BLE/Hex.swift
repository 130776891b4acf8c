/// Hexadecimal digits, shared by the UUID, address and value parsers (and the sensor decoders).
package enum Hex {
    /// The value of one ASCII hex digit (either case), or nil.
    static func digit(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// Bytes from an even number of hex digits; nil on an odd count or a non-hex character.
    package static func bytes(_ digits: some Collection<UInt8>) -> [UInt8]? {
        guard digits.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(digits.count / 2)
        var high: UInt8?
        for c in digits {
            guard let d = digit(c) else { return nil }
            if let h = high {
                out.append(h << 4 | d)
                high = nil
            } else {
                high = d
            }
        }
        return out
    }

    /// True when `utf8` starts with "0x" or "0X".
    static func hasPrefix0x(_ utf8: some Collection<UInt8>) -> Bool {
        var it = utf8.makeIterator()
        return it.next() == UInt8(ascii: "0") && (it.next().map { $0 | 0x20 } == UInt8(ascii: "x"))
    }

    private static let lower = Array("0123456789abcdef".utf8)
    private static let upper = Array("0123456789ABCDEF".utf8)

    /// Two hex digits per byte, no separators.
    package static func string(_ bytes: some Sequence<UInt8>, uppercase: Bool = false) -> String {
        let table = uppercase ? upper : lower
        var utf8: [UInt8] = []
        for b in bytes {
            utf8.append(table[Int(b >> 4)])
            utf8.append(table[Int(b & 0x0F)])
        }
        return String(decoding: utf8, as: UTF8.self)
    }

    /// `byteCount * 2` hex digits of `value`, e.g. (0x180D, 2) → "180d".
    package static func string(_ value: UInt64, byteCount: Int, uppercase: Bool = false) -> String {
        string(bigEndianBytes(value, count: byteCount), uppercase: uppercase)
    }

    /// Big-endian bytes of an unsigned integer, `count` least significant bytes.
    static func bigEndianBytes(_ value: UInt64, count: Int) -> [UInt8] {
        (0..<count).reversed().map { UInt8(truncatingIfNeeded: value >> (8 * UInt64($0))) }
    }

    /// Folds big-endian bytes into an integer (at most 8 bytes).
    static func integer(bigEndian bytes: some Sequence<UInt8>) -> UInt64 {
        bytes.reduce(0) { $0 << 8 | UInt64($1) }
    }
}
