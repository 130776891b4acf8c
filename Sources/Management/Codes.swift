import BLE

// The numbers of the management protocol this module uses, from the kernel's
// doc/mgmt-api.txt (BlueZ's tree) and include/net/bluetooth/mgmt.h.

/// A command's code (what the socket sends, and what a Command Complete or Status names).
public struct Opcode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    public static let readVersion = Opcode(rawValue: 0x0001)
    public static let readCommands = Opcode(rawValue: 0x0002)
    public static let readIndexList = Opcode(rawValue: 0x0003)
    public static let readAdvertisementMonitorFeatures = Opcode(rawValue: 0x0051)
    public static let addAdvertisementPatternsMonitor = Opcode(rawValue: 0x0052)
    public static let removeAdvertisementMonitor = Opcode(rawValue: 0x0053)

    public var description: String {
        switch self {
        case .readVersion: "Read Management Version Information"
        case .readCommands: "Read Management Supported Commands"
        case .readIndexList: "Read Controller Index List"
        case .readAdvertisementMonitorFeatures: "Read Advertisement Monitor Features"
        case .addAdvertisementPatternsMonitor: "Add Advertisement Patterns Monitor"
        case .removeAdvertisementMonitor: "Remove Advertisement Monitor"
        default: "command 0x" + Hex.string(UInt64(rawValue), byteCount: 2)
        }
    }
}

/// An event's code.
public struct EventCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    public static let commandComplete = EventCode(rawValue: 0x0001)
    public static let commandStatus = EventCode(rawValue: 0x0002)
    public static let indexAdded = EventCode(rawValue: 0x0004)
    public static let indexRemoved = EventCode(rawValue: 0x0005)
    public static let deviceConnected = EventCode(rawValue: 0x000B)
    public static let deviceDisconnected = EventCode(rawValue: 0x000C)
    public static let deviceFound = EventCode(rawValue: 0x0012)
    public static let advertisementMonitorDeviceFound = EventCode(rawValue: 0x002F)

    public var description: String {
        switch self {
        case .commandComplete: "Command Complete"
        case .commandStatus: "Command Status"
        case .indexAdded: "Index Added"
        case .indexRemoved: "Index Removed"
        case .deviceConnected: "Device Connected"
        case .deviceDisconnected: "Device Disconnected"
        case .deviceFound: "Device Found"
        case .advertisementMonitorDeviceFound: "Advertisement Monitor Device Found"
        default: "event 0x" + Hex.string(UInt64(rawValue), byteCount: 2)
        }
    }
}

/// A command's outcome, as Command Complete and Command Status carry it.
public struct Status: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let success = Status(rawValue: 0x00)
    public static let unknownCommand = Status(rawValue: 0x01)
    public static let failed = Status(rawValue: 0x03)
    public static let noResources = Status(rawValue: 0x07)
    public static let busy = Status(rawValue: 0x0A)
    public static let notSupported = Status(rawValue: 0x0C)
    public static let invalidParameters = Status(rawValue: 0x0D)
    public static let invalidIndex = Status(rawValue: 0x11)
    public static let permissionDenied = Status(rawValue: 0x14)

    private static let names = [
        "Success", "Unknown Command", "Not Connected", "Failed", "Connect Failed", "Authentication Failed",
        "Not Paired", "No Resources", "Timeout", "Already Connected", "Busy", "Rejected", "Not Supported",
        "Invalid Parameters", "Disconnected", "Not Powered", "Cancelled", "Invalid Index", "RFKilled",
        "Already Paired", "Permission Denied",
    ]

    /// The name mgmt-api.txt gives it, with its number.
    public var description: String { named(rawValue, Self.names, unknown: "unknown status") }
}

/// "Name (0xNN)": the name `names` gives `value` (its index), or `unknown`.
func named(_ value: UInt8, _ names: [String], unknown: String) -> String {
    let name = Int(value) < names.count ? names[Int(value)] : unknown
    return "\(name) (0x\(Hex.string([value])))"
}
