import BLE
import DBus
import Synchronization
import Threading

/// Connections: connect and disconnect with their deadlines and BlueZ's workarounds, which
/// device is in transition, and what a lost link means (whose disconnection it was). The
/// reconnect policy will live here.
final class Connector: Sendable {
    private let link: BusLink
    private let events: HandlerSlot<CentralEvent>
    private let log: @Sendable (String) -> Void
    /// Each device's operations, one at a time (connect, disconnect and GATT alike): BlueZ
    /// answers InProgress to a second one while one runs.
    let queues: SerialQueues<BluetoothAddress>
    private let waiters = Waiters()
    /// Devices this side is disconnecting: their disconnection is no error.
    private let disconnecting = Mutex<Set<BluetoothAddress>>([])
    /// The device list, which shows devices in transition.
    private let list: Scanner

    static let disconnectDeadline: Duration = .seconds(10)

    init(link: BusLink, events: HandlerSlot<CentralEvent>, list: Scanner, queues: SerialQueues<BluetoothAddress>,
         log: @escaping @Sendable (String) -> Void) {
        self.link = link
        self.events = events
        self.list = list
        self.queues = queues
        self.log = log
    }

    private var tree: ObjectTree { link.tree }
    private var index: GATTIndex { link.index }
    private var connection: Connection { link.connection }

    private func setTransition(_ id: BluetoothAddress, _ state: PeripheralState?) { list.setTransition(id, state) }

    /// Runs `body` in the device's turn.
    func inTurn<T: Sendable>(_ id: BluetoothAddress, _ body: () async throws(BLEError) -> T) async throws(BLEError) -> T {
        try await queues.run(id, refused: { BLEError(refusal: $0, waitingFor: "device \(id)") }, body)
    }

    // MARK: - Connect and disconnect

