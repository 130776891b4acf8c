import BLE
import DBus
import Synchronization
import Threading

/// The `Central` on BlueZ, assembled from its parts:
///
/// - `BusLink`: the D-Bus link to bluetoothd, loading its objects into the `ObjectTree` (the
///   mirror, written in one place), and the manager state;
/// - `GATTIndex`: where the adapter, devices and attributes are in that tree;
/// - `Discovery`: BlueZ's discovery for the scan, the watch and the devices listened for;
/// - `AdvertisementReports`: what the devices' signals mean (heard, found, followed);
/// - `DeviceList`: the devices listed, with their sightings, transitions and reconnections;
/// - `Connector`: connect, disconnect, link loss, and each device's turn;
/// - `GATTOperations`: reads, writes and notifications;
/// - `PairingAgent`: gattway's BlueZ agent, `Pair`, and the agent's questions put to clients;
/// - `BlueZPeripheral`: the peripheral role (`peripheral`) on the same bus link.
///
/// Every change to the mirror reaches the parts in the order it was applied (index first).
public final class BlueZCentral: Central {
    private let events = HandlerSlot<CentralEvent>()
    let link: BusLink
    let discovery: Discovery
    private let devices: DeviceList
    private let reports: AdvertisementReports
    /// Advertisements from the kernel's management socket, when it reads.
    private let kernel: KernelAdvertisements
    private let connector: Connector
    private let gatt: GATTOperations
    private let agent: PairingAgent
    /// The peripheral role on the same adapters and bus link (issue 34).
    public let peripheral: BlueZPeripheral
    private let log: @Sendable (String) -> Void
    /// Devices connected through this side whose services were resolved: a later change of their
    /// GATT services is a Service Changed (or a refresh), told as `.servicesChanged`.
    private let settled = Mutex<[BluetoothAddress: Task<Void, Never>?]>([:])

    /// A central on the bus at `address` (the system bus's, usually). Without a bus at start, or
    /// after it went away, it reports `unsupported` and connects again with backoff.
    public convenience init(busAddress address: String, adapters: AdapterSelection = .all, reconnectPolicy: ReconnectPolicy = .standard,
                            staleAfter: Duration = .seconds(60), forgetAfter: Duration = .seconds(3600),
                            pairing: PairingOptions = PairingOptions(), recovery: RecoveryOptions = RecoveryOptions(),
                            advertisements: AdvertisementSource = .dbus, monitorLedger: MonitorLedger? = nil,
                            log: @escaping @Sendable (String) -> Void = { _ in }) {
        self.init(adapters: adapters, reconnectPolicy: reconnectPolicy, staleAfter: staleAfter, forgetAfter: forgetAfter,
                  pairing: pairing, recovery: recovery, advertisements: advertisements, monitorLedger: monitorLedger, log: log) { () throws(BusError) in
            try Connection(address: address)
        }
    }

