import BLE
import DBus
import Synchronization

/// Reads, writes and notification subscriptions on a connected device's attributes. Each runs in
/// the device's turn, resolves the attribute once through the index, checks its properties
/// (`GATTCharacteristic.require…`) and has a deadline: the D-Bus call's timeout.
final class GATTOperations: Sendable {
    private let link: BusLink
    private let connector: Connector
    private let log: @Sendable (String) -> Void
    /// Per device, the characteristics this side asked to notify: started again after a
    /// reconnection or a bluetoothd restart lost them.
    private let wanted = Mutex<[BluetoothAddress: Set<UInt16>]>([:])

    /// BlueZ's own ATT timeout is 30 s; an answer later than that will not come.
    static let gattDeadline: Duration = .seconds(30)

    init(link: BusLink, connector: Connector, log: @escaping @Sendable (String) -> Void) {
        self.link = link
        self.connector = connector
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
        try await connector.inTurn(id) { () async throws(BLEError) -> Bool in
            // BlueZ takes StopNotify while disconnected (its session would otherwise come back on
            // reconnect with nobody holding it); StartNotify needs the link.
            let (c, path, _) = try self.resolve(id, .handle(handle), connected: enabled)
            try c.requireNotifiable()
            if !enabled { self.wanted.withLock { _ = $0[id]?.remove(handle) } }
            do throws(BLEError) {
                _ = try await self.call(id, path, BlueZ.gattCharacteristicInterface, enabled ? "StartNotify" : "StopNotify", [])
            } catch where !enabled && (error.detail?.contains("No notify session started") ?? false) {
                // Not subscribed by us: already off as far as this client is concerned.
            }
            if enabled { self.wanted.withLock { _ = $0[id, default: []].insert(handle) } }
            if let props = try? await self.link.getAllProperties(path, BlueZ.gattCharacteristicInterface) {
                self.tree.refresh(path, BlueZ.gattCharacteristicInterface, props)
            }
            return self.tree.properties(at: path, BlueZ.gattCharacteristicInterface)?["Notifying"]?.bool ?? enabled
        }
    }

    /// After a (re)connection: every characteristic this side wanted notifying notifies again.
    /// BlueZ keeps its own session across a link loss and enables it again itself (StartNotify
    /// then answers InProgress until it has); after a bluetoothd restart the session is gone
    /// and StartNotify makes a new one.
    func resubscribe(_ id: BluetoothAddress) async {
        let handles = wanted.withLock { $0[id] ?? [] }
        for handle in handles.sorted() {
            do {
                _ = try await connector.inTurn(id) { () async throws(BLEError) -> Void in
                    let (_, path, _) = try self.resolve(id, .handle(handle))
                    guard self.tree.properties(at: path, BlueZ.gattCharacteristicInterface)?["Notifying"]?.bool != true else { return }
                    do throws(BLEError) {
                        _ = try await self.call(id, path, BlueZ.gattCharacteristicInterface, "StartNotify", [])
                    } catch where error.detail?.contains("InProgress") == true || error.detail?.contains("In Progress") == true {
                    }
                }
                log("\(id): notifications of \(AttributeSelector.format(handle)) restored")
            } catch {
                log("\(id): cannot restore notifications of \(AttributeSelector.format(handle)): \(error)")
            }
        }
    }

    // MARK: - Resolving, once per operation

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
