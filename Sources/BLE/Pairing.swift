/// What a pairing asks of whoever answers for the central (CoreBluetooth shows these in system
/// dialogs; a gateway asks its clients): BlueZ's agent requests.
public enum PairingRequest: Sendable, Equatable {
    /// Enter the passkey the device shows (`RequestPasskey`).
    case passkey
    /// Enter the device's PIN code (`RequestPinCode`; legacy pairing).
    case pinCode
    /// Confirm that the device shows this number too (`RequestConfirmation`, numeric comparison).
    case confirmation(UInt32)
    /// Show this passkey: the device's user types it there (`DisplayPasskey`); `entered` keys so far.
    case displayPasskey(UInt32, entered: Int)
    /// Show this PIN code, to type on the device (`DisplayPinCode`).
    case displayPinCode(String)
    /// Allow the device to pair (`RequestAuthorization`, Just Works asked by the device).
    case authorization
    /// Allow the device to use this service (`AuthorizeService`).
    case service(BluetoothUUID)

    /// The name clients see ("passkey", "confirm", ...).
    public var name: String {
        switch self {
        case .passkey: "passkey"
        case .pinCode: "pinCode"
        case .confirmation: "confirm"
        case .displayPasskey: "displayPasskey"
        case .displayPinCode: "displayPinCode"
        case .authorization: "authorize"
        case .service: "authorizeService"
        }
    }

    /// A passkey as devices show it: six digits, zero-padded.
    public static func digits(_ passkey: UInt32) -> String {
        let text = String(passkey)
        return String(repeating: "0", count: max(0, 6 - text.count)) + text
    }

    /// Whether it waits for an answer (displays only inform).
    public var needsAnswer: Bool {
        switch self {
        case .displayPasskey, .displayPinCode: false
        default: true
        }
    }
}

/// A client's answer to a `PairingRequest`, or one given up front with the pairing.
public enum PairingAnswer: Sendable, Equatable {
    case passkey(UInt32)
    case pinCode(String)
    /// Yes or no: to a confirmation, or an authorization.
    case confirm(Bool)

    /// Passkeys are six decimal digits.
    public static let passkeys: ClosedRange<UInt32> = 0...999_999

    /// Whether it answers `request`.
    public func answers(_ request: PairingRequest) -> Bool {
        switch (self, request) {
        case (.passkey, .passkey), (.pinCode, .pinCode): true
        case (.confirm, .confirmation), (.confirm, .authorization), (.confirm, .service): true
        default: false
        }
    }
}

/// Where a device's pairing stands, as the central reports it.
public enum PairingState: Sendable, Equatable {
    /// The central asks its clients (`request.needsAnswer`), or tells them what to show.
    case request(PairingRequest)
    /// Paired (and bonded, when the device agreed to keep keys).
    case paired
    /// It failed, was rejected or cancelled, or nobody answered in time; nothing is left paired.
    case failed(BLEError)
}

/// The IO capabilities the central declares when it pairs (BlueZ's agent capability names):
/// they choose the pairing method with the device's own (Just Works, passkey entry, numeric
/// comparison).
public enum PairingIO: String, Sendable, CaseIterable {
    case displayOnly = "DisplayOnly"
    case displayYesNo = "DisplayYesNo"
    case keyboardOnly = "KeyboardOnly"
    case noInputNoOutput = "NoInputNoOutput"
    case keyboardDisplay = "KeyboardDisplay"

    /// "DisplayOnly, DisplayYesNo, ...", for messages.
    public static let names = allCases.map(\.rawValue).joined(separator: ", ")
}
