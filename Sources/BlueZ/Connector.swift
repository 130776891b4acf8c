import BLE
import DBus
import FoundationEssentials
import Synchronization
import Threading

/// Connections: connect and disconnect with their deadlines and BlueZ's workarounds, which
/// device is in transition, what a lost link means (whose disconnection it was), and keeping
/// devices connected (`autoReconnect`): after an unexpected disconnection another attempt on
/// the `ReconnectPolicy`'s schedule, each once the device has been heard advertising since,
/// until an explicit disconnect or an error that will not change.
///
/// Recovery escalates as a careful stack does: wait to hear the device before connecting; a
/// link that comes up without its services is ended; connects that fail as a stale link makes
/// them fail, twice in a row, reset the adapter (`AdapterReset`).
final class Connector: Sendable {
    let link: BusLink
    let events: HandlerSlot<CentralEvent>
    let log: @Sendable (String) -> Void
    /// Each device's operations, one at a time (connect, disconnect and GATT alike): BlueZ
    /// answers InProgress to a second one while one runs.
    let queues: SerialQueues<BluetoothAddress>
    let waiters = Waiters()
    /// Devices this side is disconnecting: their disconnection is no error.
    let disconnecting = Mutex<Set<BluetoothAddress>>([])
    /// The device list, which shows devices in transition and kept ones.
    let devices: DeviceList
    /// Listening for kept devices that are away (discovery runs meanwhile).
    let discovery: Discovery
    let policy: ReconnectPolicy
    /// Devices kept connected, and where each stands.
    let kept = Mutex<[BluetoothAddress: Kept]>([:])
    /// Devices whose link is up, as the tree last said: a reload that loses one is a disconnection.
    let up = Mutex<Set<BluetoothAddress>>([])
    /// Runs after every reconnection this side made (restores notifications).
    let reconnected = HandlerSlot<BluetoothAddress>()
    /// Whether Bluetooth was usable (poweredOn) at the last change.
    let usable = Mutex(false)
    /// Connects in a row, per device and adapter, that failed as they do while a stale link is
    /// left (`looksStuck`): the second resets the adapter (the stale link is in its kernel).
    let strikes = Mutex<[Strike: Int]>([:])

    struct Strike: Hashable {
        let device: BluetoothAddress
        let adapter: ObjectPath
    }
    let adapterReset: AdapterReset

    struct Kept {
        var attempt = 0
        var nextAttempt: Date?
        var lastError: BLEError?
        /// The sleep before the next attempt.
        var timer: Task<Void, Never>?
        /// An attempt is running: a disconnection meanwhile is its own, not a new loss.
        var attempting = false
        /// The attempt waits to hear the device advertise.
        var listening = false
        /// Attempts since the link was last up that failed though the device had just been heard.
        var failedHeard = 0

        var status: ReconnectStatus {
            ReconnectStatus(attempt: attempt, nextAttempt: nextAttempt, lastError: lastError, listening: listening)
        }
    }

    /// How long a refresh of the GATT cache waits for the device it made BlueZ forget to
    /// advertise again.
    static let lookForDeadline: Duration = .seconds(10)
    static let attemptTimeout: Duration = .seconds(30)
    /// How long a link may stay up without its services resolved when BlueZ has them cached
    /// (a reconnection): a device that answers resolves them in well under a second; one whose
    /// host is down while its controller took the link never does.
    static let servicesDeadline: Duration = .seconds(10)

    static let disconnectDeadline: Duration = .seconds(10)

    init(link: BusLink, events: HandlerSlot<CentralEvent>, devices: DeviceList, discovery: Discovery, queues: SerialQueues<BluetoothAddress>,
         policy: ReconnectPolicy = .standard, adapterReset: AdapterReset, log: @escaping @Sendable (String) -> Void) {
        self.link = link
        self.events = events
        self.devices = devices
        self.discovery = discovery
        self.queues = queues
        self.policy = policy
        self.adapterReset = adapterReset
        self.log = log
    }

