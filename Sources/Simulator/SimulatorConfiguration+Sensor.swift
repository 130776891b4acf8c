import BLE

extension SimulatorConfiguration {
    /// A device that advertises sensor readings: every `intervalMs` it measures again (values
    /// drift a little, its packet counter goes up) and its advertisements carry the new payload.
    ///
    /// JSON (`format` required; `bindKey` only for bthome and mibeacon, and then every payload is
    /// encrypted):
    /// ```
    /// "sensor": { "format": "bthome", "intervalMs": 2000, "bindKey": "67617474776179206465…" }
    /// ```
    public struct Sensor: Codable, Sendable, Equatable {
        /// The advertisement formats the simulator can send; the raw values are the names the
        /// gateway's decoders report.
        public enum Format: String, Codable, Sendable, CaseIterable {
            /// BTHome v2 service data (0xFCD2): packet id, battery, temperature, humidity, pressure, voltage.
            case bthome
            /// atc1441's custom thermometer firmware (0x181A, 13 bytes).
            case atc1441
            /// pvvx's custom thermometer firmware (0x181A, 15 bytes).
            case pvvx
            /// Xiaomi MiBeacon (0xFE95): version 2 in the clear, temperature and humidity, battery;
            /// or, with a bind key, version 5 encrypted, temperature and humidity.
            case mibeacon
            /// RuuviTag data format 5 (manufacturer data 0x0499).
            case ruuviRAWv2 = "ruuvi-rawv2"
            /// Eddystone-TLM, unencrypted (0xFEAA): battery voltage, temperature, advertisements
            /// sent and time since power-on.
            case eddystoneTLM = "eddystone-tlm"

            /// Whether payloads can be encrypted with a `bindKey`.
            var encrypts: Bool { self == .bthome || self == .mibeacon }

            /// Where in the advertisement the format's payload goes.
            var slot: AdvertisingSlot {
                switch self {
                case .bthome: .serviceData(BluetoothUUID(uint16: 0xFCD2))
                case .atc1441, .pvvx: .serviceData(BluetoothUUID(uint16: 0x181A))
                case .mibeacon: .serviceData(BluetoothUUID(uint16: 0xFE95))
                case .ruuviRAWv2: .manufacturerData(0x0499)
                case .eddystoneTLM: .serviceData(BluetoothUUID(uint16: 0xFEAA))
                }
            }
        }

        /// The bind key of the built-in encrypted devices (BTHome and MiBeacon): "gattway demo key" in ASCII.
        public static let demoBindKey: HexBytes = HexBytes(Array("gattway demo key".utf8))

        public var format: Format
        /// How often the sensor measures; its advertisements repeat the latest payload in between.
        public var intervalMs: Int
        /// The AES-CCM bind key (16 bytes) of a BTHome or MiBeacon sensor: payloads are encrypted with it.
        public var bindKey: HexBytes?

        public init(format: Format, intervalMs: Int = 2000, bindKey: HexBytes? = nil) {
            self.format = format
            self.intervalMs = intervalMs
            self.bindKey = bindKey
        }

        enum CodingKeys: String, CodingKey, CaseIterable { case format, intervalMs, bindKey }

        public init(from decoder: any Decoder) throws {
            try decoder.rejectUnknownKeys(CodingKeys.self)
            let c = try decoder.container(keyedBy: CodingKeys.self)
            let name = try c.decode(String.self, forKey: .format)
            guard let format = Format(rawValue: name) else {
                throw DecodingError.dataCorruptedError(forKey: .format, in: c,
                    debugDescription: "unknown format \"\(name)\" (known: \(Format.allCases.map(\.rawValue).joined(separator: ", ")))")
            }
            self.format = format
            intervalMs = try c.decodeInt(.intervalMs, default: 2000, in: 100...3_600_000)!
            bindKey = try c.decodeIfPresent(HexBytes.self, forKey: .bindKey)
            if let bindKey {
                guard format.encrypts else {
                    throw DecodingError.dataCorruptedError(forKey: .bindKey, in: c,
                                                           debugDescription: "only bthome and mibeacon payloads are encrypted")
                }
                guard bindKey.bytes.count == 16 else {
                    throw DecodingError.dataCorruptedError(forKey: .bindKey, in: c,
                        debugDescription: "an AES-128 key is 16 bytes (32 hex digits), not \(bindKey.bytes.count)")
                }
            }
        }
    }

    /// One entry of an advertisement's data.
    enum AdvertisingSlot: Sendable, Hashable {
        case serviceData(BluetoothUUID)
        case manufacturerData(UInt16)
    }
}
