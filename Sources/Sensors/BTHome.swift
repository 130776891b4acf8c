import AESCCM
import BLE
import FoundationEssentials

/// BTHome v2 (bthome.io/format): service data of UUID 0xFCD2, a device information byte, then
/// objects, each an id byte and a value whose length the id fixes (or, for text, raw and
/// commands, a length byte gives).
///
/// Unknown object ids: the format page asks senders to order objects by id and receivers to stop
/// at the first id they do not support, so that older receivers still read the older objects.
/// This decoder does that: it keeps what it decoded, stops, and reports the rest as `unparsed`
/// (an unknown button or dimmer event, command opcode or binary value stops it the same way).
/// A known object cut short is different: that payload is broken, and the whole advertisement
/// stays raw.
///
/// Encryption (bthome.io/encryption): bit 0 of the device information byte; the objects are then
/// AES-CCM ciphertext followed by a 4-byte counter and a 4-byte tag, with the nonce
/// MAC (6) ‖ UUID 0xFCD2 little-endian (2) ‖ device information (1) ‖ counter (4).
struct BTHome: PayloadDecoder {
    static let uuid: UInt16 = 0xFCD2
    var source: PayloadSource { .serviceData(Self.uuid) }

    private static let encryptedFlag: UInt8 = 0x01
    private static let versionShift: UInt8 = 5
    private static let version: UInt8 = 2
    private static let counterLength = 4
    private static let tagLength = 4

    func decode(_ payload: [UInt8], context: DecodingContext) -> SensorReading? {
        guard let info = payload.first, info >> Self.versionShift == Self.version else { return nil }
        let body = Array(payload.dropFirst())
        let key = context.address.flatMap { context.keys[$0] }
        guard info & Self.encryptedFlag != 0 else {
            guard let decoded = Self.objects(body) else { return nil }
            guard key == nil else { return SensorReading(format: .bthome, encryption: .refusedCleartext) }
            return Self.reading(decoded, encryption: .none)
        }
        guard body.count >= Self.counterLength + Self.tagLength else { return nil }
        guard let key, let address = context.address else {
            return SensorReading(format: .bthome, encryption: .missingKey)
        }
        let ciphertextEnd = body.count - Self.counterLength - Self.tagLength
        let counter = Array(body[ciphertextEnd..<ciphertextEnd + Self.counterLength])
        let sealed = Array(body[..<ciphertextEnd]) + body[(ciphertextEnd + Self.counterLength)...]
        guard let plaintext = AESCCM.open(
            sealed, key: key, nonce: Self.nonce(address: address, info: info, counter: counter),
            tagLength: Self.tagLength)
        else {
            return SensorReading(format: .bthome, encryption: .failed)
        }
        guard let decoded = Self.objects(plaintext) else { return nil }
        var reading = Self.reading(decoded, encryption: .decrypted)
        var counterReader = ByteReader(counter)
        reading.replayToken = counterReader.unsigned(Self.counterLength, .littleEndian)
            .map { ReplayToken(counter: UInt32($0), payload: payload) }
        return reading
    }

    /// The AES-CCM nonce of an encrypted payload.
    static func nonce(address: BluetoothAddress, info: UInt8, counter: [UInt8]) -> [UInt8] {
        address.bytes + [UInt8(truncatingIfNeeded: uuid), UInt8(uuid >> 8), info] + counter
    }

    private struct Decoded {
        var packetId: Int?
        var measurements = Measurements()
        var unparsed: [UInt8] = []
    }

    private static func reading(_ decoded: Decoded, encryption: Encryption) -> SensorReading {
        SensorReading(
            format: .bthome, packetId: decoded.packetId, encryption: encryption,
            measurements: decoded.measurements, unparsed: decoded.unparsed)
    }

    /// The objects of a cleartext payload; nil when a known object is cut short.
    private static func objects(_ bytes: [UInt8]) -> Decoded? {
        var reader = ByteReader(bytes)
        var decoded = Decoded()
        while !reader.isAtEnd {
            let start = reader.remaining
            guard let id = reader.byte(), let object = objects[id] else {
                decoded.unparsed = start
                return decoded
            }
            switch read(object, from: &reader) {
            case .measurement(let name, let measurement):
                decoded.measurements.add(name, measurement)
            case .packetId(let id):
                decoded.packetId = id
            case .notUnderstood:
                decoded.unparsed = start
                return decoded
            case .truncated:
                return nil
            }
        }
        return decoded
    }

    private enum Outcome {
        case measurement(String, Measurement)
        case packetId(Int)
        /// Well-formed as far as the length goes, but a value this version does not know.
        case notUnderstood
        case truncated
    }

    private static func read(_ object: Object, from reader: inout ByteReader) -> Outcome {
        switch object {
        case .packetId:
            guard let id = reader.byte() else { return .truncated }
            return .packetId(Int(id))
        case .number(let name, let size, let signed, let scale, let unit):
            let raw = signed ? reader.signed(size, .littleEndian) : reader.unsigned(size, .littleEndian).map(Int64.init)
            guard let raw else { return .truncated }
            return .measurement(name, Measurement(scale.value(raw), unit: unit))
        case .binary(let name):
            guard let value = reader.byte() else { return .truncated }
            guard value <= 1 else { return .notUnderstood }
            return .measurement(name, Measurement(.boolean(value == 1)))
        case .text:
            guard let length = reader.byte(), let bytes = reader.read(Int(length)) else { return .truncated }
            guard let text = String(validating: bytes, as: UTF8.self) else { return .notUnderstood }
            return .measurement("text", Measurement(.text(text)))
        case .raw:
            guard let length = reader.byte(), let bytes = reader.read(Int(length)) else { return .truncated }
            return .measurement("raw", Measurement(.text(Hex.string(bytes))))
        case .timestamp:
            guard let seconds = reader.unsigned(4, .littleEndian) else { return .truncated }
            let date = Date(timeIntervalSince1970: Double(seconds))
            return .measurement("timestamp", Measurement(.text(date.formatted(.iso8601))))
        case .firmwareVersion(let size):
            guard let parts = reader.read(size) else { return .truncated }
            let version = parts.reversed().map(String.init).joined(separator: ".")
            return .measurement("firmware_version", Measurement(.text(version)))
        case .button:
            guard let event = reader.byte() else { return .truncated }
            guard let name = buttonEvents[event] else { return .notUnderstood }
            return .measurement("button", Measurement(.text(name)))
        case .dimmer:
            guard let event = reader.byte(), let steps = reader.byte() else { return .truncated }
            guard let name = dimmerEvents[event] else { return .notUnderstood }
            return .measurement("dimmer", Measurement(.text(name), steps: event == 0 ? nil : Int(steps)))
        case .command:
            return command(from: &reader)
        }
    }

    /// Object 0x3B: a length byte (3 reserved bits, then the argument length), an opcode, arguments.
    private static func command(from reader: inout ByteReader) -> Outcome {
        guard let length = reader.byte(), let opcode = reader.byte(),
              let arguments = reader.read(Int(length & 0x1F)) else { return .truncated }
        guard length & 0xE0 == 0, let command = commands[opcode],
              arguments.count == (command.takesSteps ? 1 : 0) else { return .notUnderstood }
        return .measurement("command", Measurement(.text(command.name), steps: arguments.first.map(Int.init)))
    }
}
