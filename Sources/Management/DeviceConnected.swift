import BLE

/// A link to a device came up: the Device Connected event (0x000B, mgmt-api.txt).
public struct DeviceConnected: Sendable, Equatable {
    public var controller: ControllerIndex
    /// The device's identity address when the kernel knows its identity resolving key.
    public var address: BluetoothAddress
    public var addressType: AddressType
    public var flags: DeviceConnectedFlags
    /// EIR data: for LE, the advertisement the kernel kept from the device when it connected to
    /// it (often none); for BR/EDR, its name and class.
    public var advertisingData: AdvertisingData
    /// The frame's EIR part was malformed and was dropped; the rest of the event holds.
    public var advertisingDataDropped: Bool

    public init(controller: ControllerIndex, address: BluetoothAddress, addressType: AddressType,
                flags: DeviceConnectedFlags = [], advertisingData: AdvertisingData = .empty, advertisingDataDropped: Bool = false) {
        self.controller = controller
        self.address = address
        self.addressType = addressType
        self.flags = flags
        self.advertisingData = advertisingData
        self.advertisingDataDropped = advertisingDataDropped
    }

    /// Parameters: address (6), address type, flags (u32), EIR length (u16), EIR. The length must
    /// be what is left.
    init(controller: ControllerIndex, parameters reader: inout ByteReader) throws(FrameError) {
        let event = EventCode.deviceConnected, total = reader.remaining
        guard let (address, type) = reader.address(), let flags = reader.u32(), let length = reader.u16() else {
            throw .malformed(event, "\(total) bytes, fewer than the fixed fields")
        }
        let data = try reader.counted(length, event)
        guard let addressType = AddressType(rawValue: type) else { throw .malformed(event, "address type \(type)") }
        self.controller = controller
        self.address = address
        self.addressType = addressType
        self.flags = DeviceConnectedFlags(rawValue: flags)
        (advertisingData, advertisingDataDropped) = AdvertisingData.part(data)
    }

    /// The event as the kernel sends it.
    public var frame: [UInt8] {
        var frame: [UInt8] = []
        frame.reserveCapacity(Frame.headerSize + 13 + advertisingData.bytes.count)
        Frame.append(code: EventCode.deviceConnected.rawValue, controller: controller, to: &frame) { parameters in
            parameters.append(address, addressType)
            parameters.appendLittleEndian(flags.rawValue)
            parameters.appendCounted { $0 += advertisingData.bytes }
        }
        return frame
    }
}

/// Device Connected's flags (mgmt-api.txt); bits it does not name are kept.
public struct DeviceConnectedFlags: OptionSet, Sendable, Hashable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    public static let legacyPairing = DeviceConnectedFlags(rawValue: 1 << 1)
    /// This host asked for the connection (a central's connect), rather than the device.
    public static let initiatedConnection = DeviceConnectedFlags(rawValue: 1 << 3)
}
