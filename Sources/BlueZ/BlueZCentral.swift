import BLE
import DBus
import FoundationEssentials
import Synchronization
import Threading

/// The `Central` on BlueZ: a mirror of org.bluez's objects kept current by signals, and
/// method calls with deadlines for everything that acts.
public final class BlueZCentral: Central {
    let connection: Connection
    /// "hci0" when the user chose one; otherwise the first adapter BlueZ lists.
    private let adapterName: String?
    let log: @Sendable (String) -> Void
    let tree = ObjectTree()
    private let bus = Mutex<BusState>(.starting)
    private let scan = Mutex(ScanState())
    let queues = DeviceQueues()
    /// Starting and stopping a scan take several BlueZ calls each; one runs at a time, so that a
    /// stop cannot interleave with a start (the adapter's own queue, keyed by its address).
    private let scanCalls = ScanCalls()
    let waiters = Waiters()
    private let lastReload = Mutex<Task<Void, Never>?>(nil)
    private let eventHandler = HandlerSlot<CentralEvent>()
    /// The last state reported, so that only changes are.
    private let lastStatus = Mutex<ManagerStatus?>(nil)
    /// Devices this side is disconnecting: their disconnection is no error.
    let disconnecting = Mutex<Set<BluetoothAddress>>([])
    /// Devices being connected or disconnected right now.
    private let transitions = Mutex<[BluetoothAddress: PeripheralState]>([:])
    /// `adapterPath()`'s answer (`.some(nil)`: no adapter), and a generation that a change of
    /// adapters bumps, so that an answer computed before the change is not kept.
    private let adapterCache = Mutex<(generation: UInt64, path: ObjectPath??)>((0, nil))
    /// Per characteristic path, what its notifications carry besides the value (`value` empty);
    /// the generation, bumped when objects come or go, keeps a lookup made before from being kept.
    private let valueSources = Mutex<(generation: UInt64, sources: [ObjectPath: ValueUpdate])>((0, [:]))
    /// Bumped by every change that can change `peripherals()`.
    private let listVersion = Atomic<UInt64>(0)

    /// How long a discovery call may take before it counts as failed.
    static let callDeadline: Duration = .seconds(10)

    private enum BusState: Sendable {
        case starting
        case ready
        case absent
        case failed(BusError)
    }

    private struct ScanState {
        var scanning = false
        var options: ScanOptions?
        var startedAt: Date?
        var stopsAt: Date?
        /// Devices that matched since the scan started, with when they were last seen.
        var seen: [BluetoothAddress: Date] = [:]
        /// Bumped by every start and stop, so that an old timeout cannot stop a newer scan.
        var generation = 0

        var status: ScanStatus {
            ScanStatus(scanning: scanning, options: options, startedAt: startedAt, stopsAt: stopsAt, discovered: seen.count)
        }
    }

    /// `onBusLost` runs once if the D-Bus connection itself goes (dbus-daemon stopped): nothing
    /// works after that until the program connects again.
    public init(connection: Connection, adapter: String?, log: @escaping @Sendable (String) -> Void = { _ in },
                onBusLost: @escaping @Sendable () -> Void = {}) {
        self.connection = connection
        self.adapterName = adapter
        self.log = log
        tree.setObserver { [weak self] change in self?.treeChanged(change) }
        connection.setDisconnectHandler { [weak self] in
            guard let self else { return }
            self.log("the D-Bus connection is lost")
            self.bus.withLock { $0 = .failed(BusError(name: "org.freedesktop.DBus.Error.Disconnected", message: "the D-Bus connection is lost")) }
            self.reportStatus()
            onBusLost()
        }
    }

    public func setEventHandler(_ handler: @escaping @Sendable (CentralEvent) -> Void) {
        eventHandler.set(handler)
    }

    func emit(_ event: CentralEvent) { eventHandler(event) }

    /// Reports the state if it changed.
    func reportStatus() {
        let current = currentStatus()
        let changed = lastStatus.withLock { last -> Bool in
            defer { last = current }
            return last != current
        }
        if changed { emit(.state(current)) }
    }

