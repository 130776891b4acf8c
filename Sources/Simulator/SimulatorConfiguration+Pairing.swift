import FoundationEssentials

/// An IO capability, as the Security Manager knows it and BlueZ agents name it.
public enum IOCapability: String, Codable, Sendable, CaseIterable {
    case displayOnly = "DisplayOnly"
    case displayYesNo = "DisplayYesNo"
    case keyboardOnly = "KeyboardOnly"
    case noInputNoOutput = "NoInputNoOutput"
    case keyboardDisplay = "KeyboardDisplay"

    /// RegisterAgent's capability argument: as bluetoothd reads it, "" is KeyboardDisplay.
    init?(agentCapability: String) {
        self.init(rawValue: agentCapability.isEmpty ? IOCapability.keyboardDisplay.rawValue : agentCapability)
    }
}

extension SimulatorConfiguration {
    /// How the peripheral pairs: its IO capability, the passkey it displays, and whether its
    /// user mistypes the passkey the central displays.
    ///
    /// JSON, every key optional: `{ "io": "DisplayOnly", "passkey": 123456, "entersWrong": false }`.
    /// The default, NoInputNoOutput, pairs by Just Works whatever the central's agent can do.
    public struct Pairing: Codable, Sendable, Equatable {
        public var io: IOCapability
        /// The passkey the peripheral displays when the central's user has to enter it (a
        /// KeyboardOnly peripheral: the one its user types); nil: a new random one each time.
        public var passkey: Int?
        /// When the central displays the passkey, the peripheral's user types a wrong one.
        public var entersWrong: Bool

        public init(io: IOCapability = .noInputNoOutput, passkey: Int? = nil, entersWrong: Bool = false) {
            self.io = io
            self.passkey = passkey
            self.entersWrong = entersWrong
        }

        enum CodingKeys: String, CodingKey, CaseIterable { case io, passkey, entersWrong }

        public init(from decoder: any Decoder) throws {
            try decoder.rejectUnknownKeys(CodingKeys.self)
            let c = try decoder.container(keyedBy: CodingKeys.self)
            io = try c.decode(.io, default: .noInputNoOutput)
            passkey = try c.decodeInt(.passkey, default: nil, in: 0...999_999)
            entersWrong = try c.decode(.entersWrong, default: false)
        }

        /// Parses the JSON given to `SetPairing`.
        public static func parse(_ json: String) throws(ConfigurationError) -> Pairing {
            try SimulatorConfiguration.decodeJSON(Data(json.utf8))
        }
    }
}

/// How LE Secure Connections pairing goes between the central (bluetoothd, with its agent's
/// capability) and the peripheral: the Core specification's table (Vol 3, Part H, 2.3.5.1),
/// as Linux's smp.c has it (sc_method), where "just confirm" is Just Works for the initiator.
enum PairingMethod: Equatable, Sendable {
    case justWorks
    /// The central's user enters the passkey the peripheral displays (the agent's RequestPasskey).
    case centralEnters
    /// The central displays a passkey (the agent's DisplayPasskey) that the peripheral's user enters.
    case peripheralEnters
    /// Both show a number, the user confirms (the agent's RequestConfirmation).
    case numericComparison

    /// Rows: the peripheral's capability; columns: the central's; both in SMP's order
    /// (DisplayOnly, DisplayYesNo, KeyboardOnly, NoInputNoOutput, KeyboardDisplay).
    private static let table: [[PairingMethod]] = [
        [.justWorks, .justWorks, .centralEnters, .justWorks, .centralEnters],
        [.justWorks, .numericComparison, .centralEnters, .justWorks, .numericComparison],
        [.peripheralEnters, .peripheralEnters, .centralEnters, .justWorks, .peripheralEnters],
        [.justWorks, .justWorks, .justWorks, .justWorks, .justWorks],
        [.peripheralEnters, .numericComparison, .centralEnters, .justWorks, .numericComparison],
    ]

    init(central: IOCapability, peripheral: IOCapability) {
        let order = IOCapability.allCases
        self = Self.table[order.firstIndex(of: peripheral)!][order.firstIndex(of: central)!]
    }

    /// Protected against a man in the middle: what "encrypt-authenticated" attributes need.
    var authenticated: Bool { self != .justWorks }
}
