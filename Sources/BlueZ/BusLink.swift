import BLE
import DBus
import Synchronization
import Threading

/// gattway's link to bluetoothd over D-Bus: the bus connection (made again, with backoff, when
/// the bus is missing at start or goes away later), the signal subscriptions, loading the object
/// tree (again when bluetoothd comes back), whether org.bluez is there at all, and the manager
/// state that follows from it and from the adapter.
final class BusLink: Sendable {
    /// Opens a connection to the bus (it is called again after the bus went away).
    private let connect: @Sendable () throws(BusError) -> Connection
    private let current = Mutex<Connection?>(nil)
    /// Attempts to reach the bus since it was last up, and the sleep before the next.
    private let busRetry = Mutex<(attempt: Int, timer: Task<Void, Never>?, next: ContinuousClock.Instant?)>((0, nil, nil))
    private let closed = Atomic<Bool>(false)
    let tree: ObjectTree
    let index: GATTIndex
    private let log: @Sendable (String) -> Void
    private let events: HandlerSlot<CentralEvent>
    private let bus = Mutex<BusState>(.starting)
    /// The last state reported, so that only changes are.
    private let lastStatus = Mutex<ManagerStatus?>(nil)
    /// Loads run one after another: two at once would let the later snapshot overwrite signals
    /// applied after the earlier one.
    private let loads = SerialQueues<Int>(maxWaiting: 8, maxWait: nil)

    /// Which PropertiesChanged signals are read (all, or Device1's only for engaged devices while
    /// advertisements come from the kernel).
    let signals: PropertySignals

    /// Method calls bus peers make on gattway's own objects (its pairing agent's).
    let methodCalls = HandlerSlot<Message>()
    /// Runs after each load of BlueZ's objects that found bluetoothd.
    let loaded = HandlerSlot<Void>()

    /// How long a discovery call may take before it counts as failed.
    static let callDeadline: Duration = .seconds(10)
    /// How long reading an object's properties again may take.
    static let readDeadline: Duration = .seconds(2)

    private enum BusState: Sendable {
        case starting
        case ready
        case absent
        case failed(BusError)
        /// No bus connection.
        case noBus(BusError)
    }

    init(connect: @escaping @Sendable () throws(BusError) -> Connection, tree: ObjectTree, index: GATTIndex,
         events: HandlerSlot<CentralEvent>, log: @escaping @Sendable (String) -> Void) {
        self.connect = connect
        self.tree = tree
        self.index = index
        self.events = events
        self.log = log
        signals = PropertySignals { tree.apply($0) }
    }

    // MARK: - The bus

    /// The bus connection, while there is one.
    var connection: Connection? { current.withLock { $0 } }

    /// A method call on the current bus connection; without one, `Disconnected` at once.
    func call(_ message: Message, timeout: Duration) async throws(BusError) -> Message {
        let member = message.member ?? "?"
        do throws(BusError) {
            guard let connection else { throw Self.noBus }
            let reply = try await connection.call(message, timeout: timeout)
            counted(member, nil)
            return reply
        } catch {
            counted(member, error.name)
            throw error
        }
    }

    /// Reads an object's properties again. A mirror kept by signals only looks here to catch a
    /// signal BlueZ did not send: an answer that does not come soon is not waited for (seen in
    /// the lab: a GetAll unanswered for 25 s while the link it would have shown down was down).
    func getAllProperties(_ path: ObjectPath, _ interface: String) async throws(BusError) -> [String: Value] {
        do throws(BusError) {
            guard let connection else { throw Self.noBus }
            let props = try await connection.getAllProperties(BlueZ.service, path, interface, timeout: Self.readDeadline)
            counted("GetAll", nil)
            return props
        } catch {
            counted("GetAll", error.name)
            throw error
        }
    }

    /// Reads an object's properties of `interface` into the mirror: after a call that changed
    /// them, answers and lists (made from the mirror) say what BlueZ says now, whether or not it
    /// signals the change (it does not always; FIELD-NOTES).
    func readIntoMirror(_ path: ObjectPath, _ interface: String) async {
        if let props = try? await getAllProperties(path, interface) { tree.refresh(path, interface, props) }
    }

