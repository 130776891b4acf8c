/// The Bluetooth proxy's messages (ids and field numbers from aioesphomeapi 46.23.0's api_pb2).
///
/// A device's address is a 48-bit integer in a uint64 (AA:BB:CC:DD:EE:FF is 0xAABBCCDDEEFF);
/// a GATT attribute is named by its handle.

/// `SubscribeBluetoothLEAdvertisementsRequest.flags`.
public struct BluetoothProxySubscriptionFlags: OptionSet, Sendable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    /// Advertisements as their raw AD structures (`BluetoothLERawAdvertisementsResponse`).
    public static let rawAdvertisements = BluetoothProxySubscriptionFlags(rawValue: 1 << 0)
}

public struct SubscribeBluetoothLEAdvertisementsRequest: APIMessage {
    public static let id: UInt16 = 66
    public var flags: UInt32 = 0

    public init() {}
    public init(flags: BluetoothProxySubscriptionFlags) { self.flags = flags.rawValue }

    public static var fields: [Field<Self>] { [.uint32(1, \.flags)] }
}

public struct UnsubscribeBluetoothLEAdvertisementsRequest: EmptyMessage {
    public static let id: UInt16 = 87
    public init() {}
}

/// One advertisement: the advertising data (and scan response) as received, AD structure after AD structure.
public struct BluetoothLERawAdvertisement: TabledMessage {
    public var address: UInt64 = 0
    public var rssi: Int32 = 0
    /// 0 public, 1 random.
    public var addressType: UInt32 = 0
    public var data: [UInt8] = []

    public init() {}
    public init(address: UInt64, rssi: Int32, addressType: UInt32, data: [UInt8]) {
        (self.address, self.rssi, self.addressType, self.data) = (address, rssi, addressType, data)
    }

    public static var fields: [Field<Self>] {
        [.uint64(1, \.address), .sint32(2, \.rssi), .uint32(3, \.addressType), .bytes(4, \.data)]
    }

    /// The table's fields, written directly: one goes out for every advertisement heard, and the
    /// table (made anew at each use, its key paths resolved at run time) cost more than the rest.
    public func encode(to writer: inout ProtoWriter) {
        writer.uint64(1, address)
        writer.sint32(2, rssi)
        writer.uint32(3, addressType)
        writer.bytes(4, data)
    }
}

/// Advertisements in a batch.
public struct BluetoothLERawAdvertisementsResponse: APIMessage {
    public static let id: UInt16 = 93
    public var advertisements: [BluetoothLERawAdvertisement] = []

    public init() {}
    public init(advertisements: [BluetoothLERawAdvertisement]) { self.advertisements = advertisements }

    public static var fields: [Field<Self>] { [.messages(1, \.advertisements)] }

    /// As the table says, without it (see `BluetoothLERawAdvertisement.encode`).
    public func encode(to writer: inout ProtoWriter) {
        writer.messages(1, advertisements)
    }
}

/// What `BluetoothDeviceRequest` asks for.
public struct BluetoothDeviceRequestType: ProtoEnum {
    public let rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }
    public static let connect = BluetoothDeviceRequestType(rawValue: 0)
    public static let disconnect = BluetoothDeviceRequestType(rawValue: 1)
    public static let pair = BluetoothDeviceRequestType(rawValue: 2)
    public static let unpair = BluetoothDeviceRequestType(rawValue: 3)
    public static let connectWithCache = BluetoothDeviceRequestType(rawValue: 4)
    public static let connectWithoutCache = BluetoothDeviceRequestType(rawValue: 5)
    public static let clearCache = BluetoothDeviceRequestType(rawValue: 6)
}

public struct BluetoothDeviceRequest: APIMessage {
    public static let id: UInt16 = 68
    public var address: UInt64 = 0
    public var requestType = BluetoothDeviceRequestType.connect
    public var hasAddressType = false
    public var addressType: UInt32 = 0

    public init() {}
    public init(address: UInt64, requestType: BluetoothDeviceRequestType, addressType: UInt32? = nil) {
        (self.address, self.requestType) = (address, requestType)
        (hasAddressType, self.addressType) = (addressType != nil, addressType ?? 0)
    }

    public static var fields: [Field<Self>] {
        [.uint64(1, \.address), .enumeration(2, \.requestType), .bool(3, \.hasAddressType), .uint32(4, \.addressType)]
    }
}

