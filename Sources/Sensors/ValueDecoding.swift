import BLE

/// How a characteristic's bytes become one measurement (`--mqtt-expose`): a field of a fixed
/// type at a byte offset, times an exact decimal scale — what the advertisement decoders do with
/// their fields, for a value a device serves over GATT.
///
///     ValueDecoding(type: .uint8, offset: 1)            // 2A37 heart rate: [0x06, 72] → 72
///     ValueDecoding(type: .sint16le, scale: 0.01)       // [0x34, 0x08] → 21.0
///     ValueDecoding(type: .uint8, mask: 0b110, shift: 1) // 2A37's flags [0x16]: contact status 3
public struct ValueDecoding: Sendable, Hashable {
    /// The field's type: integers by size, sign and byte order; IEEE 754 floats; the medical
    /// decimal floats of IEEE 11073-20601 (SFLOAT, FLOAT) by the names the Bluetooth SIG's GATT
    /// Specification Supplement gives them; UTF-8 text (the rest of the value, NULs at its end left out).
    public enum FieldType: String, Sendable, Hashable, CaseIterable {
        case uint8, sint8
        case uint16le, uint16be, sint16le, sint16be
        case uint24le, uint24be, sint24le, sint24be
        case uint32le, uint32be, sint32le, sint32be
        case float32le, float32be, float64le, float64be
        /// IEEE 11073 SFLOAT, little-endian: a 4-bit exponent of ten over a 12-bit mantissa, both
        /// signed (0xF172: 370 × 10⁻¹). NaN, NRes, ±INFINITY and the reserved value are no measurement.
        case medfloat16
        /// IEEE 11073 FLOAT, little-endian: an 8-bit exponent of ten over a 24-bit mantissa
        /// (Health Thermometer, Weight, Glucose, ...).
        case medfloat32
        case utf8

        /// Bytes the field takes; nil for text (all that is left).
        public var size: Int? {
            switch self {
            case .uint8, .sint8: 1
            case .uint16le, .uint16be, .sint16le, .sint16be, .medfloat16: 2
            case .uint24le, .uint24be, .sint24le, .sint24be: 3
            case .uint32le, .uint32be, .sint32le, .sint32be, .float32le, .float32be, .medfloat32: 4
            case .float64le, .float64be: 8
            case .utf8: nil
            }
        }

        public var isNumeric: Bool { self != .utf8 }

        var order: ByteReader.Order { rawValue.hasSuffix("be") ? .bigEndian : .littleEndian }
        var isSigned: Bool { rawValue.hasPrefix("sint") }
        var isUnsigned: Bool { rawValue.hasPrefix("uint") }
        var isFloat: Bool { rawValue.hasPrefix("float") }
    }

    public struct Invalid: Error, Equatable, CustomStringConvertible {
        public let description: String
    }

    public let type: FieldType
    public let offset: Int
    private let scale: Scale
    /// A bit field of an unsigned field: (raw & mask) >> shift, before the scale.
    private let mask: UInt64?
    private let shift: Int

    /// - Parameters:
    ///   - offset: where the field starts (0...511: an attribute value is at most 512 bytes).
    ///   - scale: what the raw number is multiplied by, a decimal of at most 9 places (0.01, 0.5, 10);
    ///     not for text.
    ///   - mask, shift: a bit field of an unsigned integer field (flags, packed states): the bits of
    ///     `mask` (1 to the field's largest value), moved down by `shift` (0 to its bits - 1).
    public init(type: FieldType, offset: Int = 0, scale: Double = 1, mask: Int? = nil, shift: Int? = nil) throws(Invalid) {
        guard (0...511).contains(offset) else { throw Invalid(description: "offset must be from 0 to 511, not \(offset)") }
        guard type.isNumeric || scale == 1 else { throw Invalid(description: "a utf8 value has no scale") }
        guard scale.isFinite, scale != 0, abs(scale) <= 1e9, let exact = Self.exact(scale) else {
            throw Invalid(description: "scale must be a non-zero decimal of at most 9 places, not \(scale)")
        }
        if mask != nil || shift != nil {
            guard type.isUnsigned, let size = type.size else {
                throw Invalid(description: "mask and shift take bits of an unsigned integer (uint8, uint16le, ...), not of \(type.rawValue)")
            }
            let largest = UInt64.max >> UInt64(64 - 8 * size)
            if let mask, mask < 1 || UInt64(mask) > largest {
                throw Invalid(description: "mask must be from 1 to \(largest) (the bits of \(type.rawValue)), not \(mask)")
            }
            if let shift, !(0..<8 * size).contains(shift) {
                throw Invalid(description: "shift must be from 0 to \(8 * size - 1) (the bits of \(type.rawValue)), not \(shift)")
            }
        }
        self.type = type
        self.offset = offset
        self.scale = exact
        self.mask = mask.map { UInt64($0) }
        self.shift = shift ?? 0
    }