    /// The device at `path` is one gattway has to do with: its Device1 signals are read from now
    /// on, and its properties once, in case they changed unseen. At once while every signal is.
    func engage(_ path: ObjectPath) async {
        if await signals.engage(path) { await readIntoMirror(path, BlueZ.deviceInterface) }
    }

    /// Where advertisements come from now.
    var advertisementPath: AdvertisementPath { signals.scope == .engagedDevices ? .kernel : .dbus }

    /// Sends a message (a reply to a call on gattway's objects) if there is a bus connection.
    func send(_ message: Message) {
        do { try connection?.send(message) } catch { log("cannot answer \(message.member ?? "a call"): \(error)") }
    }

    // MARK: - Counting, for /metrics

    private let calls = Mutex<(byMember: [String: Int], errors: [String: Int], busConnects: Int)>(([:], [:], 0))

    private func counted(_ member: String, _ error: String?) {
        calls.withLock { c in
            c.byMember[member, default: 0] += 1
            if let error { c.errors[error, default: 0] += 1 }
        }
    }

    func diagnostics() -> [CentralMetric] {
        let c = calls.withLock { $0 }
        var out = c.byMember.sorted { $0.key < $1.key }.map {
            CentralMetric("gattway_dbus_calls_total", "D-Bus method calls to BlueZ, by member.", .counter, labels: [("member", $0.key)], Double($0.value))
        }
        out += c.errors.sorted { $0.key < $1.key }.map {
            CentralMetric("gattway_dbus_errors_total", "D-Bus calls to BlueZ that failed, by error name.", .counter, labels: [("name", $0.key)], Double($0.value))
        }
        out.append(CentralMetric("gattway_dbus_connects_total", "Connections made to the D-Bus system bus.", .counter, Double(c.busConnects)))
        out.append(CentralMetric("gattway_bluez_objects", "Objects in gattway's mirror of BlueZ.", .gauge, Double(tree.count)))
        return out
    }

    private static let noBus = BusError(name: "org.freedesktop.DBus.Error.Disconnected", message: "not connected to the D-Bus system bus")

    /// Connects to the bus, subscribes to BlueZ's signals, then loads its objects. Problems show
    /// in `status()`; without a bus, it tries again with backoff (0.5 s doubling to 30 s).
    func start() async {
        let connection: Connection
        do {
            connection = try connect()
        } catch {
            busMissing(error)
            return
        }
        let objectManager = MatchRule(sender: BlueZ.service, interface: Connection.objectManagerInterface)
        let owner = MatchRule(sender: BlueZ.busService, interface: BlueZ.busService, member: "NameOwnerChanged", arg0: BlueZ.service)
        let tree = self.tree
        do {
            try await connection.subscribe(objectManager) { tree.apply($0) }
            try await signals.subscribe(on: connection)
            try await connection.subscribe(owner) { [weak self] signal in
                let newOwner = signal.body.count > 2 ? signal.body[2].string ?? "" : ""
                self?.ownerChanged(newOwner)
            }
        } catch {
            connection.close()
            busMissing(error)
            return
        }
        connection.setDisconnectHandler { [weak self] in self?.busLost() }
        connection.setMethodCallHandler { [weak self] call in
            guard let self else { return }
            if !self.methodCalls(call) {
                self.send(call.errorReply(BusError(name: "org.freedesktop.DBus.Error.UnknownObject", message: "gattway has no object here")))
            }
        }
        guard !closed.load(ordering: .acquiring) else { connection.close(); return }
        current.withLock { $0 = connection }
        calls.withLock { $0.busConnects += 1 }
        let attempts = busRetry.withLock { r -> Int in
            defer { r.attempt = 0; r.next = nil }
            return r.attempt
        }
        if attempts > 0 { log("connected to the D-Bus system bus again") }
        await reload()
    }

    /// The bus connection went away (dbus-daemon stopped or restarted): everything BlueZ said is
    /// void; connect again.
    private func busLost() {
        guard !closed.load(ordering: .acquiring) else { return }
        log("the D-Bus connection is lost; connecting again")
        current.withLock { c in defer { c = nil }; return c }?.close()
        bus.withLock { $0 = .noBus(Self.noBus) }
        tree.clear()
        reportStatus()
        scheduleBusRetry()
    }

