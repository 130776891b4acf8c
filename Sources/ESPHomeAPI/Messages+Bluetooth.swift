/// The Bluetooth proxy's messages (ids and field numbers from aioesphomeapi 46.23.0's api_pb2).
///
/// A device's address is a 48-bit integer in a uint64 (AA:BB:CC:DD:EE:FF is 0xAABBCCDDEEFF);
/// a GATT attribute is named by its handle. Many messages share a shape (an address and a
/// handle, and a value or a flag after them); each shape is a protocol that writes and reads it once.

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

    public func encode(to w: inout ProtoWriter) { w.uint32(1, flags) }

    public mutating func decode(field f: ProtoField) throws(ProtobufError) {
        if f.number == 1 { f.read(&flags) }
    }
}

public struct UnsubscribeBluetoothLEAdvertisementsRequest: EmptyMessage {
    public static let id: UInt16 = 87
    public init() {}
}

/// One advertisement: the advertising data (and scan response) as received, AD structure after AD structure.
public struct BluetoothLERawAdvertisement: ProtoMessage {
    public var address: UInt64 = 0
    public var rssi: Int32 = 0
    /// 0 public, 1 random.
    public var addressType: UInt32 = 0
    public var data: [UInt8] = []

    public init() {}
    public init(address: UInt64, rssi: Int32, addressType: UInt32, data: [UInt8]) {
        self.address = address
        self.rssi = rssi
        self.addressType = addressType
        self.data = data
    }

    public func encode(to w: inout ProtoWriter) {
        w.uint64(1, address)
        w.sint32(2, rssi)
        w.uint32(3, addressType)
        w.bytes(4, data)
    }

    public mutating func decode(field f: ProtoField) throws(ProtobufError) {
        switch f.number {
        case 1: f.read(&address)
        case 2: f.readZigZag(&rssi)
        case 3: f.read(&addressType)
        case 4: f.read(&data)
        default: break
        }
    }
}

/// Advertisements in a batch.
public struct BluetoothLERawAdvertisementsResponse: APIMessage {
    public static let id: UInt16 = 93
    public var advertisements: [BluetoothLERawAdvertisement] = []

    public init() {}
    public init(advertisements: [BluetoothLERawAdvertisement]) { self.advertisements = advertisements }

    public func encode(to w: inout ProtoWriter) { w.messages(1, advertisements) }

    public mutating func decode(field f: ProtoField) throws(ProtobufError) {
        if f.number == 1 { try f.append(to: &advertisements) }
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
        self.address = address
        self.requestType = requestType
        hasAddressType = addressType != nil
        self.addressType = addressType ?? 0
    }

    public func encode(to w: inout ProtoWriter) {
        w.uint64(1, address)
        w.enumeration(2, requestType)
        w.bool(3, hasAddressType)
        w.uint32(4, addressType)
    }

    public mutating func decode(field f: ProtoField) throws(ProtobufError) {
        switch f.number {
        case 1: f.read(&address)
        case 2: f.read(&requestType)
        case 3: f.read(&hasAddressType)
        case 4: f.read(&addressType)
        default: break
        }
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
        self.address = address
        self.connected = connected
        self.mtu = mtu
        self.error = error
    }

    public func encode(to w: inout ProtoWriter) {
        w.uint64(1, address)
        w.bool(2, connected)
        w.uint32(3, mtu)
        w.int32(4, error)
    }

    public mutating func decode(field f: ProtoField) throws(ProtobufError) {
        switch f.number {
        case 1: f.read(&address)
        case 2: f.read(&connected)
        case 3: f.read(&mtu)
        case 4: f.read(&error)
        default: break
        }
    }
}

// MARK: Shapes

/// A message of one field, the device's address.
public protocol BluetoothAddressMessage: APIMessage {
    var address: UInt64 { get set }
}

extension BluetoothAddressMessage {
    public init(address: UInt64) {
        self.init()
        self.address = address
    }

    public func encode(to w: inout ProtoWriter) { w.uint64(1, address) }

    public mutating func decode(field f: ProtoField) throws(ProtobufError) {
        if f.number == 1 { f.read(&address) }
    }
}

/// A device's address and an attribute's handle (fields 1 and 2), and what `encodeRest` and
/// `decodeRest` add after them.
public protocol BluetoothHandleMessage: APIMessage {
    var address: UInt64 { get set }
    var handle: UInt32 { get set }
    func encodeRest(to w: inout ProtoWriter)
    mutating func decodeRest(field f: ProtoField) throws(ProtobufError)
}

extension BluetoothHandleMessage {
    public init(address: UInt64, handle: UInt32) {
        self.init()
        self.address = address
        self.handle = handle
    }

