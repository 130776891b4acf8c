import BLE
import DBus
import Glibc

/// One simulated peripheral as it is in the room: what it advertises and how loud each adapter
/// hears it, its GATT server, how it pairs, its faults. bluetoothd's views of it (one Device1
/// per adapter) are `DeviceState`s; it holds one link at a time, through one of them.
struct Peripheral: Sendable {
    /// What it advertises changes for an adapter's own advertisements (`local`).
    var config: SimulatorConfiguration.Device
    var faults: SimulatorConfiguration.Faults
    /// Connect attempts that still fail with `faults.connectError`; nil = all.
    var connectFailuresLeft: Int?
    /// Its Device1 entry in `Engine.devices` for each adapter, by adapter index.
    var entries: [Int] = []
    /// The RSSI at each adapter, by adapter index; nil: out of that adapter's range.
    var rssi: [Int?]
    /// The device took a new random address (`addressRotationMs`): this one is advertised no
    /// more, and bluetoothd forgets it when its TemporaryTimeout ends; its timers stop.
    var retired = false
    var advertisingCounter: UInt8 = 0
    var sensor: SensorState?
    /// Service data set at run time (`SetServiceData`), advertised over the configuration's.
    var advertisedServiceData: [BluetoothUUID: [UInt8]] = [:]
    var server: GATTServer
    /// How the peripheral pairs (`SetPairing` replaces it).
    var pairingConfig: SimulatorConfiguration.Pairing
    /// Its serial port, if it is a UART module (`SetUART` replaces the settings).
    var uart: UARTState
    /// One of the simulator's adapters, as other adapters hear it: what its registered
    /// advertisements send, and its registered applications as its GATT server.
    var local: LocalServer?

    init(config: SimulatorConfiguration.Device, adapters: [SimulatorConfiguration.Adapter]) {
        self.config = config
        faults = config.faults
        connectFailuresLeft = config.faults.connectError?.count
        rssi = adapters.map { config.rssi(at: $0.id) }
        server = GATTServer(AttributeTable(config.services))
        pairingConfig = config.pairing
        uart = UARTState(config.uart)
        // The packet counter starts at the Unix time, so that it still grows after the simulator
        // restarts: a gateway that ran on would refuse a smaller encrypted BTHome or MiBeacon counter as a replay.
        sensor = config.sensor.map {
            SensorState($0, address: config.address, climate: .random(counter: UInt32(truncatingIfNeeded: time(nil))),
                        advertisingIntervalMs: config.advertisingIntervalMs)
        }
    }

    var address: BluetoothAddress { config.address }
    var responseDelayMs: Int { faults.responseDelayMs ?? 0 }
}

/// The simulated peripheral's GATT server: its table (the firmware) and the values it holds.
struct GATTServer: Sendable {
    private(set) var table: AttributeTable
    /// Characteristic values, by table index.
    var values: [[UInt8]] = []
    var descriptorValues: [[UInt8]] = []
    /// The heartRate generators' current rate, by characteristic.
    var bpm: [Int] = []
    /// Counts the tables installed, so that the generators of an older one stop.
    private(set) var firmware = 0

    init(_ table: AttributeTable) {
        self.table = table
        install(table)
    }

    /// A new firmware: its table, with its initial values.
    mutating func install(_ table: AttributeTable) {
        self.table = table
        values = table.characteristics.map(\.configuration.value.bytes)
        descriptorValues = table.descriptors.map(\.initialValue)
        bpm = table.characteristics.map { _ in 72 }
        firmware += 1
    }

    /// What the server answers for its Database Hash (2B2A), if it has one.
    var databaseHash: [UInt8]? {
        table.characteristics.firstIndex { $0.uuid == AttributeTable.databaseHash }.map { values[$0] }
    }
}

/// An adapter in the peripheral role: its GATT server is its registered applications (requests
/// go to their objects) and it advertises its registered advertisements in turn.
struct LocalServer: Sendable {
    let adapter: Int
    /// The application object behind each characteristic of the server's table, and behind
    /// each descriptor (nil: one bluetoothd serves itself, the CCCD or extended properties).
    var characteristics: [ServedObject] = []
    var descriptors: [ServedObject?] = []
    /// Characteristics whose application was told StartNotify (a central subscribed).
    var notifying: Set<ServedObject> = []
    /// The advertisement sent last (they take turns, as the kernel rotates instances).
    var turn = 0
}

struct ServedObject: Sendable, Hashable {
    let owner: String
    let path: ObjectPath
}
