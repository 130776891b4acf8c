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
        guard let (address, type) = reader.address(), let rssi = reader.u8(), let flags = reader.u32(),
              let length = reader.u16() else {
            throw .malformed(event, "\(total) bytes, fewer than the fixed fields")
        }
        let data = try reader.counted(length, event)
        guard let addressType = AddressType(rawValue: type), monitor == nil || addressType != .bredr else {
            throw .malformed(event, "address type \(type)")
        }
        self.controller = controller
        self.address = address
        self.addressType = addressType
        self.rssi = Int8(bitPattern: rssi) == Self.noRSSI ? nil : Int(Int8(bitPattern: rssi))
        self.flags = DeviceFoundFlags(rawValue: flags)
        self.monitor = monitor
        (advertisingData, advertisingDataDropped) = AdvertisingData.part(data)
    }

    /// The event as the kernel sends it (a monitor's when `monitor` is set): for the simulator's
    /// stream and for tests.
    public var frame: [UInt8] {
        var frame: [UInt8] = []
        frame.reserveCapacity(Frame.headerSize + 16 + advertisingData.bytes.count)
        Self.append(to: &frame, controller: controller, address: address, addressType: addressType, rssi: rssi, flags: flags,
                    monitor: monitor) { $0 += advertisingData.bytes }
        return frame
    }

    /// Appends the event's frame to `buffer` with the AD structures `advertisingData` appends
    /// (`AdvertisingData.appendStructure`), without building a `DeviceFound` first: the
    /// simulator's stream encodes every advertisement this way into a buffer it keeps. An RSSI
    /// above 126 dBm is sent as 126 (127 means none).
    public static func append(to buffer: inout [UInt8], controller: ControllerIndex, address: BluetoothAddress,
                              addressType: AddressType, rssi: Int?, flags: DeviceFoundFlags, monitor: UInt16? = nil,
                              advertisingData: (inout [UInt8]) -> Void) {
        let code: EventCode = monitor == nil ? .deviceFound : .advertisementMonitorDeviceFound
        Frame.append(code: code.rawValue, controller: controller, to: &buffer) { parameters in
            if let monitor { parameters.appendLittleEndian(monitor) }
            parameters.append(address, addressType)
            parameters.append(UInt8(bitPattern: rssi.map { Int8(clamping: min($0, 126)) } ?? noRSSI))
            parameters.appendLittleEndian(flags.rawValue)
            parameters.appendCounted(advertisingData)
        }
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
