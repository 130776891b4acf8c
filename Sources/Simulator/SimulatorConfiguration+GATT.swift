import BLE
import FoundationEssentials

extension SimulatorConfiguration {
    // A device's GATT database: its services, their characteristics and descriptors.

    public struct Service: Codable, Sendable, Equatable {
        public var uuid: BluetoothUUID
        public var primary: Bool
        /// The service declaration's handle; by default services follow each other from 0x000a
        /// (0x0001-0x0009 being the GAP and GATT services a BlueZ peripheral has, which
        /// bluetoothd does not export).
        public var handle: Int?
        public var characteristics: [Characteristic]

        public init(uuid: BluetoothUUID, primary: Bool = true, handle: Int? = nil, characteristics: [Characteristic] = []) {
            self.uuid = uuid
            self.primary = primary
            self.handle = handle
            self.characteristics = characteristics
        }

        enum CodingKeys: String, CodingKey, CaseIterable { case uuid, primary, handle, characteristics }

        public init(from decoder: any Decoder) throws {
            try decoder.rejectUnknownKeys(CodingKeys.self)
            let c = try decoder.container(keyedBy: CodingKeys.self)
            uuid = try c.decode(BluetoothUUID.self, forKey: .uuid)
            primary = try c.decode(.primary, default: true)
            handle = try c.decodeInt(.handle, default: nil, in: 1...0xFFFF)
            characteristics = try c.decode(.characteristics, default: [])
        }
    }

    /// How a characteristic's value changes by itself.
    public enum Generator: String, Codable, Sendable, CaseIterable {
        /// `[0x06, bpm]`, bpm wandering in 60...90; notifies every tick (default 1 s).
        case heartRate
        /// One byte counting down by 1 per tick (default 5 s) from the initial value, back to
        /// 100 after 0; notifies on every change.
        case batteryDrain
        /// A little-endian counter as wide as the initial value (4 bytes if empty), +1 per tick
        /// (default 1 s); notifies on every change.
        case counter
    }

    public struct Characteristic: Codable, Sendable, Equatable {
        /// Server-side flag strings as BlueZ's GattCharacteristic1 documents them; bluetoothd
        /// shows the central only the ATT properties they imply (encrypt-read → read).
        public static let knownFlags = [
            "broadcast", "read", "write-without-response", "write", "notify", "indicate", "authenticated-signed-writes",
            "extended-properties", "reliable-write", "writable-auxiliaries", "encrypt-read", "encrypt-write",
            "encrypt-notify", "encrypt-indicate", "encrypt-authenticated-read", "encrypt-authenticated-write",
            "encrypt-authenticated-notify", "encrypt-authenticated-indicate", "secure-read", "secure-write",
            "secure-notify", "secure-indicate", "authorize",
        ]

        public var uuid: BluetoothUUID
        public var flags: [String]
        public var value: HexBytes
        public var generator: Generator?
        /// Tick of the generator (1 ms at the fastest, for benchmarks); without one, the current value
        /// is notified at this interval.
        public var notifyIntervalMs: Int?
        /// Every accepted write comes back as a notification (an HM-10 style serial port).
        public var echo: Bool
        /// When set, only these values may be written; others fail with `rejectCode`.
        public var accept: [HexBytes]?
        public var rejectCode: UInt8
        public var descriptors: [Descriptor]

        public init(uuid: BluetoothUUID, flags: [String], value: HexBytes = [], generator: Generator? = nil,
                    notifyIntervalMs: Int? = nil, echo: Bool = false, accept: [HexBytes]? = nil, rejectCode: UInt8 = 0x80,
                    descriptors: [Descriptor] = []) {
            self.uuid = uuid
            self.flags = flags
            self.value = value
            self.generator = generator
            self.notifyIntervalMs = notifyIntervalMs
            self.echo = echo
            self.accept = accept
            self.rejectCode = rejectCode
            self.descriptors = descriptors
        }

        enum CodingKeys: String, CodingKey, CaseIterable {
            case uuid, flags, value, text, generator, notifyIntervalMs, echo, accept, rejectCode, descriptors
        }