    /// Subscribes to BlueZ's signals, then loads its objects. Problems show in `status()`.
    public func start() async {
        let objectManager = MatchRule(sender: BlueZ.service, interface: Connection.objectManagerInterface)
        let properties = MatchRule(sender: BlueZ.service, pathNamespace: ObjectPath(trusted: "/org/bluez"),
                                   interface: Connection.propertiesInterface, member: "PropertiesChanged")
        let owner = MatchRule(sender: BlueZ.busService, interface: BlueZ.busService, member: "NameOwnerChanged", arg0: BlueZ.service)
        let tree = self.tree
        do {
            try await connection.subscribe(objectManager) { tree.apply($0) }
            try await connection.subscribe(properties) { tree.apply($0) }
            try await connection.subscribe(owner) { [weak self] signal in
                guard let self else { return }
                let newOwner = signal.body.count > 2 ? signal.body[2].string ?? "" : ""
                if newOwner.isEmpty {
                    self.log("org.bluez left the bus")
                    self.bus.withLock { $0 = .absent }
                    self.tree.clear()
                    self.reportStatus()
                    self.scan.withLock { $0.scanning = false; $0.generation += 1 }
                } else {
                    self.log("org.bluez is back on the bus (\(newOwner)); reloading its objects")
                    Task { await self.reload() }
                }
            }
        } catch {
            bus.withLock { $0 = .failed(error) }
            log("cannot subscribe to BlueZ signals: \(error)")
            return
        }
        await reload()
    }

    /// Reads every object again. Reloads run one after another: two at once would let the
    /// later snapshot overwrite signals applied after the earlier one.
    func reload() async {
        let mine = lastReload.withLock { last -> Task<Void, Never> in
            let before = last
            let task = Task { [weak self] in
                await before?.value
                await self?.loadObjects()
            }
            last = task
            return task
        }
        await mine.value
    }

    private func loadObjects() async {
        tree.beginLoading()
        do {
            let reply = try await connection.call(.methodCall(destination: BlueZ.service, path: .root,
                                                              interface: Connection.objectManagerInterface,
                                                              member: "GetManagedObjects"), timeout: Self.callDeadline)
            var objects: [ObjectPath: ObjectTree.Interfaces] = [:]
            for entry in reply.body.first?.dictionaryEntries ?? [] {
                if let path = entry.key.objectPath { objects[path] = Connection.interfaces(entry.value) }
            }
            bus.withLock { $0 = .ready }
            tree.load(objects, replySerial: reply.serial, owner: reply.sender)
            let adapters = objects.values.filter { $0[BlueZ.adapterInterface] != nil }.count
            log("BlueZ: \(objects.count) objects, \(adapters) adapter(s); using \(adapterPath()?.lastElement ?? "none")")
        } catch {
            let absent = error.name == "org.freedesktop.DBus.Error.ServiceUnknown" || error.name == "org.freedesktop.DBus.Error.NameHasNoOwner"
            let hadObjects = bus.withLock { state -> Bool in
                if case .ready = state, !absent { return true }
                state = absent ? .absent : .failed(error)
                return false
            }
            if hadObjects {
                // A slow answer (a reload after a connect): keep what the mirror has; signals
                // held meanwhile are newer than it.
                tree.resume()
            } else {
                tree.load([:], replySerial: .max, owner: nil)
            }
            reportStatus()
            log("cannot read BlueZ's objects: \(error)")
        }
    }

    // MARK: - Adapter

    /// The adapter in use: the chosen one, or the first BlueZ lists. Kept until an adapter
    /// comes or goes: every notification asks for it.
    func adapterPath() -> ObjectPath? {
        let (generation, kept) = adapterCache.withLock { ($0.generation, $0.path) }
        if let kept { return kept }
        let adapters = tree.objects(with: BlueZ.adapterInterface, under: ObjectPath(trusted: "/org/bluez"))
        let path = adapterName.map { name in adapters.first { $0.0.lastElement == name }?.0 } ?? adapters.first?.0
        adapterCache.withLock { cache in
            if cache.generation == generation { cache.path = .some(path) }
        }
        return path
    }

    /// An adapter object came or went: look again next time.
    private func adaptersChanged() {
        adapterCache.withLock { $0.generation += 1; $0.path = nil }
    }

    public func status() async -> ManagerStatus { currentStatus() }

