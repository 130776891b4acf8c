import FoundationEssentials

/// How attribute values are written as text for clients.
public enum ValueFormat: String, Sendable, Hashable, CaseIterable {
    /// Two lowercase digits per byte, no separators.
    case hex
    /// Standard alphabet, with padding.
    case base64
    /// The bytes as UTF-8 text.
    case utf8

    /// Text for `bytes`. For `utf8`, invalid sequences become U+FFFD.
    public func encode(_ bytes: [UInt8]) -> String {
        switch self {
        case .hex: Hex.string(bytes)
        case .base64: Data(bytes).base64EncodedString()
        case .utf8: String(decoding: bytes, as: UTF8.self)
        }
    }

    /// Bytes from text. `hex` takes either case and an optional "0x", ignoring spaces, tabs,
    /// newlines and colons; `base64` wants the standard alphabet with padding and nothing else.
    /// Throws `invalidParameters` on anything else.
    public func decode(_ string: String) throws(BLEError) -> [UInt8] {
        switch self {
        case .hex:
            let ignored: Set<UInt8> = [0x20, 0x09, 0x0A, 0x0D, UInt8(ascii: ":")]
            var digits = string.utf8.filter { !ignored.contains($0) }[...]
            if Hex.hasPrefix0x(digits) { digits = digits.dropFirst(2) }
            guard digits.allSatisfy({ Hex.digit($0) != nil }) else {
                throw BLEError(.invalidParameters, "invalid hex value: only 0-9, a-f, A-F, spaces and colons are allowed")
            }
            // Every character is a digit now, so only an odd count remains to fail.
            guard let bytes = Hex.bytes(digits) else {
                throw BLEError(.invalidParameters, "invalid hex value: odd number of digits (\(digits.count))")
            }
            return bytes
        case .base64:
            guard let data = Data(base64Encoded: string) else {
                throw BLEError(.invalidParameters, "invalid base64 value: expected the standard alphabet with padding")
            }
            return Array(data)
        case .utf8:
            return Array(string.utf8)
        }
    }
}
