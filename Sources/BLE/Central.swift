import FoundationEssentials

/// The manager state and why it is so.
public struct ManagerStatus: Sendable, Equatable {
    /// The best of the adapters in use: poweredOn while any is.
    public var state: ManagerState
    /// The first usable adapter ("hci0"), or the first in use, once one is known.
    public var adapter: String?
    /// Why the state is not poweredOn, in words a user can act on.
    public var reason: String?
    /// How many adapters in use are usable (powered): told with several in use, or none usable.
    public var usableAdapters: Int?

    public init(state: ManagerState, adapter: String? = nil, reason: String? = nil, usableAdapters: Int? = nil) {
        self.state = state
        self.adapter = adapter
        self.reason = reason
        self.usableAdapters = usableAdapters
    }
}

/// One Bluetooth controller.
public struct AdapterInfo: Sendable, Equatable {
    public var id: String
    public var address: BluetoothAddress?
    public var name: String?
    public var alias: String?
    public var powered: Bool
    public var discovering: Bool
    /// Whether this gateway uses it (the others are left alone).
    public var selected: Bool
    /// LE links up on it now.
    public var connections: Int
    /// The most links it took at once when it refused another (BlueZ tells no limit before).
    public var connectionLimit: Int?
    /// Where its advertisements come from (`.none` when it is not in use).
    public var advertisements: AdvertisementPath

    public init(id: String, address: BluetoothAddress?, name: String?, alias: String?, powered: Bool,
                discovering: Bool, selected: Bool, connections: Int = 0, connectionLimit: Int? = nil,
                advertisements: AdvertisementPath = .dbus) {
        self.id = id
        self.address = address
        self.name = name
        self.alias = alias
        self.powered = powered
        self.discovering = discovering
        self.selected = selected
        self.connections = connections
        self.connectionLimit = connectionLimit
        self.advertisements = advertisements
    }
}

/// A remote device as the central knows it.
public struct PeripheralInfo: Sendable, Equatable {
    public var id: BluetoothAddress
    public var addressType: String?
    public var name: String?
    public var rssi: Int?
    /// When an advertisement (or a change to one) was last seen.
    public var lastSeen: Date?
    public var state: PeripheralState
    public var paired: Bool
    /// Paired with keys kept for the next connections (BlueZ's `Bonded`).
    public var bonded = false
    /// Allowed to connect without asking (BlueZ's `Trusted`).
    public var trusted = false
    public var advertisement: AdvertisementData
    /// The ATT MTU of the connection, while connected.
    public var mtu: Int?
    /// Set while the central keeps the device connected (`autoReconnect`).
    public var reconnect: ReconnectStatus?
    /// Not seen (advertising) for a while, or no longer known to the stack: shown as last seen.
    public var stale = false
    /// The adapter that holds its link, while connected (or connecting).
    public var adapter: String?
    /// The adapters that hear it, each with its latest RSSI: with several adapters, `rssi` is the
    /// best recent one of them.
    public var adapters: [AdapterSighting] = []

    public init(id: BluetoothAddress, addressType: String?, name: String?, rssi: Int?, lastSeen: Date?,
                state: PeripheralState, paired: Bool, advertisement: AdvertisementData, mtu: Int? = nil) {
        self.mtu = mtu
        self.id = id
        self.addressType = addressType
        self.name = name
        self.rssi = rssi
        self.lastSeen = lastSeen
        self.state = state
        self.paired = paired
        self.advertisement = advertisement
    }
}

/// Where a central's advertisements come from (issue 36).
public enum AdvertisementPath: String, Sendable, Equatable {
    /// The kernel's Bluetooth management socket: each advertisement as the controller reported
    /// it (its bytes), beside the stack.
    case kernel
    /// The stack's own reports (BlueZ's D-Bus signals): the fields it parsed.
    case dbus
    /// None are read: the adapter is not one this gateway uses.
    case none
}

/// One adapter that hears a device.
public struct AdapterSighting: Sendable, Equatable {
    public var adapter: String
    public var rssi: Int?
    /// When it last heard an advertisement of it.
    public var lastSeen: Date?
    /// Bonded through this adapter (bonds are per adapter).
    public var bonded: Bool

