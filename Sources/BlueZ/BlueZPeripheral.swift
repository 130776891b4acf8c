import BLE
import DBus
import Synchronization
import Threading

/// The peripheral role on BlueZ, over the central's bus link: one GATT application per adapter
/// (`GATTApplication`) registered with `GattManager1`, one `LEAdvertisement1` object per
/// advertisement registered with `LEAdvertisingManager1`, and the centrals' requests handed to
/// the request handler with a deadline (`BlueZPeripheral+Requests`).
///
/// BlueZ cannot add a service to a registered application: adding or removing one registers the
/// adapter's application again (its services ask for the handles BlueZ gave them before). All
/// is registered again when bluetoothd comes back and when an adapter powers on
/// (`BlueZPeripheral+Restore`).
public final class BlueZPeripheral: PeripheralManager {
    let link: BusLink
    /// The GATT applications, under `/io/gattway/app`.
    let app: ExportedObjects
    /// The advertisements, under `/io/gattway/adv`.
    let adverts: ExportedObjects
    let events = HandlerSlot<PeripheralEvent>()
    let requestHandler = Mutex<(@Sendable (PeripheralRequest) async -> PeripheralResponse)?>(nil)
    /// How long a central's request waits for the request handler's answer.
    let requestDeadline: Duration
    /// Requests waiting for an answer at most; past it, a central's request fails at once.
    static let maxPending = 64
    let pending = Atomic<Int>(0)
    let log: @Sendable (String) -> Void
    /// Whether the central side made the link to this device (then it is no central of ours).
    let isOwnLink: @Sendable (ObjectPath) -> Bool
    /// Registrations on one adapter run one at a time.
    let turns = SerialQueues<String>(maxWaiting: 32, maxWait: .seconds(60))
    /// Calls waiting for an adapter's advertisement counts to follow what they did.
    let room = Waiters()

    struct State {
        var services: [Int: RegisteredService] = [:]
        var advertisements: [Int: RegisteredAdvertisement] = [:]
        var nextService = 1
        var nextAdvertisement = 1
        /// Adapters whose application BlueZ holds.
        var applications: Set<String> = []
        /// The bluetoothd (its unique bus name) the registrations were made with.
        var owner: String?
        /// Centrals connected to adapters this side serves on.
        var centrals: Set<ObjectPath> = []
    }
    let state = Mutex(State())

    init(link: BusLink, requestDeadline: Duration = .seconds(5), isOwnLink: @escaping @Sendable (ObjectPath) -> Bool,
         log: @escaping @Sendable (String) -> Void) {
        self.link = link
        self.requestDeadline = requestDeadline
        self.isOwnLink = isOwnLink
        self.log = log
        app = ExportedObjects(root: GATTApplication.root) { [weak link] in link?.send($0) }
        adverts = ExportedObjects(root: LEAdvertisement.root) { [weak link] in link?.send($0) }
        app.setPropertyHandler { [weak self] path, _, name, value in self?.handleSet(path, name, value) }
        app.setMethodHandler { [weak self] call in self?.handleGATTCall(call) }
        adverts.setMethodHandler { [weak self] call in self?.handleAdvertisementCall(call) }
    }

    /// A method call on the bus connection: true when it was for the peripheral's objects.
    func handle(_ call: Message) -> Bool { app.handle(call) || adverts.handle(call) }

    public func setEventHandler(_ handler: @escaping @Sendable (PeripheralEvent) -> Void) { events.set(handler) }

    public func setRequestHandler(_ handler: @escaping @Sendable (PeripheralRequest) async -> PeripheralResponse) {
        requestHandler.withLock { $0 = handler }
    }

    public func status() async -> PeripheralStatus {
        var instances: [String: PeripheralStatus.Instances] = [:]
        // The adapters in use, and any other this side serves on.
        let serving = state.withLock { s in s.services.values.map(\.adapter) + s.advertisements.values.map(\.adapter) }
        for path in Set(link.index.adapterPaths() + serving.compactMap { BlueZ.root.child($0) }) {
            if let room = LEAdvertisement.instances(advertisingManager(path)) {
                instances[String(path.lastElement)] = room
            }
        }
        return PeripheralStatus(state: link.status().state, instances: instances)
    }

    // MARK: - Services

    public func services() async -> [RegisteredService] { state.withLock { $0.services.values.sorted { $0.id < $1.id } } }

