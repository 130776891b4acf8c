import BLE
import DBus
import Synchronization
import Threading

/// Reads, writes and notification subscriptions on a connected device's attributes. Each runs in
/// the device's turn, resolves the attribute once through the index, checks its properties
/// (`GATTCharacteristic.require…`) and has a deadline: the D-Bus call's timeout.
final class GATTOperations: Sendable {
    private let link: BusLink
    private let connector: Connector
    private let events: HandlerSlot<CentralEvent>
    private let log: @Sendable (String) -> Void
    /// Per device, the characteristics this side asked to notify: started again after a
    /// reconnection or a bluetoothd restart lost them. Only `setNotify(false)` removes one. With
    /// each, its UUIDs once it was seen (a wish restored from a file has none until then).
    private let wanted = Mutex<[BluetoothAddress: [UInt16: CharacteristicUUIDs?]]>([:])
    /// Per device, wanted characteristics not notifying since its last connection: each is
    /// tried when its object appears (BlueZ may export a GATT table late and in pieces).
    private let unrestored = Mutex<[BluetoothAddress: [UInt16: Unrestored]]>([:])
    /// Devices with a restoring pass under way (true: another pass is asked for after it).
    private let passes = Mutex<[BluetoothAddress: Bool]>([:])
    /// Counts each device's connections, so that the deadline of an earlier one does nothing.
    private let connections = Mutex<[BluetoothAddress: Int]>([:])

    private struct Unrestored {
        /// Why it does not notify (the last try's error).
        var error: BLEError
        /// Clients were told, for this connection (past `restoreDeadline`).
        var reported = false
    }

    /// BlueZ's own ATT timeout is 30 s; an answer later than that will not come.
    static let gattDeadline: Duration = .seconds(30)
    /// How long, after a connection, wanted characteristics may take to appear and notify before
    /// `.resubscribed` says they did not (they are still tried when they appear).
    let restoreDeadline: Duration

    init(link: BusLink, connector: Connector, events: HandlerSlot<CentralEvent>, restoreDeadline: Duration,
         log: @escaping @Sendable (String) -> Void) {
        self.link = link
        self.connector = connector
        self.events = events
        self.restoreDeadline = restoreDeadline
        self.log = log
    }

    private var tree: ObjectTree { link.tree }
    private var index: GATTIndex { link.index }

    func services(_ id: BluetoothAddress) throws(BLEError) -> [GATTService] {
        try gatt(id).entry.services
    }

    func characteristic(_ id: BluetoothAddress, _ ref: CharacteristicRef) throws(BLEError) -> GATTCharacteristic {
        try ref.pick(in: try gatt(id).entry.services)
    }

    func read(_ id: BluetoothAddress, _ ref: CharacteristicRef, offset: Int) async throws(BLEError) -> AttributeValue {
        try await connector.inTurn(id) { () async throws(BLEError) -> AttributeValue in
            let (c, path, _) = try self.resolve(id, ref)
            try c.requireReadable()
            let value = try await self.read(id, path, BlueZ.gattCharacteristicInterface, offset: offset)
            return AttributeValue(handle: c.handle, uuid: c.uuid, value: value)
        }
    }

    func write(_ id: BluetoothAddress, _ ref: CharacteristicRef, _ value: [UInt8], type: WriteType,
               fragment: Bool) async throws(BLEError) -> WriteOutcome {
        try await connector.inTurn(id) { () async throws(BLEError) -> WriteOutcome in
            let (c, path, device) = try self.resolve(id, ref)
            try c.requireWritable(type)
            let plan = try WritePlan(length: value.count, type: type, mtu: self.index.mtu(device), fragment: fragment)
            let options: [(String, Value)] = [("type", .string(type == .withResponse ? "request" : "command"))]
            for piece in plan.pieces(value) {
                try await self.write(id, path, BlueZ.gattCharacteristicInterface, Array(piece), options: options)
            }
            return WriteOutcome(handle: c.handle, uuid: c.uuid, type: type, written: value.count, writes: plan.writes)
        }
    }

    func readDescriptor(_ id: BluetoothAddress, _ ref: DescriptorRef, offset: Int) async throws(BLEError) -> AttributeValue {
        try await connector.inTurn(id) { () async throws(BLEError) -> AttributeValue in
            let (d, path) = try self.resolve(id, ref)
            return AttributeValue(handle: d.handle, uuid: d.uuid,
                                  value: try await self.read(id, path, BlueZ.gattDescriptorInterface, offset: offset))
        }
    }