public struct BluetoothDeviceConnectionResponse: APIMessage {
    public static let id: UInt16 = 69
    public var address: UInt64 = 0
    public var connected = false
    public var mtu: UInt32 = 0
    public var error: Int32 = 0

    public init() {}
    public init(address: UInt64, connected: Bool, mtu: UInt32 = 0, error: Int32 = 0) {
        (self.address, self.connected, self.mtu, self.error) = (address, connected, mtu, error)
    }

    public static var fields: [Field<Self>] {
        [.uint64(1, \.address), .bool(2, \.connected), .uint32(3, \.mtu), .int32(4, \.error)]
    }
}

// MARK: Shapes

/// A message whose field 1 is the device's address.
public protocol BluetoothAddressMessage: APIMessage {
    var address: UInt64 { get set }
}

extension BluetoothAddressMessage {
    public init(address: UInt64) {
        self.init()
        self.address = address
    }
}

/// A device's address and an attribute's handle (fields 1 and 2), and maybe more after them.
public protocol BluetoothHandleMessage: BluetoothAddressMessage {
    var handle: UInt32 { get set }
}

extension BluetoothHandleMessage {
    public init(address: UInt64, handle: UInt32) {
        self.init(address: address)
        self.handle = handle
    }

    /// Fields 1 and 2.
    public static var handleFields: [Field<Self>] { [.uint64(1, \.address), .uint32(2, \.handle)] }
}

/// An address, a handle and a value (field 3).
public protocol BluetoothValueMessage: BluetoothHandleMessage {
    var data: [UInt8] { get set }
}

extension BluetoothValueMessage {
    public init(address: UInt64, handle: UInt32, data: [UInt8]) {
        self.init(address: address, handle: handle)
        self.data = data
    }

    public static var fields: [Field<Self>] { handleFields + [.bytes(3, \.data)] }
}

/// The answer to a pairing, unpairing or cache clearing: an address, whether it worked (field
/// 2: `paired` or `success`), and an error code (field 3).
public protocol BluetoothDeviceResultMessage: BluetoothAddressMessage {
    var succeeded: Bool { get set }
    var error: Int32 { get set }
}

extension BluetoothDeviceResultMessage {
    public init(address: UInt64, succeeded: Bool, error: Int32 = 0) {
        self.init(address: address)
        (self.succeeded, self.error) = (succeeded, error)
    }

    public static var fields: [Field<Self>] { [.uint64(1, \.address), .bool(2, \.succeeded), .int32(3, \.error)] }
}

// MARK: GATT

public struct BluetoothGATTGetServicesRequest: BluetoothAddressMessage {
    public static let id: UInt16 = 70
    public var address: UInt64 = 0
    public init() {}
    public static var fields: [Field<Self>] { [.uint64(1, \.address)] }
}

/// A GATT attribute's UUID is either a 16- or 32-bit one in `shortUUID`, or the 128 bits as two
/// uint64 (most significant half first) in `uuid`; services and characteristics too.
public struct BluetoothGATTDescriptor: TabledMessage {
    public var uuid: [UInt64] = []
    public var handle: UInt32 = 0
    public var shortUUID: UInt32 = 0

    public init() {}
    public init(uuid: [UInt64], handle: UInt32, shortUUID: UInt32 = 0) {
        (self.uuid, self.handle, self.shortUUID) = (uuid, handle, shortUUID)
    }

    public static var fields: [Field<Self>] { [.packedUInt64(1, \.uuid), .uint32(2, \.handle), .uint32(3, \.shortUUID)] }
}

public struct BluetoothGATTCharacteristic: TabledMessage {
    public var uuid: [UInt64] = []
    public var handle: UInt32 = 0
    /// The characteristic's property bits, as in its declaration.
    public var properties: UInt32 = 0
    public var descriptors: [BluetoothGATTDescriptor] = []
    public var shortUUID: UInt32 = 0

    public init() {}
    public init(uuid: [UInt64], handle: UInt32, properties: UInt32, descriptors: [BluetoothGATTDescriptor], shortUUID: UInt32 = 0) {
        (self.uuid, self.handle, self.properties) = (uuid, handle, properties)
        (self.descriptors, self.shortUUID) = (descriptors, shortUUID)
    }

