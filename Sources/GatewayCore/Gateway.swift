import BLE
import Sensors
import Synchronization

/// The gateway's core over a `Central`: what every door shares — the central as the blocklist
/// lets clients use it, the event hub, notification holds, what outlives gattway (restoration),
/// devices kept connected and `connect=auto` connections, the value cache, the sensor board and
/// the diagnostics. It knows no door and no transport.
public final class Gateway: Sendable {
    /// The backend as the blocklist lets clients use it.
    package let central: BlocklistedCentral
    /// The GATT blocklist in force.
    package let blocklist: Blocklist
    public let version: String
    package let hub: EventHub
    package let holds: NotificationHolds
    /// Each device's latest sensor reading (the sensor list, a device's `sensor`, `sensor` events).
    package let sensors: SensorBoard
    /// Whether a connect without `autoReconnect` keeps the device connected.
    package let autoReconnect: Bool
    /// What outlives gattway (`--state-dir`).
    package let restoration: Restoration
    /// The last values read or notified, for `?maxAge=`.
    package let values: ValueCache
    /// Devices gattway connected for `connect=auto`, disconnected when idle.
    package let autoConnections: AutoConnections
    /// Every advertisement the central reports, as it comes, for doors that forward them all.
    package let advertisements = AdvertisementFeed()
    /// Diagnostics: recent errors, reconnection attempts, notifications restored.
    package let errors = ErrorLog()
    package let reconnectAttempts = Atomic<Int>(0)
    package let resubscriptions = ResubscriptionCounters()
    package let started = ContinuousClock.now
    /// The peripheral role, when the stack offers one.
    package let peripheral: PeripheralRole?

    /// - Parameters:
    ///   - keepAliveInterval: how often an idle event stream gets a keep-alive, so that proxies keep it open.
    ///   - autoReconnect: the default of a connect's `autoReconnect`.
    ///   - stateDirectory: where the state to restore at start is kept (nil: nowhere).
    ///   - blocklist: the GATT attributes clients may not use, or only read or write.
    ///   - idleDisconnect: how long a device connected for `connect=auto` stays connected without requests.
    ///   - sensorKeys: bind keys of devices that encrypt their sensor advertisements.
    ///   - pairingKeys: passkeys and PIN codes of devices that pair with them.
    ///   - peripheral: the stack's peripheral role (nil: gattway is a central only).
    public init(central: Central, version: String, keepAliveInterval: Duration = .seconds(15), autoReconnect: Bool = false,
                stateDirectory: String? = nil, blocklist: Blocklist = .standard, idleDisconnect: Duration = .seconds(60),
                sensorKeys: SensorKeys = SensorKeys(), pairingKeys: PairingKeys = PairingKeys(),
                peripheral: (any PeripheralManager)? = nil, log: @escaping @Sendable (String) -> Void = { _ in }) {
        let autoPairing = AutoPairing(keys: pairingKeys, log: log)
        let central = BlocklistedCentral(base: central, blocklist: blocklist, autoPairing: autoPairing)
        self.central = central
        self.blocklist = blocklist
        self.autoReconnect = autoReconnect
        let restoration = Restoration(directory: stateDirectory, log: log)
        self.restoration = restoration
        self.version = version
        let hub = EventHub(keepAliveInterval: keepAliveInterval)
        self.hub = hub
        let sensors = SensorBoard(keys: sensorKeys) { hub.publish(.sensor($0)) }
        self.sensors = sensors
        let holds = NotificationHolds(central: central)
        self.holds = holds
        let values = ValueCache()
        self.values = values
        let autoConnections = AutoConnections(central: central, holds: holds, idleAfter: idleDisconnect, log: log)
        self.autoConnections = autoConnections
        self.peripheral = peripheral.map { PeripheralRole(manager: $0, hub: hub, blocklist: blocklist, restoration: restoration, log: log) }
        let advertisements = advertisements
        central.setEventHandler { [weak self] event in
            switch event {
            case .advertisement(let info):
                hub.publish(event)
                sensors.hear(info)
                advertisements.heard(info)
            case .advertisementChanged(let info):
                // Not a client's `advertisement` event (see CentralEvent): only a reading, if any.
                sensors.hear(info)
                advertisements.heard(info)
            case .value(let update):
                // Told apart here, on the central's thread, while a read's turn is still open.
                hub.publish(.central(event), readResult: !values.keepIfNotification(update))
            default:
                hub.publish(event)
            }
            self?.noteEvent(event)
            switch event {
            case .state(let status): restoration.stateChanged(status, central: central)
            case .connection(let id, .connected, _): restoration.connected(id)
            case .connection(let id, .disconnected, _): autoConnections.linkDown(id)
            case .resubscribed(let id, let handle, _, let error): restoration.resubscribed(id, handle, error)
            case .pairing(let id, .request(let request)): autoPairing.asked(id, request, on: central.base)
            default: break
            }
        }
    }

    /// Restores what the state directory says (the scan, kept devices, kept holds); kept devices
    /// that cannot connect now are tried again by the central. `restoration.lastReport` says
    /// how it went.
    public func restore() async {
        await restoration.restore(central: central, holds: holds)
        await peripheral?.restore()
    }

    /// `--watch`: starts watching every device, unless the state file restores a watch (with
    /// its own filters). Not recorded in the state file: the flag says it at every start.
    public func watchAtStart() async {
        // What is kept (read from the state file at start): `restore`, which ran first, has
        // consumed the file itself.
        guard restoration.current.watch == nil else { return }
        // No options to refuse; an adapter that is not usable yet only delays the discovery.
        _ = try? await central.startWatch(WatchOptions())
    }

    /// Bind keys of sensors that encrypt their advertisements (SIGHUP reloads them).
    public func replaceSensorKeys(_ keys: SensorKeys) { sensors.replaceKeys(keys) }

    /// How many bind keys are in force.
    public var sensorKeyCount: Int { sensors.keyCount }

    /// Passkeys and PIN codes of devices that pair with them (SIGHUP reloads them).
    public func replacePairingKeys(_ keys: PairingKeys) { central.autoPairing.replaceKeys(keys) }

    /// How many pairing keys are in force.
    public var pairingKeyCount: Int { central.autoPairing.keyCount }

    /// Events of the central that are errors: links lost, notifications not restored.
    private func noteEvent(_ event: CentralEvent) {
        switch event {
        case .connection(let id, .disconnected, let error?):
            errors.count(error)
            errors.record(error, operation: "link", device: id)
        case .resubscribed(let id, let handle, _, let error?):
            resubscriptions.failed.add(1, ordering: .relaxed)
            errors.count(error)
            errors.record(error, operation: "restore notifications \(handleText(handle))", device: id)
        case .resubscribed:
            resubscriptions.restored.add(1, ordering: .relaxed)
        case .reconnecting(let id, let attempt, _, let error):
            reconnectAttempts.add(1, ordering: .relaxed)
            // Attempt 1 follows the loss, already recorded; the later ones follow a failed attempt.
            if attempt > 1, let error {
                errors.count(error)
                errors.record(error, operation: "reconnect", device: id)
            }
        default:
            break
        }
    }
}
