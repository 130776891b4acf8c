import BLE

/// A device heard: the Device Found event (0x0012), or the Advertisement Monitor Device Found
/// event (0x002F) that passive scanning with monitors reports (mgmt-api.txt).
public struct DeviceFound: Sendable, Equatable {
    public var controller: ControllerIndex
    public var address: BluetoothAddress
    public var addressType: AddressType
    /// dBm; nil when the controller reported none (127).
    public var rssi: Int?
    public var flags: DeviceFoundFlags
    /// The advertisement monitor's handle when it came as a monitor's event (0: reported for
    /// software filtering, or a later report of a device already matched).
    public var monitor: UInt16?
    /// The advertising data (with the scan response after it); empty when it was dropped.
    public var advertisingData: AdvertisingData
    /// The frame's AD part was malformed (a structure ran past its end) and was dropped; the
    /// rest of the event holds.
    public var advertisingDataDropped: Bool

    public init(controller: ControllerIndex, address: BluetoothAddress, addressType: AddressType, rssi: Int?,
                flags: DeviceFoundFlags = [], monitor: UInt16? = nil, advertisingData: AdvertisingData,
                advertisingDataDropped: Bool = false) {
        self.controller = controller
        self.address = address
        self.addressType = addressType
        self.rssi = rssi
        self.flags = flags
        self.monitor = monitor
        self.advertisingData = advertisingData
        self.advertisingDataDropped = advertisingDataDropped
    }

    /// The RSSI byte that means "not available".
    static let noRSSI: Int8 = 127

    /// Parameters: [monitor handle u16,] address (6, least significant byte first), address type,
    /// RSSI (s8), flags (u32), data length (u16), data. The length must be what is left.
    init(_ event: EventCode, controller: ControllerIndex, parameters reader: inout ByteReader) throws(FrameError) {
        let total = reader.remaining
        var monitor: UInt16?
        if event == .advertisementMonitorDeviceFound {
            guard let handle = reader.u16() else { throw .malformed(event, "\(total) bytes, no room for a monitor handle") }
            monitor = handle
        }
        guard let wire = reader.take(6), let type = reader.u8(), let rssi = reader.u8(), let flags = reader.u32(),
              let length = reader.u16() else {
            throw .malformed(event, "\(total) bytes, fewer than the fixed fields")
        }
        guard Int(length) == reader.remaining else {
            throw .malformed(event, "the data length says \(length) bytes, \(reader.remaining) follow")
        }
        guard let addressType = AddressType(rawValue: type), monitor == nil || addressType != .bredr else {
            throw .malformed(event, "address type \(type)")
        }
        let data = reader.rest()
        self.controller = controller
        address = BluetoothAddress(bytes: wire.reversed())!
        self.addressType = addressType
        self.rssi = Int8(bitPattern: rssi) == Self.noRSSI ? nil : Int(Int8(bitPattern: rssi))
        self.flags = DeviceFoundFlags(rawValue: flags)
        self.monitor = monitor
        if let parsed = AdvertisingData(parsing: data) {
            advertisingData = parsed
            advertisingDataDropped = false
        } else {
            advertisingData = .empty
            advertisingDataDropped = true
        }
    }

    /// The event as the kernel sends it (a monitor's when `monitor` is set): for the simulator's
    /// stream and for tests.
    public var frame: [UInt8] {
        var parameters: [UInt8] = []
        parameters.reserveCapacity(16 + advertisingData.bytes.count)
        if let monitor { parameters.appendLittleEndian(monitor) }
        parameters += address.bytes.reversed()
        parameters.append(addressType.rawValue)
        parameters.append(UInt8(bitPattern: rssi.map { Int8(clamping: min($0, 126)) } ?? Self.noRSSI))
        parameters.appendLittleEndian(flags.rawValue)
        parameters.appendLittleEndian(UInt16(advertisingData.bytes.count))
        parameters += advertisingData.bytes
        let code: EventCode = monitor == nil ? .deviceFound : .advertisementMonitorDeviceFound
        return Frame.encode(code: code.rawValue, controller: controller, parameters: parameters)
    }
}

/// The address's kind, as the management socket numbers it.
public enum AddressType: UInt8, Sendable, Hashable, CustomStringConvertible {
    /// A classic (BR/EDR) device, found by inquiry.
    case bredr = 0
    case lePublic = 1
    case leRandom = 2

    public var description: String {
        switch self {
        case .bredr: "br/edr"
        case .lePublic: "le-public"
        case .leRandom: "le-random"
        }
    }
}

/// Device Found's flags (mgmt-api.txt); bits it does not name are kept.
public struct DeviceFoundFlags: OptionSet, Sendable, Hashable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    public static let confirmName = DeviceFoundFlags(rawValue: 1 << 0)
    public static let legacyPairing = DeviceFoundFlags(rawValue: 1 << 1)
    public static let notConnectable = DeviceFoundFlags(rawValue: 1 << 2)
    public static let nameRequestFailed = DeviceFoundFlags(rawValue: 1 << 4)
    /// The report was a scan response (kernels before 3.16 report it apart).
    public static let scanResponse = DeviceFoundFlags(rawValue: 1 << 5)
}