    private func busMissing(_ error: BusError) {
        bus.withLock { $0 = .noBus(error) }
        reportStatus()
        let attempt = busRetry.withLock { $0.attempt }
        if attempt == 0 { log("cannot connect to the D-Bus system bus: \(error); trying again") }
        scheduleBusRetry()
    }

    private func scheduleBusRetry() {
        guard !closed.load(ordering: .acquiring) else { return }
        busRetry.withLock { r in
            r.timer?.cancel()
            r.attempt += 1
            let delay = Duration.milliseconds(min(30_000, 500 << min(r.attempt - 1, 6)))
            r.next = .now + delay
            r.timer = Task { [weak self] in
                do { try await Task.sleep(for: delay) } catch { return }
                await self?.start()
            }
        }
        reportStatus()
    }

    /// Stops using the bus (shutdown).
    func close() {
        closed.store(true, ordering: .releasing)
        busRetry.withLock { $0.timer?.cancel() }
        current.withLock { c in defer { c = nil }; return c }?.close()
    }

    private func ownerChanged(_ newOwner: String) {
        if newOwner.isEmpty {
            log("org.bluez left the bus")
            bus.withLock { $0 = .absent }
            tree.clear()
            reportStatus()
        } else {
            log("org.bluez is back on the bus (\(newOwner)); reloading its objects")
            Task { await self.reload() }
        }
    }

    /// Reads every object again (after the ones already asked for).
    func reload() async {
        do {
            try await loads.run(0, refused: { $0 }) { () async throws(SerialQueues<Int>.Refusal) in await self.loadObjects() }
        } catch {
            // Eight loads wait already: the last of them reads everything this one would have.
        }
    }