    public static var fields: [Field<Self>] {
        [.packedUInt64(1, \.uuid), .uint32(2, \.handle), .uint32(3, \.properties), .messages(4, \.descriptors),
         .uint32(5, \.shortUUID)]
    }
}

public struct BluetoothGATTService: TabledMessage {
    public var uuid: [UInt64] = []
    public var handle: UInt32 = 0
    public var characteristics: [BluetoothGATTCharacteristic] = []
    public var shortUUID: UInt32 = 0

    public init() {}
    public init(uuid: [UInt64], handle: UInt32, characteristics: [BluetoothGATTCharacteristic], shortUUID: UInt32 = 0) {
        (self.uuid, self.handle, self.characteristics, self.shortUUID) = (uuid, handle, characteristics, shortUUID)
    }

    public static var fields: [Field<Self>] {
        [.packedUInt64(1, \.uuid), .uint32(2, \.handle), .messages(3, \.characteristics), .uint32(4, \.shortUUID)]
    }
}

/// Some of a device's services (a proxy sends them in several messages, then the done message).
public struct BluetoothGATTGetServicesResponse: BluetoothAddressMessage {
    public static let id: UInt16 = 71
    public var address: UInt64 = 0
    public var services: [BluetoothGATTService] = []

    public init() {}
    public init(address: UInt64, services: [BluetoothGATTService]) {
        (self.address, self.services) = (address, services)
    }

    public static var fields: [Field<Self>] { [.uint64(1, \.address), .messages(2, \.services)] }
}

public struct BluetoothGATTGetServicesDoneResponse: BluetoothAddressMessage {
    public static let id: UInt16 = 72
    public var address: UInt64 = 0
    public init() {}
    public static var fields: [Field<Self>] { [.uint64(1, \.address)] }
}

public struct BluetoothGATTReadRequest: BluetoothHandleMessage {
    public static let id: UInt16 = 73
    public var address: UInt64 = 0
    public var handle: UInt32 = 0
    public init() {}
    public static var fields: [Field<Self>] { handleFields }
}

public struct BluetoothGATTReadResponse: BluetoothValueMessage {
    public static let id: UInt16 = 74
    public var address: UInt64 = 0
    public var handle: UInt32 = 0
    public var data: [UInt8] = []
    public init() {}
}

public struct BluetoothGATTWriteRequest: BluetoothHandleMessage {
    public static let id: UInt16 = 75
    public var address: UInt64 = 0
    public var handle: UInt32 = 0
    /// With response (a write request) or without (a write command).
    public var response = false
    public var data: [UInt8] = []

    public init() {}
    public init(address: UInt64, handle: UInt32, response: Bool, data: [UInt8]) {
        self.init(address: address, handle: handle)
        (self.response, self.data) = (response, data)
    }

    public static var fields: [Field<Self>] { handleFields + [.bool(3, \.response), .bytes(4, \.data)] }
}

public struct BluetoothGATTReadDescriptorRequest: BluetoothHandleMessage {
    public static let id: UInt16 = 76
    public var address: UInt64 = 0
    public var handle: UInt32 = 0
    public init() {}
    public static var fields: [Field<Self>] { handleFields }
}

public struct BluetoothGATTWriteDescriptorRequest: BluetoothValueMessage {
    public static let id: UInt16 = 77
    public var address: UInt64 = 0
    public var handle: UInt32 = 0
    public var data: [UInt8] = []
    public init() {}
}

public struct BluetoothGATTNotifyRequest: BluetoothHandleMessage {
    public static let id: UInt16 = 78
    public var address: UInt64 = 0
    public var handle: UInt32 = 0
    public var enable = false

    public init() {}
    public init(address: UInt64, handle: UInt32, enable: Bool) {
        self.init(address: address, handle: handle)
        self.enable = enable
    }

    public static var fields: [Field<Self>] { handleFields + [.bool(3, \.enable)] }
}

public struct BluetoothGATTNotifyDataResponse: BluetoothValueMessage {
    public static let id: UInt16 = 79
    public var address: UInt64 = 0
    public var handle: UInt32 = 0
    public var data: [UInt8] = []
    public init() {}
}