    func writeDescriptor(_ id: BluetoothAddress, _ ref: DescriptorRef, _ value: [UInt8]) async throws(BLEError) -> WriteOutcome {
        try await connector.inTurn(id) { () async throws(BLEError) -> WriteOutcome in
            let (d, path) = try self.resolve(id, ref)
            try await self.write(id, path, BlueZ.gattDescriptorInterface, value, options: [])
            return WriteOutcome(handle: d.handle, uuid: d.uuid, type: .withResponse, written: value.count, writes: 1)
        }
    }

    func setNotify(_ enabled: Bool, _ id: BluetoothAddress, characteristic handle: UInt16) async throws(BLEError) -> Bool {
        // Let go of first, whatever follows: a characteristic that is gone may be released too.
        if !enabled { forget(id, handle) }
        return try await connector.inTurn(id) { () async throws(BLEError) -> Bool in
            // BlueZ takes StopNotify while disconnected (its session would otherwise come back on
            // reconnect with nobody holding it); StartNotify needs the link.
            let (c, path, device) = try self.resolve(id, .handle(handle), connected: enabled)
            try c.requireNotifiable()
            do throws(BLEError) {
                _ = try await self.call(id, path, BlueZ.gattCharacteristicInterface, enabled ? "StartNotify" : "StopNotify", [])
            } catch where !enabled && (error.detail?.contains("No notify session started") ?? false) {
                // Not subscribed by us: already off as far as this client is concerned.
            }
            if enabled {
                let uuids = self.uuids(of: c, device)
                self.wanted.withLock { $0[id, default: [:]][handle] = uuids }
                self.unrestored.withLock { _ = $0[id]?.removeValue(forKey: handle) }
            }
            if let props = try? await self.link.getAllProperties(path, BlueZ.gattCharacteristicInterface) {
                self.tree.refresh(path, BlueZ.gattCharacteristicInterface, props)
            }
            return self.tree.properties(at: path, BlueZ.gattCharacteristicInterface)?["Notifying"]?.bool ?? enabled
        }
    }

    /// Wants `handle` notifying, connected or not, present or not: tried now when the device is
    /// connected (clients are told within `restoreDeadline`), else at its next connection.
    func keepNotifying(_ id: BluetoothAddress, characteristic handle: UInt16) async {
        wanted.withLock { w in
            if w[id]?[handle] == nil { w[id, default: [:]][handle] = .some(nil) }
        }
        unrestored.withLock { u in
            if u[id]?[handle] == nil {
                u[id, default: [:]][handle] = Unrestored(error: BLEError(.notConnected, "\(id) has not connected since the wish was made"))
            }
        }
        guard let path = try? index.devicePath(id), connector.isReady(path) else { return }
        await restore(id, handle)
        startDeadline(id, connection: connections.withLock { $0[id] ?? 0 })
    }

    private func forget(_ id: BluetoothAddress, _ handle: UInt16) {
        wanted.withLock { w in
            w[id]?.removeValue(forKey: handle)
            if w[id]?.isEmpty == true { w[id] = nil }
        }
        unrestored.withLock { u in
            u[id]?.removeValue(forKey: handle)
            if u[id]?.isEmpty == true { u[id] = nil }
        }
    }

    // MARK: - Restoring notifications

    /// After a (re)connection: every characteristic this side wants notifying notifies again.
    /// BlueZ keeps its own session across a link loss and enables it again itself (StartNotify
    /// then answers at once, or InProgress until it has), unless that failed; after a bluetoothd
    /// restart the session is gone; either way StartNotify makes a new one. A characteristic
    /// whose object is not there yet (BlueZ exports a table late and in pieces after a restart,
    /// and a peripheral may add services) is tried when it appears; past `restoreDeadline`
    /// clients are told, and it stays wanted. Returns after one pass over what is there now.
    func resubscribe(_ id: BluetoothAddress) async {
        let handles = wanted.withLock { $0[id]?.keys.sorted() ?? [] }
        guard !handles.isEmpty else { return }
        let connection = connections.withLock { c in
            c[id, default: 0] += 1
            return c[id]!
        }
        unrestored.withLock { u in
            var entries: [UInt16: Unrestored] = [:]
            for handle in handles {
                entries[handle] = Unrestored(error: u[id]?[handle]?.error ?? BLEError(.invalidHandle, "not tried yet"))
            }
            u[id] = entries
        }
        await pass(id)
        startDeadline(id, connection: connection)
    }

