import BLE
import DBus

/// bluetoothd's view of one peripheral through one adapter: the Device1 object
/// `/org/bluez/hciN/dev_…`, its GATT cache and objects, its bond and the link (BlueZ keeps one
/// per adapter that hears a device). The peripheral itself is a `Peripheral`, shared by them.
struct DeviceState: Sendable {
    /// The peripheral's (kept equal to it when an adapter's advertisements change it).
    var config: SimulatorConfiguration.Device
    let path: ObjectPath
    /// Its adapter, in `Engine.adapters`.
    let adapter: Int
    /// The peripheral, in `Engine.peripherals`.
    let peer: Int
    /// The adapter's kernel keeps a link to the device that the controller no longer has (the
    /// staleLink fault): Connect fails at once until the adapter is powered off.
    var staleLink = false

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

    /// The peripheral's table changed while this bonded central was away: it indicates Service
    /// Changed at the next connection, as a server does for a bonded client.
    var serviceChangedPending = false
    /// This entry is a remote central (another simulated adapter) connected to the adapter's
    /// registered applications: bluetoothd shows it Connected without a link of its own.
    var incoming = false

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

    init(config: SimulatorConfiguration.Device, adapterPath: ObjectPath, adapter: Int, peer: Int) {
        self.config = config
        path = adapterPath.child("dev_" + config.address.joined(by: "_"))!
        self.adapter = adapter
        self.peer = peer
    }

    var address: BluetoothAddress { config.address }
    /// bluetoothd has a GATT client for the device (ATT is up).
    var hasGATT: Bool { link == .connected || link == .disconnecting }
    var mtu: Int { config.mtu }
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
    /// Values notified to the control interface's subscription (`CentralSubscribe`), oldest first.
    var controlValues: [[UInt8]] = []

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