    private func currentStatus() -> ManagerStatus {
        switch bus.withLock({ $0 }) {
        case .starting:
            return ManagerStatus(state: .unknown, reason: "reading BlueZ's state")
        case .absent:
            return ManagerStatus(state: .unsupported, reason: "org.bluez is not on the bus: is bluetoothd running?")
        case .failed(let error) where error.name == "org.freedesktop.DBus.Error.AccessDenied":
            return ManagerStatus(state: .unauthorized, reason: "the D-Bus policy denies access to org.bluez: \(error.message)")
        case .failed(let error):
            return ManagerStatus(state: .unknown, reason: "BlueZ did not answer: \(error)")
        case .ready:
            break
        }
        guard let path = adapterPath(), let props = tree.properties(at: path, BlueZ.adapterInterface) else {
            let reason = adapterName.map { "adapter \($0) not found" } ?? "no Bluetooth adapter"
            return ManagerStatus(state: .unsupported, reason: reason)
        }
        let name = String(path.lastElement)
        if props["Powered"]?.bool != true {
            return ManagerStatus(state: .poweredOff, adapter: name, reason: "adapter \(name) is powered off")
        }
        return ManagerStatus(state: .poweredOn, adapter: name)
    }

    public func adapters() async throws(BLEError) -> [AdapterInfo] {
        let selected = adapterPath()
        return tree.objects(with: BlueZ.adapterInterface, under: ObjectPath(trusted: "/org/bluez")).map { path, props in
            AdapterInfo(id: String(path.lastElement), address: props["Address"]?.string.flatMap { BluetoothAddress($0) },
                        name: props["Name"]?.string, alias: props["Alias"]?.string,
                        powered: props["Powered"]?.bool ?? false, discovering: props["Discovering"]?.bool ?? false,
                        selected: path == selected)
        }
    }

    /// The adapter's path, or the error a request gets while Bluetooth is not usable.
    func usableAdapter() async throws(BLEError) -> ObjectPath {
        let status = await status()
        guard status.state == .poweredOn, let path = adapterPath() else {
            throw BLEError(.unknown, "Bluetooth is \(status.state.name)" + (status.reason.map { ": \($0)" } ?? ""))
        }
        return path
    }

    // MARK: - Scanning

    public func startScan(_ options: ScanOptions) async throws(BLEError) -> ScanStatus {
        try await scanCalls.run { () async throws(BLEError) -> ScanStatus in try await self.startScanNow(options) }
    }

    public func stopScan() async throws(BLEError) -> ScanStatus {
        try await scanCalls.run { () async throws(BLEError) -> ScanStatus in try await self.stopScanNow() }
    }

    private func startScanNow(_ options: ScanOptions) async throws(BLEError) -> ScanStatus {
        try options.validate()
        guard options.active else {
            throw BLEError(.operationNotSupported, "passive scanning is not supported: BlueZ 5.66 only scans actively through Adapter1")
        }
        let adapter = try await usableAdapter()
        var filter: [(String, Value)] = [("Transport", .string("le")), ("DuplicateData", .bool(options.allowDuplicates))]
        if !options.services.isEmpty { filter.append(("UUIDs", .strings(options.services.map(\.uuidString)))) }
        if let rssi = options.rssi { filter.append(("RSSI", .int16(Int16(rssi)))) }
        try await adapterCall(adapter, "SetDiscoveryFilter", [.stringVariantDictionary(filter)])

        // Always asked: BlueZ ends every discovery when the adapter powers off, whatever this
        // side believes; InProgress means this connection still discovers.
        do {
            try await adapterCall(adapter, "StartDiscovery")
        } catch where error.detail?.contains("InProgress") == true {
        }
        let now = Date()
        let (status, generation) = scan.withLock { s -> (ScanStatus, Int) in
            s.generation += 1
            s.scanning = true
            s.options = options
            s.startedAt = now
            s.stopsAt = options.timeout.map { now.addingTimeInterval($0) }
            s.seen.removeAll()
            return (s.status, s.generation)
        }
        peripheralsChanged()
        log("scan started: \(describe(options))")
        if let timeout = options.timeout {
            Task { [weak self] in
                try? await Task.sleep(for: .milliseconds(Int(timeout * 1000)))
                guard let self, self.scan.withLock({ $0.scanning && $0.generation == generation }) else { return }
                _ = try? await self.stopScan()
            }
        }
        return status
    }

    private func stopScanNow() async throws(BLEError) -> ScanStatus {
        let wasScanning = scan.withLock { s -> Bool in
            defer { s.scanning = false; s.stopsAt = nil; s.generation += 1 }
            return s.scanning
        }
        if wasScanning, let adapter = adapterPath() {
            do {
                try await adapterCall(adapter, "StopDiscovery")
                try await adapterCall(adapter, "SetDiscoveryFilter", [.emptyDictionary(key: "s", value: "v")])
            } catch {
                // "No discovery started" or a powered-off adapter: the scan is over either way.
                log("stopping discovery: \(error)")
            }
            log("scan stopped")
        }
        return scan.withLock { $0.status }
    }

