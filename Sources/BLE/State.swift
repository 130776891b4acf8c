/// The adapter's state, with CoreBluetooth's `CBManagerState` raw values.
public enum ManagerState: Int, Sendable, Hashable, CaseIterable {
    case unknown = 0
    case resetting = 1
    case unsupported = 2
    case unauthorized = 3
    case poweredOff = 4
    case poweredOn = 5

    /// Apple's case name, e.g. "poweredOn".
    public var name: String {
        switch self {
        case .unknown: "unknown"
        case .resetting: "resetting"
        case .unsupported: "unsupported"
        case .unauthorized: "unauthorized"
        case .poweredOff: "poweredOff"
        case .poweredOn: "poweredOn"
        }
    }
}

/// A peripheral's connection state, with CoreBluetooth's `CBPeripheralState` raw values.
public enum PeripheralState: Int, Sendable, Hashable, CaseIterable {
    case disconnected = 0
    case connecting = 1
    case connected = 2
    case disconnecting = 3

    /// Apple's case name, e.g. "connected".
    public var name: String {
        switch self {
        case .disconnected: "disconnected"
        case .connecting: "connecting"
        case .connected: "connected"
        case .disconnecting: "disconnecting"
        }
    }
}