    /// Called by the tree's observer: a characteristic appearing, or BlueZ's objects loaded
    /// again, may be what an unrestored wish waits for.
    func observe(_ change: ObjectTree.Change) {
        let ids: [BluetoothAddress]
        switch change {
        case .added(let path, let interfaces) where interfaces[BlueZ.gattCharacteristicInterface] != nil:
            guard let device = index.device(of: path),
                  let id = tree.properties(at: device, BlueZ.deviceInterface).flatMap(DeviceProperties.address) else { return }
            ids = [id]
        case .reloaded:
            ids = unrestored.withLock { Array($0.keys) }
        default:
            return
        }
        for id in ids where unrestored.withLock({ $0[id]?.isEmpty == false }) { schedulePass(id) }
    }

    /// A pass for `id` soon; passes asked for while one runs make one more after it.
    private func schedulePass(_ id: BluetoothAddress) {
        let start = passes.withLock { p -> Bool in
            if p[id] != nil {
                p[id] = true
                return false
            }
            p[id] = false
            return true
        }
        guard start else { return }
        Task {
            repeat { await self.pass(id) } while self.passes.withLock { p -> Bool in
                if p[id] == true {
                    p[id] = false
                    return true
                }
                p[id] = nil
                return false
            }
        }
    }

    /// Tries every unrestored characteristic of a connected device, in handle order.
    private func pass(_ id: BluetoothAddress) async {
        guard let path = try? index.devicePath(id), connector.isReady(path) else { return }
        let handles = unrestored.withLock { $0[id].map { $0.keys.sorted() } ?? [] }
        for handle in handles { await restore(id, handle) }
    }

    /// One characteristic, in the device's turn: StartNotify.
    private func restore(_ id: BluetoothAddress, _ handle: UInt16) async {
        let uuids: CharacteristicUUIDs?
        do {
            uuids = try await connector.inTurn(id) { () async throws(BLEError) -> CharacteristicUUIDs? in
                guard self.unrestored.withLock({ $0[id]?[handle] != nil }) else { return nil }  // done meanwhile, or let go
                let (c, path, device) = try self.resolve(id, .handle(handle))
                try c.requireNotifiable()
                let uuids = self.uuids(of: c, device)
                // Asked even when Notifying says true: BlueZ 5.66 loses a kept session whose
                // re-enabling failed (the link went down first) and leaves Notifying true. For a
                // session it still has, StartNotify answers at once.
                do throws(BLEError) {
                    _ = try await self.call(id, path, BlueZ.gattCharacteristicInterface, "StartNotify", [])
                } catch where error.detail?.contains("InProgress") == true || error.detail?.contains("In Progress") == true {
                }
                return uuids
            }
        } catch {
            unrestored.withLock { u in u[id]?[handle]?.error = error }
            return
        }
        guard let uuids, unrestored.withLock({ $0[id]?.removeValue(forKey: handle) }) != nil else { return }
        wanted.withLock { w in if w[id]?[handle] != nil { w[id]?[handle] = uuids } }
        unrestored.withLock { u in if u[id]?.isEmpty == true { u[id] = nil } }
        log("\(id): notifications of \(AttributeSelector.format(handle)) restored")
        events(.resubscribed(id: id, characteristic: handle, uuids: uuids, error: nil))
    }

    /// `restoreDeadline` after connection number `connection`: clients hear of what is still
    /// not restored, once per connection (the next connection starts the clock again).
    private func startDeadline(_ id: BluetoothAddress, connection: Int) {
        guard unrestored.withLock({ $0[id]?.isEmpty == false }) else { return }
        Task { [weak self, restoreDeadline] in
            try? await Task.sleep(for: restoreDeadline)
            self?.deadlinePassed(id, connection: connection)
        }
    }