    public func scanStatus() async -> ScanStatus { scan.withLock { $0.status } }

    public var peripheralsVersion: UInt64? { listVersion.load(ordering: .acquiring) }

    private func peripheralsChanged() { listVersion.add(1, ordering: .releasing) }

    func setTransition(_ id: BluetoothAddress, _ state: PeripheralState?) {
        transitions.withLock { $0[id] = state }
        peripheralsChanged()
    }

    private func adapterCall(_ adapter: ObjectPath, _ member: String, _ body: [Value] = []) async throws(BLEError) {
        do {
            _ = try await connection.call(.methodCall(destination: BlueZ.service, path: adapter, interface: BlueZ.adapterInterface,
                                                      member: member, body), timeout: Self.callDeadline)
        } catch {
            throw ErrorMapping.map(error, context: .adapter)
        }
    }

    private func describe(_ options: ScanOptions) -> String {
        var parts: [String] = []
        if !options.services.isEmpty { parts.append("services=" + options.services.map { $0.shortForm ?? $0.uuidString }.joined(separator: ",")) }
        if let name = options.name { parts.append("name=\(name)") }
        if let prefix = options.namePrefix { parts.append("namePrefix=\(prefix)") }
        if let rssi = options.rssi { parts.append("rssi>=\(rssi)") }
        if let timeout = options.timeout { parts.append("timeout=\(timeout)s") }
        return parts.isEmpty ? "no filters" : parts.joined(separator: " ")
    }

    /// A device that advertised (or changed) during a scan joins its results if it matches;
    /// whoever waits for a device's state hears of the change.
    private func treeChanged(_ change: ObjectTree.Change) {
        // What is kept until objects come or go, and whether the device list may have changed:
        // everything but a characteristic's new value can show in it.
        switch change {
        case .reloaded:
            objectsChanged()
            adaptersChanged()
            peripheralsChanged()
        case .added(_, let interfaces):
            objectsChanged()
            if interfaces[BlueZ.adapterInterface] != nil { adaptersChanged() }
            peripheralsChanged()
        case .removed(_, let names):
            objectsChanged()
            if names.contains(BlueZ.adapterInterface) { adaptersChanged() }
            peripheralsChanged()
        case .properties(_, let interface, let changed, let invalidated):
            let onlyAValue = interface == BlueZ.gattCharacteristicInterface && invalidated.isEmpty
                && changed.keys.allSatisfy { $0 == "Value" }
            if !onlyAValue { peripheralsChanged() }
        }
        switch change {
        case .reloaded: waiters.check { self.tree.properties(at: $0, BlueZ.deviceInterface) }
        case .added(let p, _), .removed(let p, _), .properties(let p, _, _, _):
            waiters.check(path: p) { self.tree.properties(at: $0, BlueZ.deviceInterface) }
        }
        switch change {
        case .reloaded, .added, .removed:
            reportStatus()
        case .properties(let p, let interface, let changed, _):
            if interface == BlueZ.adapterInterface {
                if changed["Powered"]?.bool == false, p == adapterPath() {
                    scan.withLock { $0.scanning = false; $0.stopsAt = nil; $0.generation += 1 }
                }
                reportStatus()
            }
            if interface == BlueZ.deviceInterface, let connected = changed["Connected"]?.bool { connectionChanged(p, connected) }
            if interface == BlueZ.gattCharacteristicInterface, let value = changed["Value"]?.bytes { valueChanged(p, value) }
        }
        let path: ObjectPath
        switch change {
        case .added(let p, let interfaces) where interfaces[BlueZ.deviceInterface] != nil: path = p
        case .properties(let p, let interface, _, _) where interface == BlueZ.deviceInterface: path = p
        default: return
        }
        guard let adapter = adapterPath(), path.parent == adapter,
              let props = tree.properties(at: path, BlueZ.deviceInterface),
              let address = DeviceProperties.address(props) else { return }
        let now = Date()
        let report = scan.withLock { s -> Bool in
            guard s.scanning, let options = s.options else { return false }
            let known = s.seen[address] != nil
            if known || options.matches(name: DeviceProperties.name(props), rssi: DeviceProperties.rssi(props),
                                        advertisement: DeviceProperties.advertisement(props)) {
                s.seen[address] = now
                return !known || options.allowDuplicates
            }
            return false
        }
        peripheralsChanged()  // `seen` moved on
        if report, let info = DeviceProperties.peripheral(props, lastSeen: now) { emit(.advertisement(info)) }
    }