    /// Sets what runs (outside the device's turn) after each reconnection this side made.
    func setReconnectedHandler(_ handler: @escaping @Sendable (BluetoothAddress) -> Void) { reconnected.set(handler) }

    var tree: ObjectTree { link.tree }
    var index: GATTIndex { link.index }

    func setTransition(_ id: BluetoothAddress, _ state: PeripheralState?) { devices.setTransition(id, state) }

    /// Runs `body` in the device's turn.
    func inTurn<T: Sendable>(_ id: BluetoothAddress, _ body: () async throws(BLEError) -> T) async throws(BLEError) -> T {
        try await queues.run(id, refused: { BLEError(refusal: $0, waitingFor: "device \(id)") }, body)
    }

    // MARK: - Connect and disconnect

    /// Connects; with `keep`, keeps the device connected from now on (a failed attempt is
    /// tried again, unless it cannot succeed).
    func connect(_ id: BluetoothAddress, timeout: Duration, keep: Bool, adapter: String? = nil) async throws(BLEError) -> PeripheralInfo {
        if keep { startKeeping(id) }
        do {
            let info = try await connectOnce(id, timeout: timeout, adapter: adapter)
            linkRestored(id)
            return info
        } catch {
            guard keep, !ReconnectPolicy.isPermanent(error) else {
                if keep { stopKeeping(id) }
                throw error
            }
            // The client is answered now; the listening (a discovery call) follows.
            Task { await self.retryLater(id, after: error) }
            var told = error
            told.message += "; gattway keeps trying (autoReconnect)"
            throw told
        }
    }

    /// Connects through the adapter named, or the one that heard the device best lately and has a
    /// free link slot; an adapter that refuses for want of a slot passes it to the next that hears
    /// the device.
    func connectOnce(_ id: BluetoothAddress, timeout: Duration, adapter named: String? = nil) async throws(BLEError) -> PeripheralInfo {
        _ = try link.usableAdapter()
        let candidates = try adapters(for: id, named: named)
        var refused: BLEError?
        for path in candidates {
            do {
                let info = try await connectInTurn(id, path, timeout: timeout)
                if let adapter = path.parent { strikes.withLock { _ = $0.removeValue(forKey: Strike(device: id, adapter: adapter)) } }
                return info
            } catch where error.code == .cb(.connectionLimitReached) {
                if let adapter = path.parent, link.learnLimit(adapter, links: link.connections(on: adapter)),
                   let props = link.tree.properties(at: adapter, BlueZ.adapterInterface) {
                    events(.adapter(link.adapterInfo(adapter, props), change: .changed))
                }
                if candidates.count > 1 { log("\(id): \(path.parent?.lastElement ?? "") has no free link slot; trying the next adapter that hears it") }
                refused = error
            } catch {
                throw await failedConnect(id, error, on: path.parent)
            }
        }
        throw refused ?? BLEError(.unknownDevice, "no device \(id) is known to the adapter; scan for it first")
    }

    /// The device's objects to connect through, best first: the one on the adapter named; else
    /// the one already linked, or those on usable adapters, the adapter that heard it most
    /// strongly lately first, those without a free link slot last.
    func adapters(for id: BluetoothAddress, named: String?) throws(BLEError) -> [ObjectPath] {
        let usable = link.usableAdapters()
        if let named {
            let adapter = try link.usableAdapter(named: named)
            guard let path = adapter.child(BlueZ.pathElement(id)), tree.properties(at: path, BlueZ.deviceInterface) != nil else {
                throw BLEError(.unknownDevice, "\(named) has not heard \(id); scan for it first")
            }
            return [path]
        }
        let paths = index.devicePaths(id).filter { path in usable.contains { $0 == path.parent } }
        guard paths.count > 1 else {
            if paths.isEmpty { _ = try index.devicePath(id) }
            return paths
        }
        if let linked = paths.first(where: { tree.properties(at: $0, BlueZ.deviceInterface)?["Connected"]?.bool == true }) { return [linked] }
        let strength = devices.strengths(id)
        return paths.sorted { a, b in
            let (fa, fb) = (a.parent.map(link.hasFreeSlot) ?? true, b.parent.map(link.hasFreeSlot) ?? true)
            if fa != fb { return fa }
            return strength[String(a.parent?.lastElement ?? "")] ?? Int.min > strength[String(b.parent?.lastElement ?? "")] ?? Int.min
        }
    }

