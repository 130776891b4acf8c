import BLE
import DBus
import Synchronization
import Threading

/// gattway's link to bluetoothd over D-Bus: the signal subscriptions, loading the object tree
/// (again when bluetoothd comes back), whether org.bluez is there at all, and the manager state
/// that follows from it and from the adapter.
final class BusLink: Sendable {
    let connection: Connection
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
    private let goneHandler = HandlerSlot<Void>()

    /// How long a discovery call may take before it counts as failed.
    static let callDeadline: Duration = .seconds(10)

    private enum BusState: Sendable {
        case starting
        case ready
        case absent
        case failed(BusError)
    }

    init(connection: Connection, tree: ObjectTree, index: GATTIndex, events: HandlerSlot<CentralEvent>,
         log: @escaping @Sendable (String) -> Void) {
        self.connection = connection
        self.tree = tree
        self.index = index
        self.events = events
        self.log = log
    }

    /// Runs when org.bluez leaves the bus (bluetoothd stopped).
    func setGoneHandler(_ handler: @escaping @Sendable (()) -> Void) { goneHandler.set(handler) }

    /// `onBusLost` runs once if the D-Bus connection itself goes (dbus-daemon stopped).
    func watchConnection(onBusLost: @escaping @Sendable () -> Void) {
        connection.setDisconnectHandler { [weak self] in
            guard let self else { return }
            self.log("the D-Bus connection is lost")
            self.bus.withLock { $0 = .failed(BusError(name: "org.freedesktop.DBus.Error.Disconnected", message: "the D-Bus connection is lost")) }
            self.reportStatus()
            onBusLost()
        }
    }

    /// Subscribes to BlueZ's signals, then loads its objects. Problems show in `status()`.
    func start() async {
        let objectManager = MatchRule(sender: BlueZ.service, interface: Connection.objectManagerInterface)
        let properties = MatchRule(sender: BlueZ.service, pathNamespace: BlueZ.root,
                                   interface: Connection.propertiesInterface, member: "PropertiesChanged")
        let owner = MatchRule(sender: BlueZ.busService, interface: BlueZ.busService, member: "NameOwnerChanged", arg0: BlueZ.service)
        let tree = self.tree
        do {
            try await connection.subscribe(objectManager) { tree.apply($0) }
            try await connection.subscribe(properties) { tree.apply($0) }
            try await connection.subscribe(owner) { [weak self] signal in
                let newOwner = signal.body.count > 2 ? signal.body[2].string ?? "" : ""
                self?.ownerChanged(newOwner)
            }
        } catch {
            bus.withLock { $0 = .failed(error) }
            log("cannot subscribe to BlueZ signals: \(error)")
            return
        }
        await reload()
    }

    private func ownerChanged(_ newOwner: String) {
        if newOwner.isEmpty {
            log("org.bluez left the bus")
            bus.withLock { $0 = .absent }
            tree.clear()
            reportStatus()
            goneHandler(())
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
            log("BlueZ: \(objects.count) objects, \(adapters) adapter(s); using \(index.adapterPath()?.lastElement ?? "none")")
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
        case .ready:
            break
        }
        guard let path = index.adapterPath(), let props = tree.properties(at: path, BlueZ.adapterInterface) else {
            let reason = index.adapterName.map { "adapter \($0) not found" } ?? "no Bluetooth adapter"
            return ManagerStatus(state: .unsupported, reason: reason)
        }
        let name = String(path.lastElement)
        if props["Powered"]?.bool != true {
            return ManagerStatus(state: .poweredOff, adapter: name, reason: "adapter \(name) is powered off")
        }
        return ManagerStatus(state: .poweredOn, adapter: name)
    }

    func adapters() -> [AdapterInfo] {
        let selected = index.adapterPath()
        return tree.objects(with: BlueZ.adapterInterface, under: BlueZ.root).map { path, props in
            AdapterInfo(id: String(path.lastElement), address: DeviceProperties.address(props),
                        name: props["Name"]?.string, alias: props["Alias"]?.string,
                        powered: props["Powered"]?.bool ?? false, discovering: props["Discovering"]?.bool ?? false,
                        selected: path == selected)
        }
    }

    /// The adapter's path, or the error a request gets while Bluetooth is not usable.
    func usableAdapter() throws(BLEError) -> ObjectPath {
        let status = status()
        guard status.state == .poweredOn, let path = index.adapterPath() else {
            throw BLEError(.unknown, "Bluetooth is \(status.state.name)" + (status.reason.map { ": \($0)" } ?? ""))
        }
        return path
    }
}