    /// `connect` opens a bus connection; it is called at start and again after the bus went away.
    /// A device the scan found and has not seen for `staleAfter` is listed `stale`; the watch
    /// forgets one it has not heard for `forgetAfter`. Notifications wanted that have not started
    /// again `restoreDeadline` after their device connected are reported (`.resubscribed`). The
    /// advertisement monitors of passive scanning are written down in `monitorLedger`, if given.
    public init(adapters: AdapterSelection = .all, reconnectPolicy: ReconnectPolicy = .standard, staleAfter: Duration = .seconds(60),
                forgetAfter: Duration = .seconds(3600), restoreDeadline: Duration = .seconds(10), pairing: PairingOptions = PairingOptions(),
                recovery: RecoveryOptions = RecoveryOptions(), advertisements: AdvertisementSource = .dbus, monitorLedger: MonitorLedger? = nil,
                log: @escaping @Sendable (String) -> Void = { _ in }, connect: @escaping @Sendable () throws(BusError) -> Connection) {
        let tree = ObjectTree()
        let index = GATTIndex(tree: tree, selection: adapters)
        let link = BusLink(connect: connect, tree: tree, index: index, events: events, log: log)
        let devices = DeviceList(link: link, staleAfter: staleAfter, forgetAfter: forgetAfter)
        let hearing = Hearing()
        let monitors = AdvertisementMonitors(ledger: monitorLedger, log: log)
        let discovery = Discovery(link: link, devices: devices, hearing: hearing, monitors: monitors, log: log)
        let reset = AdapterReset(link: link, enabled: recovery.resetAdapter, interval: recovery.resetInterval, log: log)
        let connector = Connector(link: link, events: events, devices: devices, discovery: discovery,
                                  queues: SerialQueues(maxWaiting: 32, maxWait: .seconds(60)),
                                  policy: reconnectPolicy, adapterReset: reset, log: log)
        self.link = link
        self.discovery = discovery
        self.devices = devices
        let reports = AdvertisementReports(link: link, events: events, discovery: discovery, devices: devices, hearing: hearing)
        self.reports = reports
        kernel = KernelAdvertisements(link: link, reports: reports, source: advertisements, monitors: monitors, log: log)
        self.connector = connector
        let gatt = GATTOperations(link: link, connector: connector, events: events, restoreDeadline: restoreDeadline, log: log)
        self.gatt = gatt
        self.log = log
        let agent = PairingAgent(link: link, events: events, capability: pairing.io, isDefault: pairing.defaultAgent,
                                 answerDeadline: pairing.answerDeadline, log: log)
        self.agent = agent
        let peripheral = BlueZPeripheral(link: link, isOwnLink: { [devices] path in
            BlueZ.address(pathElement: path.lastElement).map(devices.isConnecting) ?? false
        }, log: log)
        self.peripheral = peripheral
        link.methodCalls.set { call in
            if !agent.handle(call) && !peripheral.handle(call) {
                link.send(call.errorReply(BusError(name: "org.freedesktop.DBus.Error.UnknownObject", message: "gattway has no object here")))
            }
        }
        link.loaded.set { _ in
            Task { await agent.register() }
            Task { await peripheral.restoreAll() }
        }
        connector.setReconnectedHandler { [weak self] id in
            self?.settle(id)
            Task { await gatt.resubscribe(id) }
        }
        tree.setObserver { [weak self] change in self?.treeChanged(change) }
    }

    /// Every change, to every part, in order: the index first, so that the others read it
    /// current, and a new manager state before what follows from it.
    private func treeChanged(_ change: ObjectTree.Change) {
        link.index.update(change)
        switch change {
        case .reloaded, .added, .removed: link.reportStatus()
        case .properties(_, let interface, _, _): if interface == BlueZ.adapterInterface { link.reportStatus() }
        }
        engageLinked(change)
        discovery.observe(change)
        reports.observe(change)
        connector.observe(change)
        gatt.observe(change)
        noteServiceChanges(change)
        noteAdapterChanges(change)
        peripheral.observe(change)
        switch change {
        case .reloaded, .added, .removed:
            break
        case .properties(let path, let interface, let changed, _):
            if interface == BlueZ.gattCharacteristicInterface, let value = changed["Value"]?.bytes,
               var update = link.index.source(ofCharacteristic: path) {
                update.value = value
                events(.value(update))
            }
        }
    }

    public func setEventHandler(_ handler: @escaping @Sendable (CentralEvent) -> Void) { events.set(handler) }

    /// Opens the kernel's management channel if it may and should, then connects to the bus,
    /// subscribes to BlueZ's signals and loads its objects. Problems show in `status()`.
    public func start() async {
        await kernel.start()
        await link.start()
    }

    /// Where advertisements come from now.
    public var advertisementPath: AdvertisementPath { link.advertisementPath }