    private func deadlinePassed(_ id: BluetoothAddress, connection: Int) {
        guard connections.withLock({ $0[id] ?? 0 }) == connection,
              let path = try? index.devicePath(id), connector.isReady(path) else { return }
        let late = unrestored.withLock { u -> [(UInt16, BLEError)] in
            guard let entries = u[id] else { return [] }
            var late: [(UInt16, BLEError)] = []
            for (handle, entry) in entries where !entry.reported {
                u[id]?[handle]?.reported = true
                late.append((handle, entry.error))
            }
            return late.sorted { $0.0 < $1.0 }
        }
        let uuids = wanted.withLock { $0[id] ?? [:] }
        for (handle, error) in late {
            log("\(id): cannot restore notifications of \(AttributeSelector.format(handle)) within \(Connector.seconds(restoreDeadline))"
                + " of the connection: \(error); still wanted, tried again when the device's GATT objects change or it connects again")
            events(.resubscribed(id: id, characteristic: handle, uuids: uuids[handle] ?? nil, error: error))
        }
    }

    /// Wanted characteristics not notifying since their device's last connection, and how many
    /// of those clients were told of (for `/metrics`).
    func unrestoredCounts() -> (waiting: Int, failed: Int) {
        unrestored.withLock { u in
            var counts = (waiting: 0, failed: 0)
            for entry in u.values.flatMap(\.values) {
                if entry.reported { counts.failed += 1 } else { counts.waiting += 1 }
            }
            return counts
        }
    }

    // MARK: - Resolving, once per operation

    private func uuids(of c: GATTCharacteristic, _ device: ObjectPath) -> CharacteristicUUIDs? {
        index.gatt(device)?.services.first { $0.handle == c.serviceHandle }.map {
            CharacteristicUUIDs(service: $0.uuid, characteristic: c.uuid)
        }
    }

    /// The device's GATT entry: it must be connected (or, with `connected` false, known).
    private func gatt(_ id: BluetoothAddress, connected: Bool = true) throws(BLEError) -> (entry: GATTIndex.DeviceGATT, device: ObjectPath) {
        let device = connected ? try connector.connectedPath(id) : try index.devicePath(id)
        guard let entry = index.gatt(device) else {
            throw BLEError(.unknownDevice, "no device \(id) is known to the adapter; scan for it first")
        }
        return (entry, device)
    }

    private func resolve(_ id: BluetoothAddress, _ ref: CharacteristicRef,
                         connected: Bool = true) throws(BLEError) -> (GATTCharacteristic, ObjectPath, device: ObjectPath) {
        let (entry, device) = try gatt(id, connected: connected)
        let c = try ref.pick(in: entry.services)
        guard let path = entry.characteristicPaths[c.handle] else {
            throw BLEError(.invalidHandle, "no characteristic at handle \(AttributeSelector.format(c.handle)) on \(id)")
        }
        return (c, path, device)
    }

    private func resolve(_ id: BluetoothAddress, _ ref: DescriptorRef) throws(BLEError) -> (GATTDescriptor, ObjectPath) {
        let (entry, _) = try gatt(id)
        let d = try ref.pick(in: entry.services)
        guard let path = entry.descriptorPaths[d.handle] else {
            throw BLEError(.invalidHandle, "no descriptor at handle \(AttributeSelector.format(d.handle)) on \(id)")
        }
        return (d, path)
    }

    // MARK: - The calls

    /// A GATT call on a device, with its errors mapped and the link's state taken into account.
    private func call(_ id: BluetoothAddress, _ path: ObjectPath, _ interface: String, _ member: String,
                      _ body: [Value]) async throws(BLEError) -> Message {
        do {
            return try await link.call(.methodCall(destination: BlueZ.service, path: path, interface: interface,
                                                              member: member, body), timeout: Self.gattDeadline)
        } catch {
            throw await connector.interpret(error, id)
        }
    }

    private func read(_ id: BluetoothAddress, _ path: ObjectPath, _ interface: String, offset: Int) async throws(BLEError) -> [UInt8] {
        guard let offset16 = UInt16(exactly: offset) else {
            throw BLEError(att: .invalidOffset, "offset \(offset) is outside 0...65535")
        }
        let options: [(String, Value)] = offset16 > 0 ? [("offset", .uint16(offset16))] : []
        let reply = try await call(id, path, interface, "ReadValue", [.stringVariantDictionary(options)])
        return reply.body.first?.bytes ?? []
    }

    private func write(_ id: BluetoothAddress, _ path: ObjectPath, _ interface: String, _ value: [UInt8],
                       options: [(String, Value)]) async throws(BLEError) {
        _ = try await call(id, path, interface, "WriteValue", [.bytes(value), .stringVariantDictionary(options)])
    }
}
