/// The peripheral role, as CoreBluetooth's `CBPeripheralManager` offers it: services this side
/// serves (`CBMutableService`), advertisements it sends, values it updates for the centrals that
/// subscribed, and the requests of remote centrals. The stack's side of it (BlueZ's
/// `GattManager1` and `LEAdvertisingManager1`) is a transport: every read and write a central
/// makes goes to the request handler, which the gateway's core sets, and values are stored there.

/// `CBAttributePermissions`, with the authenticated variants BlueZ offers beside them
/// (`encrypt-authenticated-read`/`-write`: a pairing with MITM protection).
public struct AttributePermissions: OptionSet, Sendable, Hashable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    public static let readable = Self(rawValue: 1 << 0)
    public static let writeable = Self(rawValue: 1 << 1)
    public static let readEncryptionRequired = Self(rawValue: 1 << 2)
    public static let writeEncryptionRequired = Self(rawValue: 1 << 3)
    public static let readAuthenticationRequired = Self(rawValue: 1 << 4)
    public static let writeAuthenticationRequired = Self(rawValue: 1 << 5)

    /// The names the API uses, CoreBluetooth's first.
    public static let names: [(Self, String)] = [
        (.readable, "readable"), (.writeable, "writeable"), (.readEncryptionRequired, "readEncryptionRequired"),
        (.writeEncryptionRequired, "writeEncryptionRequired"), (.readAuthenticationRequired, "readAuthenticationRequired"),
        (.writeAuthenticationRequired, "writeAuthenticationRequired"),
    ]

    public var names: [String] { Self.names.filter { contains($0.0) }.map(\.1) }

    /// Whether a read needs any of them, and a write.
    public var allowsRead: Bool { !isDisjoint(with: [.readable, .readEncryptionRequired, .readAuthenticationRequired]) }
    public var allowsWrite: Bool { !isDisjoint(with: [.writeable, .writeEncryptionRequired, .writeAuthenticationRequired]) }
}

/// A descriptor of a local characteristic (`CBMutableDescriptor`): the user description 0x2901,
/// the presentation format 0x2904, or one of the client's own. The CCCD (0x2902) is the stack's.
public struct LocalDescriptor: Sendable, Hashable {
    public var uuid: BluetoothUUID
    public var value: [UInt8]
    public var permissions: AttributePermissions

    public init(uuid: BluetoothUUID, value: [UInt8], permissions: AttributePermissions = .readable) {
        self.uuid = uuid
        self.value = value
        self.permissions = permissions
    }
}

/// A local characteristic (`CBMutableCharacteristic`).
public struct LocalCharacteristic: Sendable, Hashable {
    public var uuid: BluetoothUUID
    public var properties: CharacteristicProperties
    public var permissions: AttributePermissions
    /// Its first value (what a read answers until a client sets another).
    public var value: [UInt8]
    public var descriptors: [LocalDescriptor]

    public init(uuid: BluetoothUUID, properties: CharacteristicProperties, permissions: AttributePermissions,
                value: [UInt8] = [], descriptors: [LocalDescriptor] = []) {
        self.uuid = uuid
        self.properties = properties
        self.permissions = permissions
        self.value = value
        self.descriptors = descriptors
    }
}

/// A local service (`CBMutableService`), and the adapter it is to live on (nil: the first usable one).
public struct LocalService: Sendable, Hashable {
    public var uuid: BluetoothUUID
    public var primary: Bool
    public var characteristics: [LocalCharacteristic]
    /// Services of this side it includes, by UUID (`includedServices`).
    public var includes: [BluetoothUUID]
    public var adapter: String?

    public init(uuid: BluetoothUUID, primary: Bool = true, characteristics: [LocalCharacteristic], includes: [BluetoothUUID] = [],
                adapter: String? = nil) {
        self.uuid = uuid
        self.primary = primary
        self.characteristics = characteristics
        self.includes = includes
        self.adapter = adapter
    }
}

