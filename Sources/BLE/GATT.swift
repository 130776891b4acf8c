/// A characteristic's properties, with CoreBluetooth's names (`CBCharacteristicProperties`).
public struct CharacteristicProperties: OptionSet, Sendable, Hashable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    public static let broadcast = Self(rawValue: 1 << 0)
    public static let read = Self(rawValue: 1 << 1)
    public static let writeWithoutResponse = Self(rawValue: 1 << 2)
    public static let write = Self(rawValue: 1 << 3)
    public static let notify = Self(rawValue: 1 << 4)
    public static let indicate = Self(rawValue: 1 << 5)
    public static let authenticatedSignedWrites = Self(rawValue: 1 << 6)
    public static let extendedProperties = Self(rawValue: 1 << 7)
    public static let reliableWrite = Self(rawValue: 1 << 8)
    public static let writableAuxiliaries = Self(rawValue: 1 << 9)

    /// CoreBluetooth's names, in CoreBluetooth's bit order.
    public static let names: [(Self, String)] = [
        (.broadcast, "broadcast"), (.read, "read"), (.writeWithoutResponse, "writeWithoutResponse"), (.write, "write"),
        (.notify, "notify"), (.indicate, "indicate"), (.authenticatedSignedWrites, "authenticatedSignedWrites"),
        (.extendedProperties, "extendedProperties"), (.reliableWrite, "reliableWrite"), (.writableAuxiliaries, "writableAuxiliaries"),
    ]

    public var names: [String] { Self.names.filter { contains($0.0) }.map(\.1) }
}

/// A descriptor of a remote characteristic.
public struct GATTDescriptor: Sendable, Hashable {
    public var handle: UInt16
    public var uuid: BluetoothUUID
    public init(handle: UInt16, uuid: BluetoothUUID) {
        self.handle = handle
        self.uuid = uuid
    }
}

/// A characteristic of a remote service.
public struct GATTCharacteristic: Sendable, Hashable {
    public var handle: UInt16
    public var uuid: BluetoothUUID
    public var serviceHandle: UInt16
    public var properties: CharacteristicProperties
    /// The stack's own flags as it reports them, permissions included ("encrypt-read", ...).
    public var flags: [String]
    public var isNotifying: Bool
    public var descriptors: [GATTDescriptor]

    public init(handle: UInt16, uuid: BluetoothUUID, serviceHandle: UInt16, properties: CharacteristicProperties,
                flags: [String], isNotifying: Bool, descriptors: [GATTDescriptor]) {
        self.handle = handle
        self.uuid = uuid
        self.serviceHandle = serviceHandle
        self.properties = properties
        self.flags = flags
        self.isNotifying = isNotifying
        self.descriptors = descriptors
    }
}

/// A service of a remote device, with its characteristics.
public struct GATTService: Sendable, Hashable {
    public var handle: UInt16
    public var uuid: BluetoothUUID
    public var isPrimary: Bool
    public var characteristics: [GATTCharacteristic]

    public init(handle: UInt16, uuid: BluetoothUUID, isPrimary: Bool, characteristics: [GATTCharacteristic]) {
        self.handle = handle
        self.uuid = uuid
        self.isPrimary = isPrimary
        self.characteristics = characteristics
    }
}

/// How a client names an attribute: by its handle (`0x0027`, always unique) or by its UUID
/// (only when exactly one attribute of that kind has it).
public enum AttributeSelector: Sendable, Hashable, CustomStringConvertible {
    case handle(UInt16)
    case uuid(BluetoothUUID)

    /// "0x0027" is a handle; anything else must be a UUID (so "2a19" is the UUID 0x2A19).
    public init?(_ text: String) {
        // Four hex digits after "0x", checked as such: UInt16(_:radix:) alone also takes a sign.
        let utf8 = text.utf8
        if utf8.count == 6, Hex.hasPrefix0x(utf8), let digits = Hex.bytes(utf8.dropFirst(2)) {
            self = .handle(UInt16(Hex.integer(bigEndian: digits)))
        } else if let uuid = BluetoothUUID(text) {
            self = .uuid(uuid)
        } else {
            return nil
        }
    }

    public var description: String {
        switch self {
        case .handle(let h): return Self.format(h)
        case .uuid(let u): return u.shortForm ?? u.uuidString
        }
    }

    public static func format(_ handle: UInt16) -> String {
        let hex = String(handle, radix: 16)
        return "0x" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
    }

    /// The one item this selector names among `items`, or an error that says why not:
    /// none (`invalidHandle`), or several (`invalidParameters`, listing their handles).
    public func pick<T>(_ items: [T], kind: String, handle: (T) -> UInt16, uuid: (T) -> BluetoothUUID) throws(BLEError) -> T {
        let matches: [T]
        switch self {
        case .handle(let h): matches = items.filter { handle($0) == h }
        case .uuid(let u): matches = items.filter { uuid($0) == u }
        }
        if matches.count == 1 { return matches[0] }
        if matches.isEmpty { throw BLEError(.invalidHandle, "no \(kind) \(self) on this device") }
        let handles = matches.map { Self.format(handle($0)) }.joined(separator: ", ")
        throw BLEError(.invalidParameters, "\(kind) UUID \(self) is ambiguous: \(matches.count) \(kind)s have it, at handles \(handles); name one by its handle")
    }
}
