/// What a central reports as it happens, as `CBCentralManagerDelegate` and
/// `CBPeripheralDelegate` callbacks report it.
public enum CentralEvent: Sendable, Equatable {
    /// `centralManagerDidUpdateState`
    case state(ManagerStatus)
    /// `didDiscover`: a device matched the scan (once per scan, or at every advertisement
    /// change when the scan allows duplicates).
    case advertisement(PeripheralInfo)
    /// A device this scan already reported advertised other service or manufacturer data, and
    /// the scan does not allow duplicates (with duplicates, `.advertisement` reports it); or the
    /// watch heard one of its devices (each advertisement). Not a `didDiscover` (CoreBluetooth
    /// reports a device once per such scan): for what decodes advertisements, such as sensor
    /// payloads, which change while the device stays the same.
    case advertisementChanged(PeripheralInfo)
    /// `didConnect` / `didDisconnectPeripheral`; `error` is nil when this side disconnected.
    case connection(id: BluetoothAddress, state: PeripheralState, error: BLEError?)
    /// A device kept connected (`autoReconnect`) lost its link: attempt `attempt` starts after `delay`;
    /// `error` says why the link went down or the last attempt failed.
    case reconnecting(id: BluetoothAddress, attempt: Int, delay: Duration, error: BLEError?)
    /// `didUpdateValueFor`: a notification or indication, or the result of a read.
    case value(ValueUpdate)
    /// Notifications wanted on (`setNotifyValue(true)`, `keepNotifying`) were started again after a
    /// connection or a change of the device's GATT table (`error` nil), or could not be within the
    /// central's bound after a connection (`error` says why; the wish stays, and is tried again
    /// when the device's GATT objects change and at its next connection). `uuids` once known.
    case resubscribed(id: BluetoothAddress, characteristic: UInt16, uuids: CharacteristicUUIDs?, error: BLEError?)
    /// A pairing asks a question or shows a number (the system's pairing dialog, on Apple's
    /// platforms), succeeded, or failed.
    case pairing(id: BluetoothAddress, state: PairingState)
    /// `peripheral(_:didModifyServices:)`: the device's GATT table changed while it was connected
    /// (a Service Changed indication, or a refresh of the cache): services, handles or
    /// characteristics may be others now.
    case servicesChanged(id: BluetoothAddress)
    /// An adapter in use was added (a dongle plugged in), removed (pulled out), or changed (powered,
    /// discovering, a link up or down on it).
    case adapter(AdapterInfo, change: AdapterChange)
}

public enum AdapterChange: String, Sendable, Equatable {
    case added, removed, changed
}

/// A characteristic's UUID and its service's: what the GATT blocklist looks at.
public struct CharacteristicUUIDs: Sendable, Hashable {
    public var service: BluetoothUUID
    public var characteristic: BluetoothUUID

    public init(service: BluetoothUUID, characteristic: BluetoothUUID) {
        self.service = service
        self.characteristic = characteristic
    }
}

/// A characteristic's new value.
public struct ValueUpdate: Sendable, Equatable {
    public var device: BluetoothAddress
    public var serviceHandle: UInt16
    public var serviceUUID: BluetoothUUID
    public var characteristicHandle: UInt16
    public var characteristicUUID: BluetoothUUID
    public var value: [UInt8]

    public init(device: BluetoothAddress, serviceHandle: UInt16, serviceUUID: BluetoothUUID,
                characteristicHandle: UInt16, characteristicUUID: BluetoothUUID, value: [UInt8]) {
        self.device = device
        self.serviceHandle = serviceHandle
        self.serviceUUID = serviceUUID
        self.characteristicHandle = characteristicHandle
        self.characteristicUUID = characteristicUUID
        self.value = value
    }
}