    func connectInTurn(_ id: BluetoothAddress, _ path: ObjectPath, timeout: Duration) async throws(BLEError) -> PeripheralInfo {
        try await inTurn(id) { () async throws(BLEError) -> PeripheralInfo in
            // Its signals from before the call: Connected, ServicesResolved, its GATT objects'.
            await link.engage(path)
            if isReady(path) { return try devices.peripheral(id) }
            setTransition(id, .connecting)
            disconnecting.withLock { _ = $0.remove(id) }
            defer { setTransition(id, nil) }
            let deadline = ContinuousClock.now + timeout
            log("\(id): connecting (timeout \(timeout))")
            do throws(BusError) {
                _ = try await link.call(.methodCall(destination: BlueZ.service, path: path, interface: BlueZ.deviceInterface,
                                                          member: "Connect"), timeout: timeout)
            } catch where Self.isTimeout(error) {
                await abortConnection(path)
                throw BLEError(.connectionTimeout, "\(id) did not connect within \(Self.seconds(timeout))", detail: error.description)
            } catch {
                await refreshDevice(path)
                throw ErrorMapping.map(error, context: .device)
            }
            // After Connect, BlueZ does not always signal Connected=true (FIELD-NOTES): read it.
            await refreshDevice(path)
            let cached = index.gatt(path)?.services.isEmpty == false
            let resolveBy = cached ? min(deadline, ContinuousClock.now + Self.servicesDeadline) : deadline
            switch await waitUntilResolved(path, deadline: resolveBy) {
            case true?:
                break
            case false?:
                throw BLEError(.connectionFailed, "\(id) disconnected while its services were being resolved")
            case nil:
                // A link without services is ended, not left to BlueZ's own ATT timeout.
                await abortConnection(path)
                let waited = cached ? min(timeout, Self.servicesDeadline) : timeout
                throw BLEError(.connectionTimeout, "\(id) connected but its services were not resolved within \(Self.seconds(waited)); the link was ended")
            }
            // ServicesResolved can come before every GATT object is exported (bluez#1489):
            // reconcile the tree before answering.
            await link.reload()
            log("\(id): connected, \(index.gatt(path)?.services.count ?? 0) services")
            setTransition(id, nil)
            return try devices.peripheral(id)
        }
    }

    func disconnect(_ id: BluetoothAddress) async throws(BLEError) -> PeripheralInfo {
        stopKeeping(id)
        let path = try index.devicePath(id)
        return try await inTurn(id) { () async throws(BLEError) -> PeripheralInfo in
            if tree.properties(at: path, BlueZ.deviceInterface)?["Connected"]?.bool == true {
                setTransition(id, .disconnecting)
                defer { setTransition(id, nil) }
                try await endLink(id, path)
                setTransition(id, nil)
                log("\(id): disconnected")
            }
            return try devices.peripheral(id)
        }
    }