    public func add(_ service: LocalService) async throws(BLEError) -> RegisteredService {
        if let problem = GATTApplication.problem(service) { throw BLEError(.invalidParameters, problem) }
        let adapter = try adapterName(service.adapter)
        let id = state.withLock { s in defer { s.nextService += 1 }; return s.nextService }
        state.withLock { $0.services[id] = RegisteredService(id: id, adapter: adapter, service: service) }
        do throws(BLEError) {
            try export(adapter)
        } catch {
            state.withLock { _ = $0.services.removeValue(forKey: id) }
            throw error
        }
        do throws(BLEError) {
            // A restore (bluetoothd back) that took its turn first may have registered it already.
            try await registerInTurn(adapter, changed: false)
        } catch {
            // Nothing of it stays: the adapter's application is made again without it.
            state.withLock { _ = $0.services.removeValue(forKey: id) }
            app.remove(under: GATTApplication.path(adapter: adapter, LocalAttribute(service: id, characteristic: -1)))
            log("peripheral: service \(service.uuid) refused on \(adapter): \(error)")
            await restoreServices(adapter, changed: true)
            throw error
        }
        guard let registered = state.withLock({ $0.services[id] }) else {
            throw BLEError(.unknown, "service \(service.uuid) was removed while it was being registered")
        }
        log("peripheral: service \(service.uuid) registered on \(adapter) (id \(id), handle \(registered.handle.map(String.init) ?? "?"))")
        return registered
    }

    public func remove(service id: Int) async throws(BLEError) {
        let (removed, includer) = state.withLock { s -> (RegisteredService?, RegisteredService?) in
            guard let service = s.services[id] else { return (nil, nil) }
            let includer = s.services.values.first { $0.adapter == service.adapter && $0.service.includes.contains(service.service.uuid) }
            if includer == nil { s.services[id] = nil }
            return (service, includer)
        }
        guard let removed else { throw BLEError(.invalidParameters, "no service \(id)") }
        if let includer {
            throw BLEError(.invalidParameters, "service \(includer.id) (\(includer.service.uuid)) includes service \(id); remove it first")
        }
        app.remove(under: GATTApplication.path(adapter: removed.adapter, LocalAttribute(service: id, characteristic: -1)))
        var gone = removed
        gone.registered = false
        events(.service(gone))
        await restoreServices(removed.adapter, changed: true)
    }

    public func updateValue(_ value: [UInt8], for characteristic: LocalAttribute) async throws(BLEError) -> Bool {
        guard characteristic.descriptor == nil, let service = state.withLock({ $0.services[characteristic.service] }),
              service.service.characteristics.indices.contains(characteristic.characteristic) else {
            throw BLEError(.invalidHandle, "no characteristic \(characteristic.characteristic) in service \(characteristic.service)")
        }
        let path = GATTApplication.path(adapter: service.adapter, characteristic)
        // BlueZ sends the new Value to the centrals that subscribed (notification or indication).
        app.update(path, BlueZ.gattCharacteristicInterface, ["Value": .bytes(value)])
        return service.registered && app.properties(path, BlueZ.gattCharacteristicInterface)?["Notifying"]?.bool == true
    }

    /// The objects of the adapter's services; `invalidParameters` for an include that is not there.
    func export(_ adapter: String) throws(BLEError) {
        let services = state.withLock { $0.services.values.filter { $0.adapter == adapter } }
        var objects: [ObjectPath: ExportedObjects.Interfaces] = [:]
        for service in services {
            var includes: [ObjectPath] = []
            for uuid in service.service.includes {
                guard let included = services.first(where: { $0.service.uuid == uuid && $0.id != service.id }) else {
                    throw BLEError(.invalidParameters, "service \(service.service.uuid) includes \(uuid), which is not served on \(adapter)")
                }
                includes.append(GATTApplication.path(adapter: adapter, LocalAttribute(service: included.id, characteristic: -1)))
            }
            objects.merge(GATTApplication.objects(adapter: adapter, service, includes: includes)) { $1 }
        }
        for (path, interfaces) in objects {
            // What bluetoothd set (Handle) and what updateValue set (Value, Notifying) stays.
            var merged = interfaces
            for (interface, props) in interfaces {
                if let old = app.properties(path, interface) { merged[interface] = props.merging(old.filter { ["Value", "Notifying", "Handle"].contains($0.key) }) { $1 } }
            }
            app.add(path, merged)
        }
    }