    /// While advertisements come from the kernel: a device BlueZ lists as linked is engaged (its
    /// Device1 signals read), and the channel follows the adapters in use.
    private func engageLinked(_ change: ObjectTree.Change) {
        switch change {
        case .reloaded:
            kernel.adaptersChanged()
            guard link.advertisementPath == .kernel else { return }
            for adapter in link.index.adapterPaths() {
                for (path, props) in link.tree.objects(with: BlueZ.deviceInterface, under: adapter)
                where path.parent == adapter && props["Connected"]?.bool == true {
                    Task { [link] in await link.engage(path) }
                }
            }
        case .added(let path, let interfaces):
            if interfaces[BlueZ.adapterInterface] != nil { kernel.adaptersChanged() }
            if link.advertisementPath == .kernel, interfaces[BlueZ.deviceInterface]?["Connected"]?.bool == true {
                Task { [link] in await link.engage(path) }
            }
        case .removed(_, let names):
            if names.contains(BlueZ.adapterInterface) { kernel.adaptersChanged() }
        case .properties:
            break
        }
    }

    /// Runs `body` on the D-Bus connection's thread (`Connection.onConnectionThread`); false, and
    /// nothing runs, while there is no bus connection (it is being made again, with backoff).
    public func onBusThread(_ body: @escaping @Sendable () -> Void) -> Bool {
        guard let connection = link.connection else { return false }
        connection.onConnectionThread(body)
        return true
    }

    /// Lets go of the bus and the management channel (shutdown).
    public func close() {
        kernel.close()
        link.close()
    }

    // MARK: - Central

    public func status() async -> ManagerStatus { link.status() }
    public func adapters() async throws(BLEError) -> [AdapterInfo] { link.adapters() }

    public func startScan(_ options: ScanOptions) async throws(BLEError) -> ScanStatus { try await discovery.start(options) }
    public func stopScan() async throws(BLEError) -> ScanStatus { try await discovery.stop() }
    public func scanStatus() async -> ScanStatus { discovery.status() }
    public func startWatch(_ options: WatchOptions) async throws(BLEError) -> WatchStatus { try await discovery.startWatch(options) }
    public func stopWatch() async throws(BLEError) -> WatchStatus { try await discovery.stopWatch() }
    public func watchStatus() async -> WatchStatus { discovery.watchStatus() }
    public func watched() async -> [PeripheralInfo] { devices.watched() }
    public func peripherals() async -> [PeripheralInfo] { devices.peripherals() }
    public var peripheralsVersion: UInt64? { devices.version }
    public func peripheral(_ id: BluetoothAddress) async throws(BLEError) -> PeripheralInfo { try devices.peripheral(id) }

    public func connect(_ id: BluetoothAddress, timeout: Duration, autoReconnect: Bool) async throws(BLEError) -> PeripheralInfo {
        try await connect(id, timeout: timeout, autoReconnect: autoReconnect, adapter: nil)
    }

    public func connect(_ id: BluetoothAddress, timeout: Duration, autoReconnect: Bool, adapter: String?) async throws(BLEError) -> PeripheralInfo {
        // A device the kernel heard lately that BlueZ does not know (a passive scan's: bluetoothd
        // makes no object of the monitor's reports): a short discovery of its own lets BlueZ
        // learn it first.
        if link.advertisementPath == .kernel, (try? link.index.devicePath(id)) == nil, let heard = try? devices.peripheral(id), !heard.stale {
            log("\(id): heard but unknown to BlueZ (a passive scan's); discovering until BlueZ has it")
            _ = await discovery.lookFor(id, within: min(timeout, Connector.lookForDeadline))
        }
        let info = try await connector.connect(id, timeout: timeout, keep: autoReconnect, adapter: adapter)
        settle(id)
        await gatt.resubscribe(id)
        return info
    }

    public func connectWhenHeard(_ id: BluetoothAddress, timeout: Duration, listening: Duration) async throws(BLEError) -> PeripheralInfo {
        let hearing = discovery.hearing
        let ours = !hearing.isListened(id)  // a kept device is listened for already: left as it is
        if ours { await discovery.listen(id) }
        let heard = await hearing.wait(id, within: listening)
        if ours { await discovery.stopListening(id) }
        guard heard else { throw BLEError(.connectionTimeout, "\(id) was not heard advertising within \(Connector.seconds(listening))") }
        return try await connect(id, timeout: timeout, autoReconnect: false)
    }