    public init(adapter: String, rssi: Int?, lastSeen: Date?, bonded: Bool = false) {
        self.adapter = adapter
        self.rssi = rssi
        self.lastSeen = lastSeen
        self.bonded = bonded
    }
}

/// The scan as it stands.
/// How the controller scans: sending scan requests (and hearing scan responses), or listening only.
public enum ScanMode: String, Sendable, Equatable {
    case active, passive
}

public struct ScanStatus: Sendable, Equatable {
    public var scanning: Bool
    /// The options of the current or last scan.
    public var options: ScanOptions?
    public var startedAt: Date?
    /// When the scan's timeout ends it, if it has one.
    public var stopsAt: Date?
    /// Devices that matched the filters since the scan started.
    public var discovered: Int
    /// How the controller scans for the running scan now (a passive scan runs actively while
    /// a discovery runs beside it: the watch's, a connect's, another program's); nil when no
    /// scan runs.
    public var mode: ScanMode?

    public init(scanning: Bool, options: ScanOptions?, startedAt: Date?, stopsAt: Date?, discovered: Int, mode: ScanMode? = nil) {
        self.scanning = scanning
        self.options = options
        self.startedAt = startedAt
        self.stopsAt = stopsAt
        self.discovered = discovered
        self.mode = mode
    }
}

/// A BLE central, as `CBCentralManager` is one. A backend (BlueZ's) implements it; the
/// gateway only sees this.
public protocol Central: Sendable {
    /// Receives every `CentralEvent`. It runs on the central's own thread and must return
    /// quickly (hand the event on; never wait).
    func setEventHandler(_ handler: @escaping @Sendable (CentralEvent) -> Void)

    func status() async -> ManagerStatus
    func adapters() async throws(BLEError) -> [AdapterInfo]

    /// Starts a scan with these filters, or replaces the filters of the running one. The
    /// list of discovered peripherals starts empty.
    func startScan(_ options: ScanOptions) async throws(BLEError) -> ScanStatus
    func stopScan() async throws(BLEError) -> ScanStatus
    func scanStatus() async -> ScanStatus

    /// Starts the watch (a discovery that lasts until `stopWatch`, whatever the scan does,
    /// resumed after anything that ends it), or replaces the running watch's options. Its
    /// devices are reported as `.advertisementChanged` when first heard and at every
    /// advertisement the stack reports of them (duplicates included), and listed by `watched()`.
    func startWatch(_ options: WatchOptions) async throws(BLEError) -> WatchStatus
    func stopWatch() async throws(BLEError) -> WatchStatus
    func watchStatus() async -> WatchStatus
    /// The devices the watch follows, as last heard (`stale` when not heard for a while).
    func watched() async -> [PeripheralInfo]

    /// Peripherals that matched the current (or last) scan, and connected ones.
    func peripherals() async -> [PeripheralInfo]
    /// Changes whenever what `peripherals()` answers may have changed (read it first), so that
    /// a caller may keep an encoded answer while it stays the same; nil: don't keep one.
    var peripheralsVersion: UInt64? { get }
    /// A peripheral the adapter knows, or `unknownDevice`.
    func peripheral(_ id: BluetoothAddress) async throws(BLEError) -> PeripheralInfo

    /// Connects and resolves the services, within `timeout` (then `connectionTimeout`). With
    /// `autoReconnect` the central keeps the device connected: after an unexpected disconnection
    /// (or a failed first attempt) it tries again on its `ReconnectPolicy`'s schedule, and
    /// restores the notifications it had, until `disconnect`.
    func connect(_ id: BluetoothAddress, timeout: Duration, autoReconnect: Bool) async throws(BLEError) -> PeripheralInfo
    /// `connect` through the adapter named (nil: the central's choice). A central with one
    /// adapter takes nil or its own name; another is `invalidParameters`.
    func connect(_ id: BluetoothAddress, timeout: Duration, autoReconnect: Bool, adapter: String?) async throws(BLEError) -> PeripheralInfo
    /// Waits, at most `listening`, to hear the device advertise (discovering meanwhile), then
    /// connects as `connect` does, without keeping it: how a link lost is made again, so that no
    /// attempt waits in the kernel for a device that is not there. Not heard: `connectionTimeout`.
    func connectWhenHeard(_ id: BluetoothAddress, timeout: Duration, listening: Duration) async throws(BLEError) -> PeripheralInfo
    /// Disconnects, and stops keeping the device connected.
    func disconnect(_ id: BluetoothAddress) async throws(BLEError) -> PeripheralInfo