    private func connectionChanged(_ path: ObjectPath, _ connected: Bool) {
        guard let adapter = adapterPath(), path.parent == adapter,
              let id = tree.properties(at: path, BlueZ.deviceInterface).flatMap(DeviceProperties.address) else { return }
        if connected {
            emit(.connection(id: id, state: .connected, error: nil))
        } else {
            let ours = disconnecting.withLock { $0.remove(id) != nil }
            emit(.connection(id: id, state: .disconnected,
                             error: ours ? nil : BLEError(.peripheralDisconnected, "\(id) disconnected")))
        }
    }

    /// A notification, or a read's result: the characteristic's identity is looked up once per
    /// object path (until objects come or go), so a notification costs one dictionary lookup.
    private func valueChanged(_ path: ObjectPath, _ value: [UInt8]) {
        let (generation, known) = valueSources.withLock { ($0.generation, $0.sources[path]) }
        var update: ValueUpdate
        if let known {
            update = known
        } else {
            guard let servicePath = path.parent, let devicePath = servicePath.parent, devicePath.parent == adapterPath(),
                  let id = tree.properties(at: devicePath, BlueZ.deviceInterface).flatMap(DeviceProperties.address),
                  let (handle, uuid) = tree.properties(at: path, BlueZ.gattCharacteristicInterface)
                    .flatMap({ Self.identity(path, $0, prefix: "char") }),
                  let (serviceHandle, serviceUUID) = tree.properties(at: servicePath, BlueZ.gattServiceInterface)
                    .flatMap({ Self.identity(servicePath, $0, prefix: "service") })
            else { return }
            update = ValueUpdate(device: id, serviceHandle: serviceHandle, serviceUUID: serviceUUID,
                                 characteristicHandle: handle, characteristicUUID: uuid, value: [])
            valueSources.withLock { cache in
                if cache.generation == generation { cache.sources[path] = update }
            }
        }
        update.value = value
        emit(.value(update))
    }

    /// Objects came or went: the characteristics' identities are looked up again.
    private func objectsChanged() {
        valueSources.withLock { $0.generation += 1; $0.sources.removeAll() }
    }

    // MARK: - Peripherals

    public func peripherals() async -> [PeripheralInfo] {
        guard let adapter = adapterPath() else { return [] }
        let seen = scan.withLock { $0.seen }
        let moving = transitions.withLock { $0 }
        return tree.objects(with: BlueZ.deviceInterface, under: adapter).compactMap { path, props in
            guard path.parent == adapter, let address = DeviceProperties.address(props) else { return nil }
            guard seen[address] != nil || props["Connected"]?.bool == true || moving[address] != nil else { return nil }
            return info(path, props, lastSeen: seen[address], transition: moving[address])
        }.sorted { $0.id < $1.id }
    }

    public func peripheral(_ id: BluetoothAddress) async throws(BLEError) -> PeripheralInfo {
        let path = try devicePath(id)
        guard let props = tree.properties(at: path, BlueZ.deviceInterface),
              let info = info(path, props, lastSeen: scan.withLock({ $0.seen[id] }), transition: transitions.withLock({ $0[id] })) else {
            throw BLEError(.unknownDevice, "no device \(id) is known to the adapter; scan for it first")
        }
        return info
    }

    private func info(_ path: ObjectPath, _ props: [String: Value], lastSeen: Date?, transition: PeripheralState?) -> PeripheralInfo? {
        guard var info = DeviceProperties.peripheral(props, lastSeen: lastSeen) else { return nil }
        if let transition { info.state = transition }
        if info.state == .connected {
            info.mtu = tree.objects(with: BlueZ.gattCharacteristicInterface, under: path).lazy.compactMap { $0.1["MTU"]?.integer }.first
        }
        return info
    }

    /// The D-Bus path of a device the adapter knows, or `unknownDevice`.
    func devicePath(_ id: BluetoothAddress) throws(BLEError) -> ObjectPath {
        guard let adapter = adapterPath(), let path = adapter.child(id.bluezPathComponent),
              tree.properties(at: path, BlueZ.deviceInterface) != nil else {
            throw BLEError(.unknownDevice, "no device \(id) is known to the adapter; scan for it first")
        }
        return path
    }
}
