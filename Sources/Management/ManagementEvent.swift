import BLE

/// What the channel hands on: an event about a device of a controller in use.
public enum ManagementEvent: Sendable, Equatable {
    /// An advertisement (with its scan response) heard, or an advertisement monitor's report.
    case deviceFound(DeviceFound)
    case deviceConnected(DeviceConnected)
    case deviceDisconnected(DeviceDisconnected)

    /// The device events of `event`; nil for the others (command answers, settings, ...).
    public init?(_ event: Event) {
        switch event {
        case .deviceFound(let found): self = .deviceFound(found)
        case .deviceConnected(let connected): self = .deviceConnected(connected)
        case .deviceDisconnected(let disconnected): self = .deviceDisconnected(disconnected)
        case .commandComplete, .commandStatus, .index, .other: return nil
        }
    }

    public var controller: ControllerIndex {
        switch self {
        case .deviceFound(let e): e.controller
        case .deviceConnected(let e): e.controller
        case .deviceDisconnected(let e): e.controller
        }
    }

    public var address: BluetoothAddress {
        switch self {
        case .deviceFound(let e): e.address
        case .deviceConnected(let e): e.address
        case .deviceDisconnected(let e): e.address
        }
    }

    public var addressType: AddressType {
        switch self {
        case .deviceFound(let e): e.addressType
        case .deviceConnected(let e): e.addressType
        case .deviceDisconnected(let e): e.addressType
        }
    }

    /// Its AD (or EIR) part was malformed and dropped.
    public var advertisingDataDropped: Bool {
        switch self {
        case .deviceFound(let e): e.advertisingDataDropped
        case .deviceConnected(let e): e.advertisingDataDropped
        case .deviceDisconnected: false
        }
    }

    /// The event as the kernel sends it.
    public var frame: [UInt8] {
        switch self {
        case .deviceFound(let e): e.frame
        case .deviceConnected(let e): e.frame
        case .deviceDisconnected(let e): e.frame
        }
    }
}