    /// The resolved GATT tree of a connected peripheral, in handle order.
    func services(_ id: BluetoothAddress) async throws(BLEError) -> [GATTService]
    /// The characteristic `ref` names on a connected peripheral (`invalidHandle` if none,
    /// `invalidParameters` if a UUID names several).
    func characteristic(_ id: BluetoothAddress, _ ref: CharacteristicRef) async throws(BLEError) -> GATTCharacteristic
    /// `readValue(for:)`: the property check, the read, and the attribute it read.
    func readValue(_ id: BluetoothAddress, _ ref: CharacteristicRef, offset: Int) async throws(BLEError) -> AttributeValue
    /// `writeValue(_:for:type:)`: the property and length checks (`WritePlan`), then one write, or
    /// several when `fragment` lets a value longer than one packet go without response.
    func writeValue(_ id: BluetoothAddress, _ ref: CharacteristicRef, _ value: [UInt8], type: WriteType,
                    fragment: Bool) async throws(BLEError) -> WriteOutcome
    func readDescriptor(_ id: BluetoothAddress, _ ref: DescriptorRef, offset: Int) async throws(BLEError) -> AttributeValue
    func writeDescriptor(_ id: BluetoothAddress, _ ref: DescriptorRef, _ value: [UInt8]) async throws(BLEError) -> WriteOutcome
    /// `setNotifyValue(_:for:)` on a characteristic already resolved (by its handle): returns
    /// whether it now notifies.
    func setNotifyValue(_ enabled: Bool, _ id: BluetoothAddress, characteristic: UInt16) async throws(BLEError) -> Bool
    /// Wants notifications of `characteristic` on, as a successful `setNotifyValue(true)` does,
    /// whether or not the device is connected or has the characteristic now (state restoration:
    /// a hold outlives the link and gattway). They start now when they can, else at the device's
    /// next connection or when the characteristic appears; `.resubscribed` reports each outcome.
    /// `setNotifyValue(false)` ends the wish.
    func keepNotifying(_ id: BluetoothAddress, characteristic: UInt16) async

    /// Pairs (and bonds, when the device keeps keys), connecting first if needed, within
    /// `timeout`. Questions the pairing asks are answered with `answer` when it fits, else put to
    /// clients (`.pairing` events) and answered with `answerPairing`. Already paired: at once.
    func pair(_ id: BluetoothAddress, answer: PairingAnswer?, timeout: Duration) async throws(BLEError) -> PeripheralInfo
    /// Answers the question a pairing of `id` asks (`invalidParameters` when none waits or the
    /// answer does not fit it).
    func answerPairing(_ id: BluetoothAddress, _ answer: PairingAnswer) async throws(BLEError)
    /// The question a pairing of `id` waits on, if any.
    func pairingRequest(_ id: BluetoothAddress) async -> PairingRequest?
    /// Forgets the device's bond (its keys, on this side), disconnecting it first; the device is
    /// unknown to the adapter afterwards, until it is heard again.
    func removeBond(_ id: BluetoothAddress) async throws(BLEError)
    /// Sets whether the device may connect without asking.
    func setTrusted(_ trusted: Bool, _ id: BluetoothAddress) async throws(BLEError) -> PeripheralInfo
    /// Discovers the device's services anew, as the device has them now (the stack's cache may be
    /// older than its firmware). For a bonded device that costs the bond: refused unless
    /// `dropBond`. A device that was connected is connected again; its notifications are restored.
    func refreshGATT(_ id: BluetoothAddress, dropBond: Bool) async throws(BLEError) -> [GATTService]
    /// The backend's own figures, for the doors' metrics.
    func diagnostics() -> [CentralMetric]
}

extension Central {
    public var peripheralsVersion: UInt64? { nil }
    public func connect(_ id: BluetoothAddress, timeout: Duration, autoReconnect: Bool, adapter: String?) async throws(BLEError) -> PeripheralInfo {
        if let adapter, let own = await status().adapter, adapter != own {
            throw BLEError(.invalidParameters, "adapter \(adapter) is not one gattway can use now (absent, powered off or not selected); usable: \(own)")
        }
        return try await connect(id, timeout: timeout, autoReconnect: autoReconnect)
    }