/// A service as the stack serves it: its id (this side's, stable while it is served and across
/// restarts that keep it), the adapter, and the ATT handles the stack gave its attributes once
/// registered (nil until then, and while the adapter is away).
public struct RegisteredService: Sendable, Equatable {
    public var id: Int
    public var adapter: String
    public var service: LocalService
    public var handle: UInt16?
    /// One per characteristic of `service`, in its order.
    public var characteristicHandles: [UInt16?]
    /// Whether the stack serves it now (false while bluetoothd or the adapter is away: it is
    /// registered again when they are back).
    public var registered: Bool

    public init(id: Int, adapter: String, service: LocalService, handle: UInt16? = nil, characteristicHandles: [UInt16?] = [],
                registered: Bool = false) {
        self.id = id
        self.adapter = adapter
        self.service = service
        self.handle = handle
        self.characteristicHandles = characteristicHandles.isEmpty ? Array(repeating: nil, count: service.characteristics.count)
            : characteristicHandles
        self.registered = registered
    }
}

/// What an advertisement carries (`startAdvertising`'s dictionary, and what BlueZ's
/// `LEAdvertisement1` adds: manufacturer and service data, TX power, the interval).
public struct AdvertisementDefinition: Sendable, Hashable {
    public var localName: String?
    public var serviceUUIDs: [BluetoothUUID]
    /// By company id (the first two bytes of the AD structure), the bytes after it.
    public var manufacturerData: [UInt16: [UInt8]]
    public var serviceData: [BluetoothUUID: [UInt8]]
    /// Whether the advertisement includes the TX power level (the controller's).
    public var includeTxPower: Bool
    /// Connectable (`peripheral`) or not (`broadcast`, a beacon).
    public var connectable: Bool
    /// The advertising interval the client asks for, in milliseconds (nil: the stack's).
    public var intervalMs: ClosedRange<UInt32>?
    public var appearance: UInt16?
    public var adapter: String?

    public init(localName: String? = nil, serviceUUIDs: [BluetoothUUID] = [], manufacturerData: [UInt16: [UInt8]] = [:],
                serviceData: [BluetoothUUID: [UInt8]] = [:], includeTxPower: Bool = false, connectable: Bool = true,
                intervalMs: ClosedRange<UInt32>? = nil, appearance: UInt16? = nil, adapter: String? = nil) {
        self.localName = localName
        self.serviceUUIDs = serviceUUIDs
        self.manufacturerData = manufacturerData
        self.serviceData = serviceData
        self.includeTxPower = includeTxPower
        self.connectable = connectable
        self.intervalMs = intervalMs
        self.appearance = appearance
        self.adapter = adapter
    }
}

/// An advertisement as the stack sends it.
public struct RegisteredAdvertisement: Sendable, Equatable {
    public var id: Int
    public var adapter: String
    public var definition: AdvertisementDefinition
    /// Whether the stack sends it now (false while bluetoothd or the adapter is away).
    public var registered: Bool

    public init(id: Int, adapter: String, definition: AdvertisementDefinition, registered: Bool = false) {
        self.id = id
        self.adapter = adapter
        self.definition = definition
        self.registered = registered
    }
}

/// The peripheral side's state (`CBPeripheralManager.state`), and each adapter's room for
/// advertisements.
public struct PeripheralStatus: Sendable, Equatable {
    public struct Instances: Sendable, Equatable {
        /// Advertisements the adapter can still start (BlueZ's `SupportedInstances`, which 5.66
        /// counts as the controller's maximum less those registered).
        public var supported: Int
        /// Advertisements it sends now (`ActiveInstances`).
        public var active: Int

        public init(supported: Int, active: Int) {
            self.supported = supported
            self.active = active
        }
    }

    public var state: ManagerState
    /// Per adapter in use.
    public var instances: [String: Instances]

    public init(state: ManagerState, instances: [String: Instances] = [:]) {
        self.state = state
        self.instances = instances
    }
}

/// A local attribute a request is for: the service's id, the characteristic's index in it, and
/// the descriptor's index in that (nil: the characteristic itself).
public struct LocalAttribute: Sendable, Hashable {
    public var service: Int
    public var characteristic: Int
    public var descriptor: Int?