    func connect(_ id: BluetoothAddress, timeout: Duration) async throws(BLEError) -> PeripheralInfo {
        _ = try link.usableAdapter()
        let path = try index.devicePath(id)
        return try await inTurn(id) { () async throws(BLEError) -> PeripheralInfo in
            if isReady(path) { return try list.peripheral(id) }
            setTransition(id, .connecting)
            disconnecting.withLock { _ = $0.remove(id) }
            defer { setTransition(id, nil) }
            let deadline = ContinuousClock.now + timeout
            log("\(id): connecting (timeout \(timeout))")
            do throws(BusError) {
                _ = try await connection.call(.methodCall(destination: BlueZ.service, path: path, interface: BlueZ.deviceInterface,
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
            switch await waitUntilResolved(path, deadline: deadline) {
            case true?:
                break
            case false?:
                throw BLEError(.connectionFailed, "\(id) disconnected while its services were being resolved")
            case nil:
                await abortConnection(path)
                throw BLEError(.connectionTimeout, "\(id) connected but its services were not resolved within \(Self.seconds(timeout))")
            }
            // ServicesResolved can come before every GATT object is exported (bluez#1489):
            // reconcile the tree before answering.
            await link.reload()
            log("\(id): connected, \(index.gatt(path)?.services.count ?? 0) services")
            setTransition(id, nil)
            return try list.peripheral(id)
        }
    }

    func disconnect(_ id: BluetoothAddress) async throws(BLEError) -> PeripheralInfo {
        let path = try index.devicePath(id)
        return try await inTurn(id) { () async throws(BLEError) -> PeripheralInfo in
            if tree.properties(at: path, BlueZ.deviceInterface)?["Connected"]?.bool == true {
                setTransition(id, .disconnecting)
                disconnecting.withLock { _ = $0.insert(id) }
                defer { setTransition(id, nil) }
                do throws(BusError) {
                    _ = try await connection.call(.methodCall(destination: BlueZ.service, path: path, interface: BlueZ.deviceInterface,
                                                              member: "Disconnect"), timeout: Self.disconnectDeadline)
                } catch {
                    throw ErrorMapping.map(error, context: .device)
                }
                await refreshDevice(path)
                setTransition(id, nil)
                log("\(id): disconnected")
            }
            return try list.peripheral(id)
        }
    }

    // MARK: - The link's state

    /// Connected with its services resolved.
    func isReady(_ path: ObjectPath) -> Bool {
        let props = tree.properties(at: path, BlueZ.deviceInterface)
        return props?["Connected"]?.bool == true && props?["ServicesResolved"]?.bool == true
    }

    /// A connected device's path, or `notConnected`.
    func connectedPath(_ id: BluetoothAddress) throws(BLEError) -> ObjectPath {
        let path = try index.devicePath(id)
        guard isReady(path) else { throw BLEError(.notConnected, "\(id) is not connected; connect it first") }
        return path
    }

    /// Reads Device1's properties into the mirror.
    func refreshDevice(_ path: ObjectPath) async {
        if let props = try? await connection.getAllProperties(BlueZ.service, path, BlueZ.deviceInterface) {
            tree.refresh(path, BlueZ.deviceInterface, props)
        }
    }

    /// Called by the tree's observer: whoever waits for a device's state hears of the change,
    /// and a Connected change is reported, as an error when this side did not ask for it.
    func observe(_ change: ObjectTree.Change) {
        switch change {
        case .reloaded:
            waiters.check { self.tree.properties(at: $0, BlueZ.deviceInterface) }
        case .added(let p, _), .removed(let p, _):
            waiters.check(path: p) { self.tree.properties(at: $0, BlueZ.deviceInterface) }
        case .properties(let p, let interface, let changed, _):
            waiters.check(path: p) { self.tree.properties(at: $0, BlueZ.deviceInterface) }
            if interface == BlueZ.deviceInterface, let connected = changed["Connected"]?.bool { connectionChanged(p, connected) }
        }
    }

    private func connectionChanged(_ path: ObjectPath, _ connected: Bool) {
        guard let adapter = index.adapterPath(), path.parent == adapter,
              let id = tree.properties(at: path, BlueZ.deviceInterface).flatMap(DeviceProperties.address) else { return }
        if connected {
            events(.connection(id: id, state: .connected, error: nil))
        } else {
            let ours = disconnecting.withLock { $0.remove(id) != nil }
            events(.connection(id: id, state: .disconnected,
                               error: ours ? nil : BLEError(.peripheralDisconnected, "\(id) disconnected")))
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

    // MARK: - Workarounds

    /// Waits for ServicesResolved=true (true), a disconnection (false) or the deadline (nil).
    /// A lost signal is not fatal: the properties are read again every second.
    private func waitUntilResolved(_ path: ObjectPath, deadline: ContinuousClock.Instant) async -> Bool? {
        let tree = self.tree
        while ContinuousClock.now < deadline {
            let slice = min(deadline - ContinuousClock.now, .seconds(1))
            let decided = await waiters.wait(for: path, timeout: slice, current: { tree.properties(at: $0, BlueZ.deviceInterface) }) { props in
                guard let props else { return false }
                if props["ServicesResolved"]?.bool == true { return true }
                if props["Connected"]?.bool == false { return false }
                return nil
            }
            if let decided { return decided }
            await refreshDevice(path)
        }
        return nil
    }

    /// Cancels a connection attempt that ran out of time: BlueZ stops trying on Disconnect.
    private func abortConnection(_ path: ObjectPath) async {
        if let id = tree.properties(at: path, BlueZ.deviceInterface).flatMap(DeviceProperties.address) {
            disconnecting.withLock { _ = $0.insert(id) }
        }
        _ = try? await connection.call(.methodCall(destination: BlueZ.service, path: path, interface: BlueZ.deviceInterface,
                                                   member: "Disconnect"), timeout: Self.disconnectDeadline)
        await refreshDevice(path)
    }

    static func isTimeout(_ error: BusError) -> Bool {
        error.name == "org.freedesktop.DBus.Error.NoReply" || error.name == "org.freedesktop.DBus.Error.Timeout"
    }

    static func seconds(_ d: Duration) -> String {
        let ms = d.components.seconds * 1000 + d.components.attoseconds / 1_000_000_000_000_000
        return ms % 1000 == 0 ? "\(ms / 1000) s" : "\(Double(ms) / 1000) s"
    }
}