    public func disconnect(_ id: BluetoothAddress) async throws(BLEError) -> PeripheralInfo {
        try await connector.disconnect(id)
    }

    public func services(_ id: BluetoothAddress) async throws(BLEError) -> [GATTService] { try gatt.services(id) }

    public func characteristic(_ id: BluetoothAddress, _ ref: CharacteristicRef) async throws(BLEError) -> GATTCharacteristic {
        try gatt.characteristic(id, ref)
    }

    public func readValue(_ id: BluetoothAddress, _ ref: CharacteristicRef, offset: Int) async throws(BLEError) -> AttributeValue {
        try await gatt.read(id, ref, offset: offset)
    }

    public func writeValue(_ id: BluetoothAddress, _ ref: CharacteristicRef, _ value: [UInt8], type: WriteType,
                           fragment: Bool) async throws(BLEError) -> WriteOutcome {
        try await gatt.write(id, ref, value, type: type, fragment: fragment)
    }

    public func readDescriptor(_ id: BluetoothAddress, _ ref: DescriptorRef, offset: Int) async throws(BLEError) -> AttributeValue {
        try await gatt.readDescriptor(id, ref, offset: offset)
    }

    public func writeDescriptor(_ id: BluetoothAddress, _ ref: DescriptorRef, _ value: [UInt8]) async throws(BLEError) -> WriteOutcome {
        try await gatt.writeDescriptor(id, ref, value)
    }

    public func setNotifyValue(_ enabled: Bool, _ id: BluetoothAddress, characteristic: UInt16) async throws(BLEError) -> Bool {
        try await gatt.setNotify(enabled, id, characteristic: characteristic)
    }

    public func keepNotifying(_ id: BluetoothAddress, characteristic: UInt16) async {
        await gatt.keepNotifying(id, characteristic: characteristic)
    }

    // MARK: - Pairing and bonds

    /// Answers once a device the pairing left connected is ready (its services resolved), so
    /// that an operation sent on the answer meets it so, all within `timeout`.
    public func pair(_ id: BluetoothAddress, answer: PairingAnswer?, timeout: Duration) async throws(BLEError) -> PeripheralInfo {
        let deadline = ContinuousClock.now + timeout
        try await agent.pair(id, answer: answer, timeout: timeout)
        await connector.settleAfterPairing(id, by: deadline)
        return try devices.peripheral(id)
    }

    public func answerPairing(_ id: BluetoothAddress, _ answer: PairingAnswer) async throws(BLEError) { try agent.answer(id, answer) }

    public func pairingRequest(_ id: BluetoothAddress) async -> PairingRequest? { agent.request(id) }

    public func removeBond(_ id: BluetoothAddress) async throws(BLEError) {
        unsettle(id)
        try await connector.removeDevice(id)
    }

    public func setTrusted(_ trusted: Bool, _ id: BluetoothAddress) async throws(BLEError) -> PeripheralInfo {
        let path = try link.index.devicePath(id)
        await link.engage(path)
        do throws(BusError) {
            _ = try await link.call(.methodCall(destination: BlueZ.service, path: path, interface: Connection.propertiesInterface,
                                                member: "Set", [.string(BlueZ.deviceInterface), .string("Trusted"), .variant(.bool(trusted))]),
                                    timeout: BusLink.callDeadline)
        } catch {
            throw ErrorMapping.map(error, context: .device)
        }
        await connector.refreshDevice(path)
        return try devices.peripheral(id)
    }