    public init(service: Int, characteristic: Int, descriptor: Int? = nil) {
        self.service = service
        self.characteristic = characteristic
        self.descriptor = descriptor
    }
}

/// A remote central's read or write of a local attribute (`CBATTRequest`).
public struct PeripheralRequest: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        case read
        /// `withResponse` false: a write without response (the central is told nothing).
        case write([UInt8], withResponse: Bool)
    }

    public var attribute: LocalAttribute
    public var kind: Kind
    /// The central, when the stack says which (BlueZ passes its device object).
    public var central: BluetoothAddress?
    public var offset: Int
    /// The link's ATT MTU, when the stack says it.
    public var mtu: Int?

    public init(attribute: LocalAttribute, kind: Kind, central: BluetoothAddress?, offset: Int, mtu: Int?) {
        self.attribute = attribute
        self.kind = kind
        self.central = central
        self.offset = offset
        self.mtu = mtu
    }
}

/// How a request is answered (`respond(to:withResult:)`): a read's value (from `offset` on), a
/// write's success, or an ATT error.
public enum PeripheralResponse: Sendable, Equatable {
    case value([UInt8])
    case done
    case error(ATTErrorCode)
}

/// What the peripheral side reports as it happens (`CBPeripheralManagerDelegate`).
public enum PeripheralEvent: Sendable, Equatable {
    /// The peripheral side's state changed (`peripheralManagerDidUpdateState`).
    case state(PeripheralStatus)
    /// A service or advertisement was registered by the stack, or is no longer served (bluetoothd
    /// or the adapter went away, BlueZ released it): `didAdd`, `peripheralManagerDidStartAdvertising`.
    case service(RegisteredService)
    case advertisement(RegisteredAdvertisement)
    /// A central connected to or disconnected from an adapter this side serves on.
    case central(BluetoothAddress, adapter: String, connected: Bool)
    /// A central subscribed to a characteristic's notifications or indications, or unsubscribed
    /// (`didSubscribeTo` / `didUnsubscribeFrom`; BlueZ tells the first subscription and the end of
    /// the last, not which central: `central` nil then).
    case subscription(LocalAttribute, central: BluetoothAddress?, subscribed: Bool)
    /// An indication was confirmed by the central (BlueZ's `Confirm`).
    case confirmed(LocalAttribute, central: BluetoothAddress?)
}

/// The stack's side of the peripheral role.
public protocol PeripheralManager: Sendable {
    /// Receives every `PeripheralEvent`, on the stack's thread: hand it on, never wait.
    func setEventHandler(_ handler: @escaping @Sendable (PeripheralEvent) -> Void)
    /// Answers every read and write a central makes, within `deadline` (past it the central gets
    /// `unlikelyError` and the answer is dropped). Runs on a task; may wait (a client's answer).
    func setRequestHandler(_ handler: @escaping @Sendable (PeripheralRequest) async -> PeripheralResponse)

    func status() async -> PeripheralStatus

    /// Registers a service (after the ones before it, in one application per adapter: BlueZ
    /// assigns the handles), answered once the stack took it; `invalidParameters` for a
    /// definition the stack refuses (nothing of it stays), or the state's error without one.
    func add(_ service: LocalService) async throws(BLEError) -> RegisteredService
    func remove(service id: Int) async throws(BLEError)
    func services() async -> [RegisteredService]

    /// Starts an advertisement; `connectionLimitReached`-like `outOfSpace` past the adapter's
    /// `SupportedInstances`.
    func startAdvertising(_ advertisement: AdvertisementDefinition) async throws(BLEError) -> RegisteredAdvertisement
    func stopAdvertising(_ id: Int) async throws(BLEError)
    func advertisements() async -> [RegisteredAdvertisement]

    /// Sends `value` to the centrals that subscribed to the characteristic (a notification or an
    /// indication, as its properties say); the value a read answers is the request handler's.
    /// Whether any central was subscribed.
    func updateValue(_ value: [UInt8], for characteristic: LocalAttribute) async throws(BLEError) -> Bool
}