/// A GATT operation failed: `error` is the ATT error code the device answered, or the proxy's own.
public struct BluetoothGATTErrorResponse: BluetoothHandleMessage {
    public static let id: UInt16 = 82
    public var address: UInt64 = 0
    public var handle: UInt32 = 0
    public var error: Int32 = 0

    public init() {}
    public init(address: UInt64, handle: UInt32, error: Int32) {
        self.init(address: address, handle: handle)
        self.error = error
    }

    public static var fields: [Field<Self>] { handleFields + [.int32(3, \.error)] }
}

public struct BluetoothGATTWriteResponse: BluetoothHandleMessage {
    public static let id: UInt16 = 83
    public var address: UInt64 = 0
    public var handle: UInt32 = 0
    public init() {}
    public static var fields: [Field<Self>] { handleFields }
}

public struct BluetoothGATTNotifyResponse: BluetoothHandleMessage {
    public static let id: UInt16 = 84
    public var address: UInt64 = 0
    public var handle: UInt32 = 0
    public init() {}
    public static var fields: [Field<Self>] { handleFields }
}

// MARK: Connection slots, pairing, cache, scanner

public struct SubscribeBluetoothConnectionsFreeRequest: EmptyMessage {
    public static let id: UInt16 = 80
    public init() {}
}

public struct BluetoothConnectionsFreeResponse: APIMessage {
    public static let id: UInt16 = 81
    public var free: UInt32 = 0
    public var limit: UInt32 = 0
    /// The addresses of the devices holding a slot.
    public var allocated: [UInt64] = []

    public init() {}
    public init(free: UInt32, limit: UInt32, allocated: [UInt64]) {
        (self.free, self.limit, self.allocated) = (free, limit, allocated)
    }

    public static var fields: [Field<Self>] { [.uint32(1, \.free), .uint32(2, \.limit), .packedUInt64(3, \.allocated)] }
}

/// Field 2 is `paired`.
public struct BluetoothDevicePairingResponse: BluetoothDeviceResultMessage {
    public static let id: UInt16 = 85
    public var address: UInt64 = 0
    public var succeeded = false
    public var error: Int32 = 0
    public init() {}
}

/// Field 2 is `success`.
public struct BluetoothDeviceUnpairingResponse: BluetoothDeviceResultMessage {
    public static let id: UInt16 = 86
    public var address: UInt64 = 0
    public var succeeded = false
    public var error: Int32 = 0
    public init() {}
}

/// Field 2 is `success`.
public struct BluetoothDeviceClearCacheResponse: BluetoothDeviceResultMessage {
    public static let id: UInt16 = 88
    public var address: UInt64 = 0
    public var succeeded = false
    public var error: Int32 = 0
    public init() {}
}

public struct BluetoothScannerState: ProtoEnum {
    public let rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }
    public static let idle = BluetoothScannerState(rawValue: 0)
    public static let starting = BluetoothScannerState(rawValue: 1)
    public static let running = BluetoothScannerState(rawValue: 2)
    public static let failed = BluetoothScannerState(rawValue: 3)
    public static let stopping = BluetoothScannerState(rawValue: 4)
    public static let stopped = BluetoothScannerState(rawValue: 5)
}

public struct BluetoothScannerMode: ProtoEnum {
    public let rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }
    public static let passive = BluetoothScannerMode(rawValue: 0)
    public static let active = BluetoothScannerMode(rawValue: 1)
}

public struct BluetoothScannerStateResponse: APIMessage {
    public static let id: UInt16 = 126
    public var state = BluetoothScannerState.idle
    public var mode = BluetoothScannerMode.passive
    public var configuredMode = BluetoothScannerMode.passive

    public init() {}
    public init(state: BluetoothScannerState, mode: BluetoothScannerMode, configuredMode: BluetoothScannerMode) {
        (self.state, self.mode, self.configuredMode) = (state, mode, configuredMode)
    }

    public static var fields: [Field<Self>] {
        [.enumeration(1, \.state), .enumeration(2, \.mode), .enumeration(3, \.configuredMode)]
    }
}

public struct BluetoothScannerSetModeRequest: APIMessage {
    public static let id: UInt16 = 127
    public var mode = BluetoothScannerMode.passive

    public init() {}
    public init(mode: BluetoothScannerMode) { self.mode = mode }

    public static var fields: [Field<Self>] { [.enumeration(1, \.mode)] }
}
