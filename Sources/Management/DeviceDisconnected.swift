import BLE

/// A link to a device went down: the Device Disconnected event (0x000C, mgmt-api.txt).
public struct DeviceDisconnected: Sendable, Equatable {
    public var controller: ControllerIndex
    public var address: BluetoothAddress
    public var addressType: AddressType
    public var reason: DisconnectReason

    public init(controller: ControllerIndex, address: BluetoothAddress, addressType: AddressType, reason: DisconnectReason) {
        self.controller = controller
        self.address = address
        self.addressType = addressType
        self.reason = reason
    }

    /// Parameters: address (6), address type, reason: exactly 8 bytes.
    init(controller: ControllerIndex, parameters reader: inout ByteReader) throws(FrameError) {
        let event = EventCode.deviceDisconnected, total = reader.remaining
        guard total == 8, let (address, type) = reader.address(), let reason = reader.u8() else {
            throw .malformed(event, "\(total) bytes, not 8")
        }
        guard let addressType = AddressType(rawValue: type) else { throw .malformed(event, "address type \(type)") }
        self.controller = controller
        self.address = address
        self.addressType = addressType
        self.reason = DisconnectReason(rawValue: reason)
    }

    /// The event as the kernel sends it.
    public var frame: [UInt8] {
        var frame: [UInt8] = []
        frame.reserveCapacity(Frame.headerSize + 8)
        Frame.append(code: EventCode.deviceDisconnected.rawValue, controller: controller, to: &frame) { parameters in
            parameters.append(address, addressType)
            parameters.append(reason.rawValue)
        }
        return frame
    }
}

/// Why a link went down, as Device Disconnected says it (mgmt-api.txt); values it does not name
/// are kept.
public struct DisconnectReason: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let unspecified = DisconnectReason(rawValue: 0)
    /// The link's supervision timeout: the device went silent (out of range, powered off).
    public static let timeout = DisconnectReason(rawValue: 1)
    public static let localHost = DisconnectReason(rawValue: 2)
    public static let remoteHost = DisconnectReason(rawValue: 3)
    public static let authenticationFailure = DisconnectReason(rawValue: 4)
    public static let localHostSuspend = DisconnectReason(rawValue: 5)

    private static let names = ["unspecified", "connection timeout", "terminated by the local host",
                                "terminated by the remote host", "authentication failure", "terminated by the local host for suspend"]

    /// "terminated by the remote host (0x03)".
    public var description: String { named(rawValue, Self.names, unknown: "unknown reason") }
}