    public func encode(to w: inout ProtoWriter) {
        w.uint64(1, address)
        w.uint32(2, handle)
        encodeRest(to: &w)
    }

    public mutating func decode(field f: ProtoField) throws(ProtobufError) {
        switch f.number {
        case 1: f.read(&address)
        case 2: f.read(&handle)
        default: try decodeRest(field: f)
        }
    }

    public func encodeRest(to w: inout ProtoWriter) {}
    public mutating func decodeRest(field f: ProtoField) throws(ProtobufError) {}
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

    public func encodeRest(to w: inout ProtoWriter) { w.bytes(3, data) }

    public mutating func decodeRest(field f: ProtoField) throws(ProtobufError) {
        if f.number == 3 { f.read(&data) }
    }
}

/// The answer to a pairing, unpairing or cache clearing: an address, whether it worked (field
/// 2), and an error code (field 3).
public protocol BluetoothDeviceResultMessage: APIMessage {
    var address: UInt64 { get set }
    var succeeded: Bool { get set }
    var error: Int32 { get set }
}

extension BluetoothDeviceResultMessage {
    public init(address: UInt64, succeeded: Bool, error: Int32 = 0) {
        self.init()
        self.address = address
        self.succeeded = succeeded
        self.error = error
    }

    public func encode(to w: inout ProtoWriter) {
        w.uint64(1, address)
        w.bool(2, succeeded)
        w.int32(3, error)
    }

    public mutating func decode(field f: ProtoField) throws(ProtobufError) {
        switch f.number {
        case 1: f.read(&address)
        case 2: f.read(&succeeded)
        case 3: f.read(&error)
        default: break
        }
    }
}

// MARK: GATT

public struct BluetoothGATTGetServicesRequest: BluetoothAddressMessage {
    public static let id: UInt16 = 70
    public var address: UInt64 = 0
    public init() {}
}

/// A GATT attribute's UUID is either a 16- or 32-bit one in `shortUUID`, or the 128 bits as two
/// uint64 (most significant half first) in `uuid`; services and characteristics too.
public struct BluetoothGATTDescriptor: ProtoMessage {
    public var uuid: [UInt64] = []
    public var handle: UInt32 = 0
    public var shortUUID: UInt32 = 0

    public init() {}
    public init(uuid: [UInt64], handle: UInt32, shortUUID: UInt32 = 0) {
        self.uuid = uuid
        self.handle = handle
        self.shortUUID = shortUUID
    }

    public func encode(to w: inout ProtoWriter) {
        w.packedUInt64(1, uuid)
        w.uint32(2, handle)
        w.uint32(3, shortUUID)
    }

    public mutating func decode(field f: ProtoField) throws(ProtobufError) {
        switch f.number {
        case 1: try f.append(to: &uuid)
        case 2: f.read(&handle)
        case 3: f.read(&shortUUID)
        default: break
        }
    }
}

public struct BluetoothGATTCharacteristic: ProtoMessage {
    public var uuid: [UInt64] = []
    public var handle: UInt32 = 0
    /// The characteristic's property bits, as in its declaration.
    public var properties: UInt32 = 0
    public var descriptors: [BluetoothGATTDescriptor] = []
    public var shortUUID: UInt32 = 0

    public init() {}
    public init(uuid: [UInt64], handle: UInt32, properties: UInt32, descriptors: [BluetoothGATTDescriptor], shortUUID: UInt32 = 0) {
        self.uuid = uuid
        self.handle = handle
        self.properties = properties
        self.descriptors = descriptors
        self.shortUUID = shortUUID
    }

    public func encode(to w: inout ProtoWriter) {
        w.packedUInt64(1, uuid)
        w.uint32(2, handle)
        w.uint32(3, properties)
        w.messages(4, descriptors)
        w.uint32(5, shortUUID)
    }

    public mutating func decode(field f: ProtoField) throws(ProtobufError) {
        switch f.number {
        case 1: try f.append(to: &uuid)
        case 2: f.read(&handle)
        case 3: f.read(&properties)
        case 4: try f.append(to: &descriptors)
        case 5: f.read(&shortUUID)
        default: break
        }
    }
}

public struct BluetoothGATTService: ProtoMessage {
    public var uuid: [UInt64] = []
    public var handle: UInt32 = 0
    public var characteristics: [BluetoothGATTCharacteristic] = []
    public var shortUUID: UInt32 = 0

    public init() {}
    public init(uuid: [UInt64], handle: UInt32, characteristics: [BluetoothGATTCharacteristic], shortUUID: UInt32 = 0) {
        self.uuid = uuid
        self.handle = handle
        self.characteristics = characteristics
        self.shortUUID = shortUUID
    }