    /// BlueZ forgets the device (`RemoveDevice`): its bond, its GATT cache, its object; a link
    /// it had goes down first, by this side's wish. Answers once the object is gone.
    ///
    /// A connected device is disconnected first, and only then removed: bluetoothd 5.66 removing
    /// a connected bonded device itself crashed in the lab ("free(): invalid pointer" after
    /// "Source ID … was not found").
    /// On every adapter in use that knows it (bonds are per adapter).
    func removeDevice(_ id: BluetoothAddress) async throws(BLEError) {
        _ = try link.usableAdapter()
        _ = try index.devicePath(id)
        try await inTurn(id) { () async throws(BLEError) in
            for path in index.devicePaths(id) {
                guard let adapter = path.parent else { continue }
                if tree.properties(at: path, BlueZ.deviceInterface)?["Connected"]?.bool == true { try await endLink(id, path) }
                disconnecting.withLock { _ = $0.insert(id) }
                do throws(BusError) {
                    _ = try await link.call(.methodCall(destination: BlueZ.service, path: adapter, interface: BlueZ.adapterInterface,
                                                        member: "RemoveDevice", [.objectPath(path)]), timeout: Self.disconnectDeadline)
                } catch {
                    disconnecting.withLock { _ = $0.remove(id) }
                    throw ErrorMapping.map(error, context: .device)
                }
                // BlueZ answers before its InterfacesRemoved arrives: wait for it (bounded).
                _ = await waiters.wait(for: path, timeout: Self.disconnectDeadline, current: { self.tree.properties(at: $0, BlueZ.deviceInterface) }) {
                    $0 == nil ? true : nil
                }
            }
            log("\(id): removed from BlueZ (bond and GATT cache forgotten)")
        }
        // A kept device is looked for and connected again (without its bond).
        if kept.withLock({ $0[id] != nil && $0[id]?.timer == nil && $0[id]?.attempting == false }) {
            await discovery.listen(id)
            scheduleAttempt(id, after: nil)
        }
    }

    // MARK: - The link's state

    /// Connected with its services resolved.
    func isReady(_ path: ObjectPath) -> Bool {
        let props = tree.properties(at: path, BlueZ.deviceInterface)
        return props?["Connected"]?.bool == true && props?["ServicesResolved"]?.bool == true
    }

    /// A connected device's path, or `notConnected` (saying when a kept device tries again).
    func connectedPath(_ id: BluetoothAddress) throws(BLEError) -> ObjectPath {
        let path: ObjectPath
        do {
            path = try index.devicePath(id)
        } catch {
            if let status = reconnectStatus(id) { throw BLEError(.notConnected, "\(id) is not connected; \(Self.describe(status))") }
            throw error
        }
        guard isReady(path) else {
            if let status = reconnectStatus(id) { throw BLEError(.notConnected, "\(id) is not connected; \(Self.describe(status))") }
            throw BLEError(.notConnected, "\(id) is not connected; connect it first")
        }
        return path
    }

    static func describe(_ status: ReconnectStatus) -> String {
        var text = "reconnecting (attempt \(status.attempt)"
        if status.listening {
            text += ", waiting to hear it advertise"
        } else if let next = status.nextAttempt {
            let seconds = max(0, next.timeIntervalSinceNow)
            text += ", next try in \(Int(seconds.rounded(.up))) s"
        } else {
            text += ", under way"
        }
        return text + ")"
    }

    /// Reads Device1's properties into the mirror.
    func refreshDevice(_ path: ObjectPath) async {
        if let props = try? await link.getAllProperties(path, BlueZ.deviceInterface) {
            tree.refresh(path, BlueZ.deviceInterface, props)
        }
    }

    /// Called by the tree's observer: whoever waits for a device's state hears of the change,
    /// and a Connected change is reported, as an error when this side did not ask for it.
    func observe(_ change: ObjectTree.Change) {
        switch change {
        case .reloaded:
            waiters.check { self.tree.properties(at: $0, BlueZ.deviceInterface) }
            reconcileLinks()
        case .added(let p, _):
            waiters.check(path: p) { self.tree.properties(at: $0, BlueZ.deviceInterface) }
        case .removed(let p, let names):
            waiters.check(path: p) { self.tree.properties(at: $0, BlueZ.deviceInterface) }
            // An adapter pulled out takes its devices' objects with it, without a Connected=false.
            if names.contains(BlueZ.adapterInterface) || names.contains(BlueZ.deviceInterface) { reconcileLinks() }
        case .properties(let p, let interface, let changed, _):
            waiters.check(path: p) { self.tree.properties(at: $0, BlueZ.deviceInterface) }
            if interface == BlueZ.deviceInterface, let connected = changed["Connected"]?.bool { connectionChanged(p, connected) }
            // Services resolve over a link: when BlueZ never signalled it up (bluetoothd 5.66 often
            // does not, for another client's Connect too; measured in the lab), it is read.
            if interface == BlueZ.deviceInterface, changed["ServicesResolved"]?.bool == true,
               tree.properties(at: p, BlueZ.deviceInterface)?["Connected"]?.bool != true {
                Task { await refreshDevice(p) }
            }
        }
        // Bluetooth became usable again (the adapter powered on, bluetoothd or the bus back):
        // kept devices waiting for their next attempt try now. Only on that transition: the
        // reload after every connect must not cut other devices' backoff short. (Only changes
        // that can change the state are looked at: not every notification.)
        switch change {
        case .properties(_, let interface, _, _) where interface != BlueZ.adapterInterface: return
        default: break
        }
        let usableNow = link.status().state == .poweredOn
        let became = usable.withLock { was -> Bool in
            defer { was = usableNow }
            return usableNow && !was
        }
        if became { retrySoon("Bluetooth is usable again") }
    }