        public init(from decoder: any Decoder) throws {
            try decoder.rejectUnknownKeys(CodingKeys.self)
            let c = try decoder.container(keyedBy: CodingKeys.self)
            uuid = try c.decode(BluetoothUUID.self, forKey: .uuid)
            flags = try c.decode(.flags, default: ["read"])
            for flag in flags where !Self.knownFlags.contains(flag) {
                throw DecodingError.dataCorruptedError(forKey: .flags, in: c,
                    debugDescription: "unknown flag \"\(flag)\" (known: \(Self.knownFlags.joined(separator: ", ")))")
            }
            value = try decodeValue(c, value: .value, text: .text)
            generator = try c.decodeIfPresent(Generator.self, forKey: .generator)
            notifyIntervalMs = try c.decodeInt(.notifyIntervalMs, default: nil, in: 1...3_600_000)
            echo = try c.decode(.echo, default: false)
            accept = try c.decodeIfPresent([HexBytes].self, forKey: .accept)
            let code = try c.decodeFlexibleInt(.rejectCode) ?? 0x80
            guard let byte = UInt8(exactly: code), byte != 0 else {
                throw DecodingError.dataCorruptedError(forKey: .rejectCode, in: c, debugDescription: "an ATT error code is 0x01...0xFF")
            }
            rejectCode = byte
            descriptors = try c.decode(.descriptors, default: [])
        }

        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(uuid, forKey: .uuid)
            try c.encode(flags, forKey: .flags)
            try c.encode(value, forKey: .value)
            try c.encodeIfPresent(generator, forKey: .generator)
            try c.encodeIfPresent(notifyIntervalMs, forKey: .notifyIntervalMs)
            try c.encode(echo, forKey: .echo)
            try c.encodeIfPresent(accept, forKey: .accept)
            try c.encode(Int(rejectCode), forKey: .rejectCode)
            try c.encode(descriptors, forKey: .descriptors)
        }
    }

    public struct Descriptor: Codable, Sendable, Equatable {
        public static let knownFlags = [
            "read", "write", "encrypt-read", "encrypt-write", "encrypt-authenticated-read",
            "encrypt-authenticated-write", "secure-read", "secure-write", "authorize",
        ]

        public var uuid: BluetoothUUID
        public var value: HexBytes
        public var flags: [String]

        public init(uuid: BluetoothUUID, value: HexBytes = [], flags: [String] = ["read"]) {
            self.uuid = uuid
            self.value = value
            self.flags = flags
        }

        enum CodingKeys: String, CodingKey, CaseIterable { case uuid, value, text, flags }

        public init(from decoder: any Decoder) throws {
            try decoder.rejectUnknownKeys(CodingKeys.self)
            let c = try decoder.container(keyedBy: CodingKeys.self)
            uuid = try c.decode(BluetoothUUID.self, forKey: .uuid)
            value = try decodeValue(c, value: .value, text: .text)
            flags = try c.decode(.flags, default: ["read"])
            for flag in flags where !Self.knownFlags.contains(flag) {
                throw DecodingError.dataCorruptedError(forKey: .flags, in: c,
                    debugDescription: "unknown flag \"\(flag)\" (known: \(Self.knownFlags.joined(separator: ", ")))")
            }
        }

        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(uuid, forKey: .uuid)
            try c.encode(value, forKey: .value)
            try c.encode(flags, forKey: .flags)
        }
    }
}

/// `value` (hex) or `text` (UTF-8), not both.
private func decodeValue<K: CodingKey>(_ c: KeyedDecodingContainer<K>, value: K, text: K) throws -> HexBytes {
    if c.contains(value) && c.contains(text) {
        throw DecodingError.dataCorruptedError(forKey: text, in: c, debugDescription: "give either \"value\" (hex) or \"text\", not both")
    }
    if let t = try c.decodeIfPresent(String.self, forKey: text) { return HexBytes(Array(t.utf8)) }
    return try c.decode(value, default: [])
}