    /// BlueZ keeps a device's GATT table (its cache) until it forgets the device: forgetting it
    /// (`RemoveDevice`), hearing it again and connecting makes it discover the table anew. For a
    /// bonded device that drops the bond too, so only when asked.
    public func refreshGATT(_ id: BluetoothAddress, dropBond: Bool) async throws(BLEError) -> [GATTService] {
        let path = try link.index.devicePath(id)
        let props = link.tree.properties(at: path, BlueZ.deviceInterface) ?? [:]
        if !dropBond, props["Bonded"]?.bool == true || props["Paired"]?.bool == true {
            throw BLEError(.invalidParameters, "\(id) is paired: BlueZ drops its GATT cache only with its bond, so it must be paired again"
                           + " afterwards; ask again with {\"dropBond\": true} to do it")
        }
        let wasConnected = props["Connected"]?.bool == true
        let kept = connector.reconnectStatus(id) != nil
        log("\(id): refreshing its GATT cache (forgetting the device, then discovering its services anew)")
        try await removeBond(id)
        guard await discovery.lookFor(id, within: Connector.lookForDeadline) else {
            throw BLEError(.unknownDevice, "\(id) was forgotten but not heard again within \(Connector.seconds(Connector.lookForDeadline)): connect it when it advertises")
        }
        _ = try await connect(id, timeout: Connector.attemptTimeout, autoReconnect: kept)
        let services = try gatt.services(id)
        events(.servicesChanged(id: id))
        if !wasConnected && !kept { _ = try? await disconnect(id) }
        return services
    }

    // MARK: - Adapters

    /// An adapter in use added, removed, or changed in what `/v1/adapters` shows of it or in its
    /// room for advertisements.
    private func noteAdapterChanges(_ change: ObjectTree.Change) {
        let tree = link.tree
        switch change {
        case .added(let p, let interfaces) where p.parent == BlueZ.root:
            guard let props = interfaces[BlueZ.adapterInterface], link.index.isInUse(adapter: p) else { return }
            log("adapter \(p.lastElement) added")
            events(.adapter(link.adapterInfo(p, props), change: .added))
        case .removed(let p, let names) where p.parent == BlueZ.root:
            let name = String(p.lastElement)
            guard names.contains(BlueZ.adapterInterface), link.index.selection.includes(name) else { return }
            log("adapter \(name) removed")
            events(.adapter(AdapterInfo(id: name, address: nil, name: nil, alias: nil, powered: false, discovering: false, selected: false),
                            change: .removed))
        case .properties(let p, BlueZ.adapterInterface, let changed, _):
            guard Self.shownAdapterProperties.contains(where: { changed[$0] != nil }), link.index.isInUse(adapter: p),
                  let props = tree.properties(at: p, BlueZ.adapterInterface) else { return }
            events(.adapter(link.adapterInfo(p, props), change: .changed))
        case .properties(let p, LEAdvertisement.managerInterface, let changed, _):
            // Its room for advertisements (the peripheral's status shows it): BlueZ signals the
            // counts after it answered the registration, so a status read at once may be behind.
            guard changed["ActiveInstances"] != nil || changed["SupportedInstances"] != nil, link.index.isInUse(adapter: p),
                  let props = tree.properties(at: p, BlueZ.adapterInterface) else { return }
            events(.adapter(link.adapterInfo(p, props), change: .changed))
        case .properties(let p, BlueZ.deviceInterface, let changed, _) where changed["Connected"] != nil:
            guard let adapter = p.parent, link.index.isInUse(adapter: adapter),
                  let props = tree.properties(at: adapter, BlueZ.adapterInterface) else { return }
            events(.adapter(link.adapterInfo(adapter, props), change: .changed))
        default:
            break
        }
    }

    private static let shownAdapterProperties = ["Powered", "Discovering", "Address", "Name", "Alias"]

    // MARK: - Service Changed

    private func settle(_ id: BluetoothAddress) { settled.withLock { if $0[id] == nil { $0[id] = .some(nil) } } }

    private func unsettle(_ id: BluetoothAddress) {
        let pending = settled.withLock { $0.removeValue(forKey: id) }
        pending??.cancel()
    }