    public func encode(to w: inout ProtoWriter) {
        w.packedUInt64(1, uuid)
        w.uint32(2, handle)
        w.messages(3, characteristics)
        w.uint32(4, shortUUID)
    }

    public mutating func decode(field f: ProtoField) throws(ProtobufError) {
        switch f.number {
        case 1: try f.append(to: &uuid)
        case 2: f.read(&handle)
        case 3: try f.append(to: &characteristics)
        case 4: f.read(&shortUUID)
        default: break
        }
    }
}

/// Some of a device's services (a proxy sends them in several messages, then the done message).
public struct BluetoothGATTGetServicesResponse: APIMessage {
    public static let id: UInt16 = 71
    public var address: UInt64 = 0
    public var services: [BluetoothGATTService] = []

    public init() {}
    public init(address: UInt64, services: [BluetoothGATTService]) {
        self.address = address
        self.services = services
    }

    public func encode(to w: inout ProtoWriter) {
        w.uint64(1, address)
        w.messages(2, services)
    }

    public mutating func decode(field f: ProtoField) throws(ProtobufError) {
        switch f.number {
        case 1: f.read(&address)
        case 2: try f.append(to: &services)
        default: break
        }
    }
}

public struct BluetoothGATTGetServicesDoneResponse: BluetoothAddressMessage {
    public static let id: UInt16 = 72
    public var address: UInt64 = 0
    public init() {}
}

public struct BluetoothGATTReadRequest: BluetoothHandleMessage {
    public static let id: UInt16 = 73
    public var address: UInt64 = 0
    public var handle: UInt32 = 0
    public init() {}
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
        self.address = address
        self.handle = handle
        self.response = response
        self.data = data
    }

    public func encodeRest(to w: inout ProtoWriter) {
        w.bool(3, response)
        w.bytes(4, data)
    }

    public mutating func decodeRest(field f: ProtoField) throws(ProtobufError) {
        switch f.number {
        case 3: f.read(&response)
        case 4: f.read(&data)
        default: break
        }
    }
}

public struct BluetoothGATTReadDescriptorRequest: BluetoothHandleMessage {
    public static let id: UInt16 = 76
    public var address: UInt64 = 0
    public var handle: UInt32 = 0
    public init() {}
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
        self.address = address
        self.handle = handle
        self.enable = enable
    }

    public func encodeRest(to w: inout ProtoWriter) { w.bool(3, enable) }

    public mutating func decodeRest(field f: ProtoField) throws(ProtobufError) {
        if f.number == 3 { f.read(&enable) }
    }
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
        self.address = address
        self.handle = handle
        self.error = error
    }

    public func encodeRest(to w: inout ProtoWriter) { w.int32(3, error) }

    public mutating func decodeRest(field f: ProtoField) throws(ProtobufError) {
        if f.number == 3 { f.read(&error) }
    }
}

public struct BluetoothGATTWriteResponse: BluetoothHandleMessage {
    public static let id: UInt16 = 83
    public var address: UInt64 = 0
    public var handle: UInt32 = 0
    public init() {}
}

public struct BluetoothGATTNotifyResponse: BluetoothHandleMessage {
    public static let id: UInt16 = 84
    public var address: UInt64 = 0
    public var handle: UInt32 = 0
    public init() {}
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
        self.free = free
        self.limit = limit
        self.allocated = allocated
    }

    public func encode(to w: inout ProtoWriter) {
        w.uint32(1, free)
        w.uint32(2, limit)
        w.packedUInt64(3, allocated)
    }

    public mutating func decode(field f: ProtoField) throws(ProtobufError) {
        switch f.number {
        case 1: f.read(&free)
        case 2: f.read(&limit)
        case 3: try f.append(to: &allocated)
        default: break
        }
    }
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
        self.state = state
        self.mode = mode
        self.configuredMode = configuredMode
    }

    public func encode(to w: inout ProtoWriter) {
        w.enumeration(1, state)
        w.enumeration(2, mode)
        w.enumeration(3, configuredMode)
    }

    public mutating func decode(field f: ProtoField) throws(ProtobufError) {
        switch f.number {
        case 1: f.read(&state)
        case 2: f.read(&mode)
        case 3: f.read(&configuredMode)
        default: break
        }
    }
}

public struct BluetoothScannerSetModeRequest: APIMessage {
    public static let id: UInt16 = 127
    public var mode = BluetoothScannerMode.passive

    public init() {}
    public init(mode: BluetoothScannerMode) { self.mode = mode }

    public func encode(to w: inout ProtoWriter) { w.enumeration(1, mode) }

    public mutating func decode(field f: ProtoField) throws(ProtobufError) {
        if f.number == 1 { f.read(&mode) }
    }
}