    /// The measurement in `value`, or nil when the value is too short for the field, or the float is
    /// not a number (NaN, infinite, an 11073 NRes or reserved value: nothing a sensor entity can show).
    public func measurement(_ value: [UInt8], unit: String?) -> Measurement? {
        var reader = ByteReader(value)
        guard reader.read(offset) != nil else { return nil }
        switch type {
        case .utf8:
            var text = reader.remaining
            while text.last == 0 { text.removeLast() }
            return Measurement(.text(String(decoding: text, as: UTF8.self)), unit: unit)
        case .float32le, .float32be:
            guard let raw = reader.unsigned(4, type.order) else { return nil }
            let float = Float(bitPattern: UInt32(raw))
            // The float's shortest decimal (21.56, not 21.559999465942383), then scaled.
            guard float.isFinite, let shortest = Double("\(float)") else { return nil }
            return Measurement(.number(shortest * Double(scale.numerator) / Double(scale.denominator)), unit: unit)
        case .float64le, .float64be:
            guard let raw = reader.unsigned(8, type.order) else { return nil }
            let double = Double(bitPattern: raw)
            guard double.isFinite else { return nil }
            return Measurement(.number(double * Double(scale.numerator) / Double(scale.denominator)), unit: unit)
        case .medfloat16, .medfloat32:
            let size = type.size!
            guard let raw = reader.unsigned(size, .littleEndian),
                  let (mantissa, exponent) = Self.medfloat(raw, mantissaBits: size == 2 ? 12 : 24) else { return nil }
            return Measurement(decimal(mantissa, exponent: exponent), unit: unit)
        default:
            let size = type.size!
            let raw: Int64?
            if type.isSigned {
                raw = reader.signed(size, type.order)
            } else {
                raw = reader.unsigned(size, type.order).map { Int64(($0 & (mask ?? .max)) >> UInt64(shift)) }
            }
            return raw.map { Measurement(scale.value($0), unit: unit) }
        }
    }

    /// Why `value` has no measurement, for a log line.
    public func whyNoMeasurement(_ value: [UInt8]) -> String {
        if value.count < offset + (type.size ?? 0) {
            return "the value \(Hex.string(value)) is too short for \(type.rawValue) at offset \(offset)"
        }
        return "the \(type.rawValue) at offset \(offset) of \(Hex.string(value)) is no number (NaN, infinite, or reserved)"
    }

    /// The signed exponent (the bits above the mantissa) and mantissa of an IEEE 11073 float, or nil
    /// for its special values: exponent 0 with the mantissa 2^(n-1) - 1 (NaN), -2^(n-1) (NRes),
    /// 2^(n-1) - 2 (+INFINITY), -(2^(n-1) - 2) (-INFINITY) or -(2^(n-1) - 1) (reserved).
    static func medfloat(_ raw: UInt64, mantissaBits n: Int) -> (mantissa: Int64, exponent: Int)? {
        let exponentBits = n == 12 ? 4 : 8
        let mantissa = Int64(bitPattern: raw << UInt64(64 - n)) >> Int64(64 - n)
        let exponent = Int(Int64(bitPattern: raw << UInt64(64 - n - exponentBits)) >> Int64(64 - exponentBits))
        let top = Int64(1) << (n - 1)
        if exponent == 0, mantissa >= top - 2 || mantissa <= -(top - 2) { return nil }
        return (mantissa, exponent)
    }

    /// mantissa × 10^exponent × scale, as exactly as a double holds it: the decimal's digits are
    /// parsed once (one correct rounding), and a whole result stays an integer.
    func decimal(_ mantissa: Int64, exponent: Int) -> SensorValue {
        var places = 0
        var denominator = scale.denominator
        while denominator > 1 {
            denominator /= 10
            places += 1
        }
        let power = exponent - places
        let (digits, overflow) = mantissa.multipliedReportingOverflow(by: scale.numerator)
        // A scale of 10^12 or more: one rounding more, of a number no sensor entity shows in full anyway.
        guard !overflow else { return .number(Double("\(mantissa)e\(power)")! * Double(scale.numerator)) }
        if power >= 0 {
            var whole = digits
            for _ in 0..<power {
                let (next, over) = whole.multipliedReportingOverflow(by: 10)
                if over { return .number(Double("\(digits)e\(power)")!) }
                whole = next
            }
            return .integer(whole)
        }
        return .number(Double("\(digits)e\(power)")!)
    }

    /// `value` as numerator / 10^k, the smallest k (up to 9) that makes it whole.
    private static func exact(_ value: Double) -> Scale? {
        var denominator: Int64 = 1
        for _ in 0...9 {
            let scaled = value * Double(denominator)
            let whole = scaled.rounded()
            // Exact but for the rounding of the decimal to binary (about 1e-16 of it).
            if whole != 0, abs(scaled - whole) <= 1e-12 * abs(scaled) { return Scale(Int64(whole), denominator) }
            denominator *= 10
        }
        return nil
    }
}
