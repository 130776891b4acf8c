/// The API's pre-shared key: 32 bytes, written in base64 (ESPHome's `api: encryption: key:`,
/// and what a client such as Home Assistant is given).
public struct EncryptionKey: Sendable, Equatable {
    public let bytes: [UInt8]

    /// nil unless `base64` decodes to exactly 32 bytes.
    public init?(base64: String) {
        guard let bytes = Crypto.base64Decode(base64), bytes.count == Crypto.keyLength else { return nil }
        self.bytes = bytes
    }

    init(bytes: [UInt8]) {
        precondition(bytes.count == Crypto.keyLength)
        self.bytes = bytes
    }
}