    /// Unregisters the adapter's application (if BlueZ holds it) and registers it with the
    /// services it has now; once more asking for any handles if the ones asked for are taken.
    func registerApplication(_ adapter: String) async throws(BusError) {
        let path = GATTApplication.path(adapter: adapter)
        guard let adapterPath = BlueZ.root.child(adapter) else { return }
        // Only the bluetoothd it was registered with holds it.
        if state.withLock({ $0.applications.remove(adapter) != nil && $0.owner == link.tree.owner }) {
            _ = try? await link.call(.methodCall(destination: BlueZ.service, path: adapterPath, interface: GATTApplication.managerInterface,
                                                 member: "UnregisterApplication", [.objectPath(path)]), timeout: BusLink.callDeadline)
        }
        guard !app.objects(below: path).isEmpty else { return }
        let register = Message.methodCall(destination: BlueZ.service, path: adapterPath, interface: GATTApplication.managerInterface,
                                          member: "RegisterApplication", [.objectPath(path), .emptyDictionary(key: "s", value: "v")])
        do {
            do {
                _ = try await link.call(register, timeout: BusLink.callDeadline)
            } catch where error.name != "org.bluez.Error.InvalidArguments" && forgetHandles(adapter) {
                log("peripheral: \(adapter): registering with the earlier handles failed (\(error)); letting BlueZ choose")
                _ = try await link.call(register, timeout: BusLink.callDeadline)
            }
        } catch {
            setRegistered(services: adapter, false)
            throw error
        }
        state.withLock { $0.applications.insert(adapter); $0.owner = link.tree.owner }
        setRegistered(services: adapter, true)
    }

    /// Sets every Handle of the adapter's objects to 0 (any); whether one was set.
    private func forgetHandles(_ adapter: String) -> Bool {
        var any = false
        for (path, interfaces) in app.objects(below: GATTApplication.path(adapter: adapter)) {
            for (interface, props) in interfaces where (props["Handle"]?.integer ?? 0) != 0 {
                any = true
                var cleared = interfaces
                cleared[interface]?["Handle"] = .uint16(0)
                app.add(path, cleared)
            }
        }
        state.withLock { s in
            for (id, service) in s.services where service.adapter == adapter {
                s.services[id]?.handle = nil
                s.services[id]?.characteristicHandles = Array(repeating: nil, count: service.service.characteristics.count)
            }
        }
        return any
    }

    /// Marks the adapter's services served or not, telling each change.
    func setRegistered(services adapter: String, _ registered: Bool) {
        let changed = state.withLock { s -> [RegisteredService] in
            var out: [RegisteredService] = []
            for (id, service) in s.services where service.adapter == adapter && service.registered != registered {
                s.services[id]?.registered = registered
                out.append(s.services[id]!)
            }
            return out
        }
        for service in changed.sorted(by: { $0.id < $1.id }) { events(.service(service)) }
    }

    /// bluetoothd tells the handle it gave an attribute: kept for `RegisteredService`.
    private func handleSet(_ path: ObjectPath, _ name: String, _ value: Value) -> BusError? {
        guard name == "Handle", let handle = value.integer.flatMap(UInt16.init(exactly:)), let (_, attribute) = GATTApplication.attribute(path) else {
            return BusError(name: "org.bluez.Error.NotPermitted", message: "only Handle may be set")
        }
        state.withLock { s in
            guard attribute.descriptor == nil, var service = s.services[attribute.service] else { return }
            if attribute.characteristic < 0 {
                service.handle = handle
            } else if service.characteristicHandles.indices.contains(attribute.characteristic) {
                service.characteristicHandles[attribute.characteristic] = handle
            }
            s.services[attribute.service] = service
        }
        return nil
    }

    // MARK: - Helpers

    /// The adapter a definition names, or the first usable one.
    func adapterName(_ named: String?) throws(BLEError) -> String {
        guard let named else { return String(try link.usableAdapter().lastElement) }
        return String(try link.usableAdapter(named: named).lastElement)
    }

    func inTurn<T: Sendable>(_ adapter: String, _ body: () async throws(BLEError) -> T) async throws(BLEError) -> T {
        try await turns.run(adapter, refused: { BLEError(refusal: $0, waitingFor: "the peripheral's registrations on \(adapter)") }, body)
    }
}
