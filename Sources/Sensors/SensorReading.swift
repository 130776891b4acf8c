import BLE

/// What one advertisement said, decoded by the format that recognised it.
///
/// JSON (keys sorted by the gateway's encoder; absent keys are omitted, never null):
///
///     {
///       "format": "bthome",                  // SensorFormat's raw value
///       "packetId": 12,                      // when the format numbers its packets
///       "encrypted": true,                   // whether it was encrypted on air
///       "encryption": "decrypted",           // what became of it: see `Encryption`
///       "measurements": {                    // always present, may be {}
///         "temperature": {"value": 21.56, "unit": "°C"},
///         "battery": {"value": 87, "unit": "%"},
///         "door": {"value": true},
///         "firmware_version": {"value": "4.2.1.0"},
///         "dimmer": {"value": "rotate_left", "steps": 3}
///       },
///       "unparsed": "f7a0"                   // only when decoding stopped early: the rest, in hex
///     }
///
/// `value` is a JSON number, boolean or string; `unit` is absent for counts, states and texts;
/// `steps` only appears on BTHome dimmer and step commands. A measurement that appears more than
/// once in one advertisement is numbered as BTHome specifies: "temperature", "temperature_2", ...
public struct SensorReading: Sendable, Hashable, Encodable {
    public var format: SensorFormat
    /// The packet counter of the formats that have one (BTHome object 0x00, ATC1441/PVVX and MiBeacon
    /// frame counters, Ruuvi's measurement sequence), for de-duplication.
    public var packetId: Int?
    public var encryption: Encryption
    public var measurements: Measurements
    /// Bytes left undecoded because decoding stopped at something this version does not know
    /// (a BTHome object id added in a later version of the format); empty when all was decoded.
    public var unparsed: [UInt8]
    /// For `ReplayGuard`: the counter and bytes of an encrypted payload that decrypted.
    var replayToken: ReplayToken?

    public init(
        format: SensorFormat, packetId: Int? = nil, encryption: Encryption = .none,
        measurements: Measurements = Measurements(), unparsed: [UInt8] = []
    ) {
        self.format = format
        self.packetId = packetId
        self.encryption = encryption
        self.measurements = measurements
        self.unparsed = unparsed
    }

    private enum CodingKeys: String, CodingKey {
        case format, packetId, encrypted, encryption, measurements, unparsed
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(format, forKey: .format)
        try container.encodeIfPresent(packetId, forKey: .packetId)
        try container.encode(encryption.wasEncrypted, forKey: .encrypted)
        try container.encode(encryption, forKey: .encryption)
        try container.encode(measurements, forKey: .measurements)
        if !unparsed.isEmpty { try container.encode(Hex.string(unparsed), forKey: .unparsed) }
    }
}

/// The advertisement formats the decoders know.
public enum SensorFormat: String, Sendable, Hashable, Encodable, CaseIterable {
    case bthome
    case atc1441
    case pvvx
    case mibeacon
    case ruuviRAWv2 = "ruuvi-rawv2"
    case ibeacon
    case eddystoneUID = "eddystone-uid"
    case eddystoneURL = "eddystone-url"
    case eddystoneTLM = "eddystone-tlm"
}

/// Whether a payload was encrypted, and what became of it. Only `.none` and `.decrypted`
/// readings carry measurements: the others say what the gateway saw, not what the device meant.
public enum Encryption: String, Sendable, Hashable, Encodable {
    /// Sent in the clear.
    case none
    /// Sent in the clear by a device that has a bind key: refused, because anyone can send
    /// cleartext under a copied address (the BTHome encryption page's advice).
    case refusedCleartext = "refused-cleartext"
    /// Decrypted with the device's bind key; the tag verified.
    case decrypted
    /// Encrypted, and no bind key is configured for the device (or its address is unknown).
    case missingKey = "missing-key"
    /// The tag did not verify: a wrong key, or bytes changed on the way.
    case failed
    /// Verified, but its counter is older than one already accepted (`ReplayGuard`).
    case replayed
    /// Encrypted in a way these decoders do not implement (MiBeacon v2/v3's, with a 12-byte key).
    case unsupported

    /// Whether the payload was encrypted on air.
    public var wasEncrypted: Bool { self != .none && self != .refusedCleartext }
}

/// Measurements by name, each name unique within a reading.
public struct Measurements: Sendable, Hashable, Encodable, Sequence {
    public private(set) var byName: [String: Measurement] = [:]

    public init() {}

    /// Adds `measurement` under `name`, or under "name_2", "name_3", ... when `name` is taken.
    public mutating func add(_ name: String, _ measurement: Measurement) {
        var key = name
        var number = 1
        while byName[key] != nil {
            number += 1
            key = "\(name)_\(number)"
        }
        byName[key] = measurement
    }

    public subscript(name: String) -> Measurement? { byName[name] }
    public var isEmpty: Bool { byName.isEmpty }
    public var count: Int { byName.count }
    public func makeIterator() -> Dictionary<String, Measurement>.Iterator { byName.makeIterator() }

    public func encode(to encoder: any Encoder) throws {
        try byName.encode(to: encoder)
    }
}

/// One value with its unit, as the format's specification defines both.
public struct Measurement: Sendable, Hashable, Encodable {
    public var value: SensorValue
    /// "°C", "%", "hPa", ...; nil for counts, states, texts and identifiers.
    public var unit: String?
    /// The step count of a BTHome dimmer rotation or step command.
    public var steps: Int?

    public init(_ value: SensorValue, unit: String? = nil, steps: Int? = nil) {
        self.value = value
        self.unit = unit
        self.steps = steps
    }
}

/// A measurement's value: integers stay integers (a count of 3 is 3, not 3.0).
public enum SensorValue: Sendable, Hashable, Encodable {
    case integer(Int64)
    case number(Double)
    case boolean(Bool)
    case text(String)

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .integer(let value): try container.encode(value)
        case .number(let value): try container.encode(value)
        case .boolean(let value): try container.encode(value)
        case .text(let value): try container.encode(value)
        }
    }
}

/// An exact factor, numerator / denominator, so that 2506 × 0.01 is 25.06 and not 25.060000000000002:
/// one correctly rounded division of exact integers gives the double nearest the decimal result.
struct Scale: Sendable, Hashable {
    let numerator: Int64
    let denominator: Int64

    static let one = Scale(1, 1)

    init(_ numerator: Int64, _ denominator: Int64) {
        self.numerator = numerator
        self.denominator = denominator
    }

    /// `raw` scaled, plus `offset` in the scaled unit's raw steps (Ruuvi's pressure is raw + 50 000 Pa).
    func value(_ raw: Int64, offset: Int64 = 0) -> SensorValue {
        let scaled = (raw + offset) * numerator
        return denominator == 1 ? .integer(scaled) : .number(Double(scaled) / Double(denominator))
    }
}

/// The counter and bytes of a decrypted payload: what `ReplayGuard` compares.
struct ReplayToken: Sendable, Hashable {
    var counter: UInt32
    var payload: [UInt8]
}