    /// A central that cannot listen connects at once.
    public func connectWhenHeard(_ id: BluetoothAddress, timeout: Duration, listening: Duration) async throws(BLEError) -> PeripheralInfo {
        try await connect(id, timeout: timeout, autoReconnect: false)
    }
    public func startWatch(_ options: WatchOptions) async throws(BLEError) -> WatchStatus {
        throw BLEError(.operationNotSupported, "this central cannot watch")
    }
    public func stopWatch() async throws(BLEError) -> WatchStatus { .off }
    public func watchStatus() async -> WatchStatus { .off }
    public func watched() async -> [PeripheralInfo] { [] }
    public func diagnostics() -> [CentralMetric] { [] }
}

/// A figure a backend reports about itself for the doors' metrics (its own names: D-Bus calls, ...).
public struct CentralMetric: Sendable {
    public enum Kind: Sendable { case counter, gauge }
    public var name: String
    public var help: String
    public var kind: Kind
    public var labels: [(String, String)]
    public var value: Double

    public init(_ name: String, _ help: String, _ kind: Kind, labels: [(String, String)] = [], _ value: Double) {
        self.name = name
        self.help = help
        self.kind = kind
        self.labels = labels
        self.value = value
    }
}

public enum WriteType: Sendable, Hashable {
    case withResponse
    case withoutResponse

    /// `maximumWriteValueLength(for:)`: a write with response may be long (the stack makes prepared
    /// writes up to the 512-byte attribute limit); one without response must fit one packet,
    /// MTU - 3 bytes, and no attribute value exceeds 512 bytes even with a 517-byte MTU.
    public func maximumWriteValueLength(mtu: Int?) -> Int {
        switch self {
        case .withResponse: return Self.maximumAttributeLength
        case .withoutResponse:
            let clamped = min(max(mtu ?? 23, 23), 517)  // ATT MTUs are 23...517, whatever a peer claims
            return min(clamped - 3, Self.maximumAttributeLength)
        }
    }

    public static let maximumAttributeLength = 512
}

/// A device the central keeps connected.
public struct ReconnectStatus: Sendable, Equatable {
    /// Attempts since the link was last up (0 while it is up).
    public var attempt: Int
    /// When the next attempt starts, while one is scheduled.
    public var nextAttempt: Date?
    /// Why the link went down, or the last attempt failed.
    public var lastError: BLEError?
    /// The attempt is due and waits to hear the device advertise before it connects.
    public var listening: Bool

    public init(attempt: Int, nextAttempt: Date?, lastError: BLEError?, listening: Bool = false) {
        self.attempt = attempt
        self.nextAttempt = nextAttempt
        self.lastError = lastError
        self.listening = listening
    }
}

/// When to try again after a kept device lost its link: the first attempt after a random delay
/// within `first`, then each delay `factor` times the last, with ±`jitter`, at most `maximum`.
public struct ReconnectPolicy: Sendable, Equatable {
    public var first: ClosedRange<Double>
    public var factor: Double
    public var jitter: Double
    public var maximum: Double

    /// 1–5 s, then doubling with ±20 % up to 60 s.
    public static let standard = ReconnectPolicy(first: 1...5, factor: 2, jitter: 0.2, maximum: 60)

    public init(first: ClosedRange<Double>, factor: Double, jitter: Double, maximum: Double) {
        self.first = first
        self.factor = factor
        self.jitter = jitter
        self.maximum = maximum
    }

    /// The delay before attempt `attempt` (1, 2, ...), in seconds.
    public func delay(attempt: Int, random: (ClosedRange<Double>) -> Double = { Double.random(in: $0) }) -> Double {
        let start = random(first)
        guard attempt > 1 else { return min(start, maximum) }
        var grown = first.upperBound
        for _ in 1..<attempt where grown < maximum { grown *= factor }
        return min(maximum, grown * random((1 - jitter)...(1 + jitter)))
    }

    /// Errors that another attempt will not change.
    public static func isPermanent(_ error: BLEError) -> Bool {
        error.code == .cb(.operationNotSupported) || error.code == .cb(.invalidParameters)
    }
}
