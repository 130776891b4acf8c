/// CoreBluetooth's `CBError.Code`, with Apple's raw values.
public enum CBErrorCode: Int, Sendable, Hashable, CaseIterable {
    case unknown = 0
    case invalidParameters = 1
    case invalidHandle = 2
    case notConnected = 3
    case outOfSpace = 4
    case operationCancelled = 5
    case connectionTimeout = 6
    case peripheralDisconnected = 7
    case uuidNotAllowed = 8
    case alreadyAdvertising = 9
    case connectionFailed = 10
    case connectionLimitReached = 11
    case unknownDevice = 12
    case operationNotSupported = 13
    case peerRemovedPairingInformation = 14
    case encryptionTimedOut = 15
    case tooManyLEPairedDevices = 16

    /// Apple's case name, e.g. "connectionTimeout".
    public var name: String {
        switch self {
        case .unknown: "unknown"
        case .invalidParameters: "invalidParameters"
        case .invalidHandle: "invalidHandle"
        case .notConnected: "notConnected"
        case .outOfSpace: "outOfSpace"
        case .operationCancelled: "operationCancelled"
        case .connectionTimeout: "connectionTimeout"
        case .peripheralDisconnected: "peripheralDisconnected"
        case .uuidNotAllowed: "uuidNotAllowed"
        case .alreadyAdvertising: "alreadyAdvertising"
        case .connectionFailed: "connectionFailed"
        case .connectionLimitReached: "connectionLimitReached"
        case .unknownDevice: "unknownDevice"
        case .operationNotSupported: "operationNotSupported"
        case .peerRemovedPairingInformation: "peerRemovedPairingInformation"
        case .encryptionTimedOut: "encryptionTimedOut"
        case .tooManyLEPairedDevices: "tooManyLEPairedDevices"
        }
    }
}

/// An ATT error code as the peer sent it. Open: any byte is a value, so application errors
/// (0x80–0x9F) and codes newer than CoreBluetooth's `CBATTError.Code` pass through unchanged.
public struct ATTErrorCode: RawRepresentable, Sendable, Hashable {
    public let rawValue: UInt8

    public init(rawValue: UInt8) {
        self.rawValue = rawValue
    }

    public static let success = ATTErrorCode(rawValue: 0x00)
    public static let invalidHandle = ATTErrorCode(rawValue: 0x01)
    public static let readNotPermitted = ATTErrorCode(rawValue: 0x02)
    public static let writeNotPermitted = ATTErrorCode(rawValue: 0x03)
    public static let invalidPdu = ATTErrorCode(rawValue: 0x04)
    public static let insufficientAuthentication = ATTErrorCode(rawValue: 0x05)
    public static let requestNotSupported = ATTErrorCode(rawValue: 0x06)
    public static let invalidOffset = ATTErrorCode(rawValue: 0x07)
    public static let insufficientAuthorization = ATTErrorCode(rawValue: 0x08)
    public static let prepareQueueFull = ATTErrorCode(rawValue: 0x09)
    public static let attributeNotFound = ATTErrorCode(rawValue: 0x0A)
    public static let attributeNotLong = ATTErrorCode(rawValue: 0x0B)
    public static let insufficientEncryptionKeySize = ATTErrorCode(rawValue: 0x0C)
    public static let invalidAttributeValueLength = ATTErrorCode(rawValue: 0x0D)
    public static let unlikelyError = ATTErrorCode(rawValue: 0x0E)
    public static let insufficientEncryption = ATTErrorCode(rawValue: 0x0F)
    public static let unsupportedGroupType = ATTErrorCode(rawValue: 0x10)
    public static let insufficientResources = ATTErrorCode(rawValue: 0x11)

    /// Apple's `CBATTError.Code` case name for 0x00–0x11 ("writeNotPermitted"),
    /// "applicationError0x80" style for 0x80–0x9F, "attError0xNN" otherwise (uppercase hex).
    public var name: String {
        switch rawValue {
        case 0x00: "success"
        case 0x01: "invalidHandle"
        case 0x02: "readNotPermitted"
        case 0x03: "writeNotPermitted"
        case 0x04: "invalidPdu"
        case 0x05: "insufficientAuthentication"
        case 0x06: "requestNotSupported"
        case 0x07: "invalidOffset"
        case 0x08: "insufficientAuthorization"
        case 0x09: "prepareQueueFull"
        case 0x0A: "attributeNotFound"
        case 0x0B: "attributeNotLong"
        case 0x0C: "insufficientEncryptionKeySize"
        case 0x0D: "invalidAttributeValueLength"
        case 0x0E: "unlikelyError"
        case 0x0F: "insufficientEncryption"
        case 0x10: "unsupportedGroupType"
        case 0x11: "insufficientResources"
        case 0x80...0x9F: "applicationError0x" + Hex.string([rawValue], uppercase: true)
        default: "attError0x" + Hex.string([rawValue], uppercase: true)
        }
    }
}

extension ATTErrorCode: CustomStringConvertible {
    /// Same as `name`.
    public var description: String { name }
}

/// The one error the BLE layer throws: CoreBluetooth's domain and integer code, an ATT code when
/// the peer answered with one, and the original BlueZ/D-Bus error kept for logs.
public struct BLEError: Error, Sendable, Equatable {
    /// CoreBluetooth's `NSError` domains.
    public enum Domain: String, Sendable {
        case cb = "CBErrorDomain"
        case att = "CBATTErrorDomain"
    }

    public enum Code: Sendable, Equatable {
        case cb(CBErrorCode)
        case att(ATTErrorCode)
    }

    public var code: Code
    /// What went wrong, for people.
    public var message: String
    /// The original BlueZ/D-Bus error, e.g. "org.bluez.Error.Failed: le-connection-abort-by-local".
    public var detail: String?

    public init(_ code: CBErrorCode, _ message: String, detail: String? = nil) {
        self.code = .cb(code)
        self.message = message
        self.detail = detail
    }

    public init(att code: ATTErrorCode, _ message: String, detail: String? = nil) {
        self.code = .att(code)
        self.message = message
        self.detail = detail
    }

    public var domain: Domain {
        switch code {
        case .cb: .cb
        case .att: .att
        }
    }

    /// The integer code within `domain`.
    public var numericCode: Int {
        switch code {
        case .cb(let cb): cb.rawValue
        case .att(let att): Int(att.rawValue)
        }
    }

    /// The code's name, e.g. "connectionTimeout" or "readNotPermitted".
    public var name: String {
        switch code {
        case .cb(let cb): cb.name
        case .att(let att): att.name
        }
    }
}

extension BLEError: CustomStringConvertible {
    /// "CBErrorDomain 6 connectionTimeout: message [detail]".
    public var description: String {
        let head = "\(domain.rawValue) \(numericCode) \(name): \(message)"
        return detail.map { head + " [\($0)]" } ?? head
    }
}