    /// GATT services added or removed on a device whose services were resolved: told once the
    /// burst of objects is over (250 ms after the last).
    private func noteServiceChanges(_ change: ObjectTree.Change) {
        let path: ObjectPath
        switch change {
        case .added(let p, let interfaces) where interfaces[BlueZ.gattServiceInterface] != nil: path = p
        case .removed(let p, let names) where names.contains(BlueZ.gattServiceInterface): path = p
        case .properties(let p, BlueZ.deviceInterface, let changed, _) where changed["Connected"]?.bool == false:
            if let id = link.tree.properties(at: p, BlueZ.deviceInterface).flatMap(DeviceProperties.address) { unsettle(id) }
            return
        default: return
        }
        guard let device = link.index.device(of: path),
              let id = link.tree.properties(at: device, BlueZ.deviceInterface).flatMap(DeviceProperties.address) else { return }
        settled.withLock { s in
            guard let pending = s[id] else { return }
            pending?.cancel()
            s[id] = Task { [weak self] in
                do { try await Task.sleep(for: .milliseconds(250)) } catch { return }
                self?.log("\(id): its GATT services changed")
                self?.events(.servicesChanged(id: id))
            }
        }
    }

    public func diagnostics() -> [CentralMetric] {
        let unrestored = gatt.unrestoredCounts()
        let help = "Characteristics wanted notifying that do not since their device connected: waiting for their objects, or past the deadline (clients told)."
        return link.diagnostics() + [
            CentralMetric("gattway_scan_restarts_total", "Scans started again after BlueZ ended discovery by itself.", .counter,
                          Double(discovery.restartCount)),
            CentralMetric("gattway_notifications_unrestored", help, .gauge, labels: [("state", "waiting")], Double(unrestored.waiting)),
            CentralMetric("gattway_notifications_unrestored", help, .gauge, labels: [("state", "failed")], Double(unrestored.failed)),
            CentralMetric("gattway_adapter_resets_total", "Adapters powered off and on because connects kept failing as a stale link makes them.",
                          .counter, Double(connector.adapterReset.resets)),
            CentralMetric("gattway_dbus_properties_signals_total", "BlueZ's PropertiesChanged signals read, by interface.", .counter,
                          labels: [("interface", "device")], Double(link.signals.signalsRead.devices)),
            CentralMetric("gattway_dbus_properties_signals_total", "BlueZ's PropertiesChanged signals read, by interface.", .counter,
                          labels: [("interface", "other")], Double(link.signals.signalsRead.others)),
            CentralMetric("gattway_devices_engaged", "Devices whose BlueZ signals are read while advertisements come from the kernel.",
                          .gauge, Double(link.signals.engagedCount)),
        ] + kernelMetrics()
    }

    /// The management channel's counters, while it reads.
    private func kernelMetrics() -> [CentralMetric] {
        guard let c = kernel.counters else { return [] }
        let help = "Management-socket frames read, by what became of them."
        return [("delivered", c.delivered), ("bad", c.badFrames), ("ad_dropped", c.droppedAdvertisingData),
                ("other_controller", c.otherControllers), ("classic", c.classicDevices), ("controller", c.controllerEvents),
                ("other_event", c.otherEvents)].map {
            CentralMetric("gattway_management_frames_total", help, .counter, labels: [("outcome", $0.0)], Double($0.1))
        }
    }
}

/// How gattway pairs: the IO capabilities its agent declares, whether it is BlueZ's default agent,
/// and how long a pairing question waits for a client's answer.
public struct PairingOptions: Sendable {
    public var io: PairingIO
    public var defaultAgent: Bool
    public var answerDeadline: Duration

    /// NoInputNoOutput (what a box with no screen and no keyboard can honestly claim: Just Works),
    /// not the default agent, 25 s for an answer (the SMP procedure itself gives up after 30 s).
    public init(io: PairingIO = .noInputNoOutput, defaultAgent: Bool = false, answerDeadline: Duration = .seconds(25)) {
        self.io = io
        self.defaultAgent = defaultAgent
        self.answerDeadline = answerDeadline
    }
}

/// The last step of recovery: whether gattway may reset (power off and on) an adapter on which
/// connects keep failing as a stale link makes them fail, and how often at most.
public struct RecoveryOptions: Sendable {
    public var resetAdapter: Bool
    public var resetInterval: Duration

    /// Allowed, at most once in 5 minutes.
    public init(resetAdapter: Bool = true, resetInterval: Duration = .seconds(300)) {
        self.resetAdapter = resetAdapter
        self.resetInterval = resetInterval
    }
}