    private func loadObjects() async {
        tree.beginLoading()
        do {
            let reply = try await call(.methodCall(destination: BlueZ.service, path: .root,
                                                              interface: Connection.objectManagerInterface,
                                                              member: "GetManagedObjects"), timeout: Self.callDeadline)
            var objects: [ObjectPath: ObjectTree.Interfaces] = [:]
            for entry in reply.body.first?.dictionaryEntries ?? [] {
                if let path = entry.key.objectPath { objects[path] = Connection.interfaces(entry.value) }
            }
            bus.withLock { $0 = .ready }
            tree.load(objects, replySerial: reply.serial, owner: reply.sender)
            let adapters = objects.values.filter { $0[BlueZ.adapterInterface] != nil }.count
            let inUse = index.adapterPaths().map { String($0.lastElement) }
            log("BlueZ: \(objects.count) objects, \(adapters) adapter(s); using \(inUse.isEmpty ? "none" : inUse.joined(separator: ", "))")
            loaded(())
        } catch {
            let absent = error.name == "org.freedesktop.DBus.Error.ServiceUnknown" || error.name == "org.freedesktop.DBus.Error.NameHasNoOwner"
            let hadObjects = bus.withLock { state -> Bool in
                if case .ready = state, !absent { return true }
                if case .noBus = state { return false }
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

    // MARK: - State

    /// Reports the state if it changed.
    func reportStatus() {
        let current = status()
        let changed = lastStatus.withLock { last -> Bool in
            defer { last = current }
            return last != current
        }
        if changed { events(.state(current)) }
    }

    func status() -> ManagerStatus {
        switch bus.withLock({ $0 }) {
        case .starting:
            return ManagerStatus(state: .unknown, reason: "reading BlueZ's state")
        case .absent:
            return ManagerStatus(state: .unsupported, reason: "org.bluez is not on the bus: is bluetoothd running?")
        case .failed(let error) where error.name == "org.freedesktop.DBus.Error.AccessDenied":
            return ManagerStatus(state: .unauthorized, reason: "the D-Bus policy denies access to org.bluez: \(error.message)")
        case .failed(let error):
            return ManagerStatus(state: .unknown, reason: "BlueZ did not answer: \(error)")
        case .noBus(let error):
            var reason = "the D-Bus system bus is not reachable (\(error.message))"
            if let next = busRetry.withLock({ $0.next }) {
                let ms = max(0, (next - .now).components.seconds * 1000 + (next - .now).components.attoseconds / 1_000_000_000_000_000)
                reason += "; trying again in \((ms + 999) / 1000) s"
            }
            return ManagerStatus(state: .unsupported, reason: reason)
        case .ready:
            break
        }
        let inUse = index.adapterPaths()
        guard let first = inUse.first else {
            let reason: String
            switch index.selection {
            case .all: reason = "no Bluetooth adapter"
            case .named(let names): reason = names.count == 1 ? "adapter \(names[0]) not found" : "none of the adapters \(names.joined(separator: ", ")) found"
            }
            return ManagerStatus(state: .unsupported, reason: reason, usableAdapters: 0)
        }
        let usable = usableAdapters()
        guard let best = usable.first else {
            let names = inUse.map { String($0.lastElement) }
            let reason = names.count == 1 ? "adapter \(names[0]) is powered off" : "adapters \(names.joined(separator: ", ")) are powered off"
            return ManagerStatus(state: .poweredOff, adapter: String(first.lastElement), reason: reason, usableAdapters: 0)
        }
        // How many are usable is told when there is a choice.
        return ManagerStatus(state: .poweredOn, adapter: String(best.lastElement), usableAdapters: inUse.count > 1 ? usable.count : nil)
    }

    /// Every adapter BlueZ lists, those in use said so, with the links up on each.
    func adapters() -> [AdapterInfo] {
        tree.objects(with: BlueZ.adapterInterface, under: BlueZ.root).sorted {
            AdapterSelection.precedes(String($0.0.lastElement), String($1.0.lastElement))
        }.map { path, props in adapterInfo(path, props) }
    }

    func adapterInfo(_ path: ObjectPath, _ props: [String: Value]) -> AdapterInfo {
        AdapterInfo(id: String(path.lastElement), address: DeviceProperties.address(props),
                    name: props["Name"]?.string, alias: props["Alias"]?.string,
                    powered: props["Powered"]?.bool ?? false, discovering: props["Discovering"]?.bool ?? false,
                    selected: index.isInUse(adapter: path), connections: connections(on: path),
                    connectionLimit: limits.withLock { $0[path] }, advertisements: index.isInUse(adapter: path) ? advertisementPath : .none)
    }

    /// LE links up on an adapter.
    func connections(on adapter: ObjectPath) -> Int {
        tree.objects(with: BlueZ.deviceInterface, under: adapter).count { $0.0.parent == adapter && $0.1["Connected"]?.bool == true }
    }

    /// The most links each adapter took when it refused another, learned from its refusals.
    private let limits = Mutex<[ObjectPath: Int]>([:])

    /// An adapter refused a link for want of a slot with `links` up: its limit, from now on.
    /// Whether that is news.
    func learnLimit(_ adapter: ObjectPath, links: Int) -> Bool {
        limits.withLock { $0.updateValue(links, forKey: adapter) != links }
    }

    /// Whether the adapter has a free link slot, as far as its refusals tell.
    func hasFreeSlot(_ adapter: ObjectPath) -> Bool {
        guard let limit = limits.withLock({ $0[adapter] }) else { return true }
        return connections(on: adapter) < limit
    }

    /// The adapters in use that are powered, in order.
    func usableAdapters() -> [ObjectPath] {
        index.adapterPaths().filter { tree.properties(at: $0, BlueZ.adapterInterface)?["Powered"]?.bool == true }
    }

    /// The first usable adapter's path, or the error a request gets while Bluetooth is not usable.
    func usableAdapter() throws(BLEError) -> ObjectPath {
        let status = status()
        guard status.state == .poweredOn, let path = usableAdapters().first else {
            throw BLEError(.unknown, "Bluetooth is \(status.state.name)" + (status.reason.map { ": \($0)" } ?? ""))
        }
        return path
    }

    /// The adapter a request names, if gattway may use it now; else the request's error, which
    /// lists those it may.
    func usableAdapter(named: String) throws(BLEError) -> ObjectPath {
        let usable = usableAdapters()
        guard let adapter = usable.first(where: { $0.lastElement == named }) else {
            let names = usable.map { String($0.lastElement) }
            throw BLEError(.invalidParameters, "adapter \(named) is not one gattway can use now (absent, powered off or not selected); usable: "
                           + (names.isEmpty ? "none" : names.joined(separator: ", ")))
        }
        return adapter
    }
}