    func connectionChanged(_ path: ObjectPath, _ connected: Bool) {
        guard let adapter = path.parent, index.isInUse(adapter: adapter),
              let id = tree.properties(at: path, BlueZ.deviceInterface).flatMap(DeviceProperties.address) else { return }
        // Only a change is told: BlueZ's signal can repeat what a read of the properties
        // (after Connect, Disconnect) put in the mirror already.
        if connected {
            guard up.withLock({ $0.insert(id).inserted }) else { return }
            events(.connection(id: id, state: .connected, error: nil))
        } else {
            let was = up.withLock { $0.remove(id) != nil }
            let ours = disconnecting.withLock { $0.remove(id) != nil }
            guard was else { return }
            let error = ours ? nil : BLEError(.peripheralDisconnected, "\(id) disconnected")
            events(.connection(id: id, state: .disconnected, error: error))
            if let error { linkLost(id, error) }
        }
    }

    /// After a reload (bluetoothd left or came back, or gattway started): the links up are the
    /// ones BlueZ has now; a device whose link was up and no longer is lost it (whether the others
    /// try early is `observe`'s transition check).
    func reconcileLinks() {
        let connected = Set(index.adapterPaths().flatMap { adapter in
            tree.objects(with: BlueZ.deviceInterface, under: adapter).compactMap { path, props in
                path.parent == adapter && props["Connected"]?.bool == true ? DeviceProperties.address(props) : nil
            }
        })
        let lost = up.withLock { up -> [BluetoothAddress] in
            let gone = up.subtracting(connected)
            up = connected
            return Array(gone)
        }
        for id in lost.sorted() {
            let error = BLEError(.peripheralDisconnected, "\(id) disconnected: its objects are gone (bluetoothd or the adapter went away)")
            events(.connection(id: id, state: .disconnected, error: error))
            linkLost(id, error)
        }
    }

    /// What a failed GATT call means for the link: `peripheralDisconnected` when the link went
    /// down during it, `notConnected` when BlueZ said so itself, else the mapped error. The
    /// peer's own ATT answer says more than a link loss that may follow it (a failed
    /// authenticated read drops the link on real BlueZ).
    func interpret(_ error: BusError, _ id: BluetoothAddress) async -> BLEError {
        let mapped = ErrorMapping.map(error, context: .attribute)
        if mapped.domain == .att { return mapped }
        guard let device = try? index.devicePath(id) else { return mapped }
        await refreshDevice(device)
        if isReady(device) { return mapped }
        if mapped.code != .cb(.notConnected) {
            return BLEError(.peripheralDisconnected, "\(id) disconnected during the operation", detail: error.description)
        }
        return BLEError(.notConnected, "\(id) is not connected", detail: error.description)
    }

    static func isTimeout(_ error: BusError) -> Bool {
        error.name == "org.freedesktop.DBus.Error.NoReply" || error.name == "org.freedesktop.DBus.Error.Timeout"
    }

    static func seconds(_ d: Duration) -> String {
        let ms = d.components.seconds * 1000 + d.components.attoseconds / 1_000_000_000_000_000
        return ms % 1000 == 0 ? "\(ms / 1000) s" : "\(Double(ms) / 1000) s"
    }
}
