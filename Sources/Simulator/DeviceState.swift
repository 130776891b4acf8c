import BLE
import Glibc
import DBus

/// Everything about one simulated peripheral: bluetoothd's view of it (the Device1 object, its
/// GATT cache and objects) and the peripheral's own state (its GATT server, how it pairs).
struct DeviceState: Sendable {
    let config: SimulatorConfiguration.Device
    let path: ObjectPath
    var faults: SimulatorConfiguration.Faults
    /// Connect attempts that still fail with `faults.connectError`; nil = all.
    var connectFailuresLeft: Int?

    // MARK: Device1 (bluetoothd's side)
    var exported = false
    /// Found by discovery and neither connected nor paired: removed after TemporaryTimeout.
    var temporary = true
    /// The pending TemporaryTimeout removal.
    var temporaryTimer: Int?
    /// When bluetoothd last heard the device advertise: each report restarts TemporaryTimeout.
    var heardAt: ContinuousClock.Instant?
    var name: String?
    var alias: String?
    var paired = false
    var bonded = false
    /// The pairing was authenticated (MITM: passkey entry or numeric comparison), which
    /// "encrypt-authenticated-*" and "secure-*" attributes need.
    var authenticated = false
    var trusted = false
    var blocked = false
    var rssi: Int?
    var txPower: Int?
    var uuids: [BluetoothUUID] = []
    var manufacturerData: [UInt16: [UInt8]] = [:]
    var serviceData: [BluetoothUUID: [UInt8]] = [:]
    var advertisingFlags: [UInt8]?
    /// The Connected property (the suppressConnectedSignal fault sets it without a signal).
    var connected = false
    var servicesResolved = false
    /// bluetoothd's GATT cache (what it discovered; its D-Bus objects).
    var gatt = GATTCache()
    /// The cache's objects are exported (since the cache was filled, or bluetoothd restarted).
    var gattExported = false
    /// GATT services were resolved once: UUIDs then lists the primary services, and
    /// advertised UUIDs no longer change it.
    var servicesResolvedOnce = false

    // MARK: the link
    var link: Link = .idle
    /// Counts connections, so that late timers of an earlier one do nothing.
    var linkEpoch = 0
    var connectCall: Message?
    var disconnectCalls: [Message] = []
    /// RemoveDevice on a connected device: remove it once the link is down.
    var removeAfterDisconnect = false
    var pairing: Pairing?

    // MARK: the peripheral
    /// The device took a new random address (`addressRotationMs`): this one is advertised no
    /// more, and bluetoothd forgets it when its TemporaryTimeout ends; its timers stop.
    var retired = false
    var advertisingCounter: UInt8 = 0
    var sensor: SensorState?
    /// Service data set at run time (`SetServiceData`), advertised over the configuration's.
    var advertisedServiceData: [BluetoothUUID: [UInt8]] = [:]
    var peripheral: Peripheral
    /// How the peripheral pairs (`SetPairing` replaces it).
    var pairingConfig: SimulatorConfiguration.Pairing
    /// Its serial port, if it is a UART module (`SetUART` replaces the settings).
    var uart: UARTState
    /// The peripheral's table changed while a bonded bluetoothd was away: it indicates Service
    /// Changed at the next connection, as a server does for a bonded client.
    var serviceChangedPending = false

    enum Link: Equatable, Sendable {
        case idle
        case connecting(attempt: Int)
        case connected
        /// Disconnect was called; the link goes down after the adapter's disconnect delay.
        case disconnecting
    }

    /// A Pair call being served: it waits for the link (when it had to connect first) and then
    /// for the Security Manager and the agent.
    struct Pairing: Sendable {
        let id: Int
        let call: Message
        let sender: String
        /// The agent bluetoothd took at Pair: the caller's, else the default one (nil: none,
        /// so the central is NoInputNoOutput).
        let agent: Agent?
        /// The agent request waiting for its answer (it gets Cancel() if pairing ends first).
        var asking: AgentRequest?
        /// The passkey the peripheral displays for the central's user to enter.
        var displayedPasskey: UInt32?
    }

    enum AgentRequest: Sendable {
        case passkey(expected: UInt32)
        case confirmation
    }

    init(config: SimulatorConfiguration.Device, adapterPath: ObjectPath) {
        self.config = config
        path = adapterPath.child("dev_" + config.address.joined(by: "_"))!
        peripheral = Peripheral(AttributeTable(config, path: path))
        pairingConfig = config.pairing
        uart = UARTState(config.uart)
        faults = config.faults
        connectFailuresLeft = config.faults.connectError?.count
        // The packet counter starts at the Unix time, so that it still grows after the simulator
        // restarts: a gateway that ran on would refuse a smaller encrypted BTHome or MiBeacon counter as a replay.
        sensor = config.sensor.map {
            SensorState($0, address: config.address, climate: .random(counter: UInt32(truncatingIfNeeded: time(nil))),
                        advertisingIntervalMs: config.advertisingIntervalMs)
        }
    }

    var address: BluetoothAddress { config.address }
    /// bluetoothd has a GATT client for the device (ATT is up).
    var hasGATT: Bool { link == .connected || link == .disconnecting }
    var mtu: Int { config.mtu }
    var responseDelayMs: Int { faults.responseDelayMs ?? 0 }
    /// What Alias shows: the set alias, else the name, else the address with dashes.
    var displayAlias: String {
        alias ?? name ?? String(config.address.description.map { $0 == ":" ? "-" : $0 })
    }

    /// Back to a device bluetoothd has never seen (RemoveDevice); the peripheral keeps its values.
    mutating func forget() {
        exported = false
        temporary = true
        temporaryTimer = nil
        removeAfterDisconnect = false
        servicesResolvedOnce = false
        name = nil
        alias = nil
        paired = false
        bonded = false
        authenticated = false
        trusted = false
        blocked = false
        rssi = nil
        txPower = nil
        uuids = []
        manufacturerData = [:]
        serviceData = [:]
        advertisingFlags = nil
        gatt = GATTCache()
        gattExported = false
        serviceChangedPending = false
    }
}

/// The simulated peripheral's GATT server: its table (the firmware) and the values it holds.
struct Peripheral: Sendable {
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

/// bluetoothd's client-side state of one cached characteristic.
struct CharacteristicState: Sendable {
    /// bluetoothd's cache (the Value property); nil or empty = no Value property.
    var cached: [UInt8]?
    /// StartNotify sessions by D-Bus sender.
    var sessions: [String: Session] = [:]
    var notifying = false
    var subscribing: Subscribing?
    var read: PendingRead?
    var write: PendingCall?

    enum Session: Sendable, Equatable {
        /// The CCCD write is on its way.
        case pending
        case active
        /// Kept across a disconnection (bluetoothd re-subscribes on reconnect).
        case inactive
    }

    struct Subscribing: Sendable {
        let id: Int
        var waiters: [(sender: String, call: Message)]
    }
}

struct DescriptorState: Sendable {
    var cached: [UInt8]?
    var read: PendingRead?
    var write: PendingCall?
}

/// A ReadValue waiting for the peer; later calls with the same offset share its answer.
struct PendingRead: Sendable {
    let id: Int
    let offset: Int
    var calls: [Message]
}

struct PendingCall: Sendable {
    let id: Int
    let call: Message
}
