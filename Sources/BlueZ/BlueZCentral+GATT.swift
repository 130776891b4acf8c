import BLE
import DBus

/// Connecting and GATT operations. Each runs in the device's queue and has a deadline: the
/// D-Bus call's timeout, which libdbus enforces.
extension BlueZCentral {
    /// BlueZ's own ATT timeout is 30 s; an answer later than that will not come.
    static let gattDeadline: Duration = .seconds(30)
    static let disconnectDeadline: Duration = .seconds(10)

    public func connect(_ id: BluetoothAddress, timeout: Duration) async throws(BLEError) -> PeripheralInfo {
        _ = try await usableAdapter()
        let path = try devicePath(id)
        return try await queues.run(id) { () async throws(BLEError) -> PeripheralInfo in
            if isReady(path) { return try await peripheral(id) }
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
            await reload()
            log("\(id): connected, \(servicePaths(path).count) services")
            setTransition(id, nil)
            return try await peripheral(id)
        }
    }

    public func disconnect(_ id: BluetoothAddress) async throws(BLEError) -> PeripheralInfo {
        let path = try devicePath(id)
        return try await queues.run(id) { () async throws(BLEError) -> PeripheralInfo in
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
            return try await peripheral(id)
        }
    }

    public func services(_ id: BluetoothAddress) async throws(BLEError) -> [GATTService] {
        let path = try connectedPath(id)
        return gattTree(path)
    }

    public func readValue(_ id: BluetoothAddress, characteristic handle: UInt16, offset: Int) async throws(BLEError) -> [UInt8] {
        try await queues.run(id) { () async throws(BLEError) -> [UInt8] in
            let (path, characteristic) = try self.characteristic(id, handle)
            guard characteristic.properties.contains(.read) else {
                throw BLEError(att: .readNotPermitted, "characteristic \(Self.describe(characteristic)) cannot be read; its properties: \(characteristic.properties.names.joined(separator: ", "))")
            }
            return try await gattRead(id, path, BlueZ.gattCharacteristicInterface, offset: offset)
        }
    }

    public func writeValue(_ id: BluetoothAddress, characteristic handle: UInt16, _ value: [UInt8], type: WriteType) async throws(BLEError) {
        try await queues.run(id) { () async throws(BLEError) in
            let (path, characteristic) = try self.characteristic(id, handle)
            let needed: CharacteristicProperties = type == .withResponse ? .write : .writeWithoutResponse
            guard characteristic.properties.contains(needed) else {
                throw BLEError(att: .writeNotPermitted, "characteristic \(Self.describe(characteristic)) cannot be written \(type == .withResponse ? "with" : "without") response; its properties: \(characteristic.properties.names.joined(separator: ", "))")
            }
            // Without response, each packet carries at most MTU-3 bytes: longer values are sent
            // as consecutive fragments (documented). With response BlueZ makes long writes itself.
            let chunk = type == .withResponse ? max(value.count, 1) : type.maximumWriteValueLength(mtu: mtu(path))
            var start = 0
            repeat {
                let piece = Array(value[start..<min(start + chunk, value.count)])
                try await gattWrite(id, path, BlueZ.gattCharacteristicInterface, piece, options: [("type", .string(type == .withResponse ? "request" : "command"))])
                start += chunk
            } while start < value.count
        }
    }

    public func readDescriptor(_ id: BluetoothAddress, descriptor handle: UInt16, offset: Int) async throws(BLEError) -> [UInt8] {
        try await queues.run(id) { () async throws(BLEError) -> [UInt8] in
            try await gattRead(id, try descriptorPath(id, handle), BlueZ.gattDescriptorInterface, offset: offset)
        }
    }

    public func writeDescriptor(_ id: BluetoothAddress, descriptor handle: UInt16, _ value: [UInt8]) async throws(BLEError) {
        try await queues.run(id) { () async throws(BLEError) in
            try await gattWrite(id, try descriptorPath(id, handle), BlueZ.gattDescriptorInterface, value, options: [])
        }
    }

    public func setNotifyValue(_ enabled: Bool, _ id: BluetoothAddress, characteristic handle: UInt16) async throws(BLEError) -> Bool {
        try await queues.run(id) { () async throws(BLEError) -> Bool in
            // BlueZ takes StopNotify while disconnected (its session would otherwise come back on
            // reconnect with nobody holding it); StartNotify needs the link.
            let (path, characteristic) = try self.characteristic(id, handle, connected: enabled)
            guard !characteristic.properties.isDisjoint(with: [.notify, .indicate]) else {
                throw BLEError(att: .requestNotSupported, "characteristic \(Self.describe(characteristic)) neither notifies nor indicates")
            }
            do throws(BLEError) {
                _ = try await call(id, path, BlueZ.gattCharacteristicInterface, enabled ? "StartNotify" : "StopNotify", [])
            } catch where !enabled && (error.detail?.contains("No notify session started") ?? false) {
                // Not subscribed by us: already off as far as this client is concerned.
            }
            if let props = try? await connection.getAllProperties(BlueZ.service, path, BlueZ.gattCharacteristicInterface) {
                tree.refresh(path, BlueZ.gattCharacteristicInterface, props)
            }
            return tree.properties(at: path, BlueZ.gattCharacteristicInterface)?["Notifying"]?.bool ?? enabled
        }
    }

    // MARK: - Helpers

    private func isReady(_ path: ObjectPath) -> Bool {
        let props = tree.properties(at: path, BlueZ.deviceInterface)
        return props?["Connected"]?.bool == true && props?["ServicesResolved"]?.bool == true
    }

    /// A connected device's path, or `notConnected`.
    private func connectedPath(_ id: BluetoothAddress) throws(BLEError) -> ObjectPath {
        let path = try devicePath(id)
        guard isReady(path) else {
            throw BLEError(.notConnected, "\(id) is not connected; POST /v1/devices/\(id)/connect first")
        }
        return path
    }

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

    /// Reads Device1's properties into the mirror.
    func refreshDevice(_ path: ObjectPath) async {
        if let props = try? await connection.getAllProperties(BlueZ.service, path, BlueZ.deviceInterface) {
            tree.refresh(path, BlueZ.deviceInterface, props)
        }
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

    /// A GATT call on a device, with its errors mapped; a failure caused by the link going
    /// down is `peripheralDisconnected` (`notConnected` when BlueZ said so itself).
    private func call(_ id: BluetoothAddress, _ path: ObjectPath, _ interface: String, _ member: String, _ body: [Value]) async throws(BLEError) -> Message {
        do {
            return try await connection.call(.methodCall(destination: BlueZ.service, path: path, interface: interface, member: member, body),
                                             timeout: Self.gattDeadline)
        } catch {
            let mapped = ErrorMapping.map(error, context: .attribute)
            // The peer's own ATT answer says more than the link loss that may follow it
            // (a failed authenticated read drops the link on real BlueZ).
            if mapped.domain == .att { throw mapped }
            if let device = try? devicePath(id) {
                await refreshDevice(device)
                if !isReady(device) && mapped.code != .cb(.notConnected) {
                    throw BLEError(.peripheralDisconnected, "\(id) disconnected during the operation", detail: error.description)
                }
                if !isReady(device) {
                    throw BLEError(.notConnected, "\(id) is not connected", detail: error.description)
                }
            }
            throw mapped
        }
    }

    private func gattRead(_ id: BluetoothAddress, _ path: ObjectPath, _ interface: String, offset: Int) async throws(BLEError) -> [UInt8] {
        guard let offset16 = UInt16(exactly: offset) else {
            throw BLEError(att: .invalidOffset, "offset \(offset) is outside 0...65535")
        }
        let options: [(String, Value)] = offset16 > 0 ? [("offset", .uint16(offset16))] : []
        let reply = try await call(id, path, interface, "ReadValue", [.stringVariantDictionary(options)])
        return reply.body.first?.bytes ?? []
    }

    private func gattWrite(_ id: BluetoothAddress, _ path: ObjectPath, _ interface: String, _ value: [UInt8],
                           options: [(String, Value)]) async throws(BLEError) {
        _ = try await call(id, path, interface, "WriteValue", [.bytes(value), .stringVariantDictionary(options)])
    }

    private func mtu(_ characteristicPath: ObjectPath) -> Int? {
        tree.properties(at: characteristicPath, BlueZ.gattCharacteristicInterface)?["MTU"]?.integer
    }

    // MARK: - The GATT tree from the mirror

    /// "service0010" → 0x0010: BlueZ 5.66 has no Handle property on remote objects.
    static func handle(_ path: ObjectPath, prefix: String) -> UInt16? {
        let last = path.lastElement
        guard last.hasPrefix(prefix) else { return nil }
        return UInt16(last.dropFirst(prefix.count), radix: 16)
    }

    private func servicePaths(_ device: ObjectPath) -> [(ObjectPath, [String: Value])] {
        tree.objects(with: BlueZ.gattServiceInterface, under: device).filter { $0.0.parent == device }
    }

    func gattTree(_ device: ObjectPath) -> [GATTService] {
        let characteristics = tree.objects(with: BlueZ.gattCharacteristicInterface, under: device)
        let descriptors = tree.objects(with: BlueZ.gattDescriptorInterface, under: device)
        return servicePaths(device).compactMap { servicePath, props -> GATTService? in
            guard let (handle, uuid) = Self.identity(servicePath, props, prefix: "service") else { return nil }
            let chars = characteristics.filter { $0.0.parent == servicePath }.compactMap { path, cprops in
                makeCharacteristic(path, cprops, serviceHandle: handle, descriptors: descriptors)
            }.sorted { $0.handle < $1.handle }
            return GATTService(handle: handle, uuid: uuid, isPrimary: props["Primary"]?.bool ?? true, characteristics: chars)
        }.sorted { $0.handle < $1.handle }
    }

    /// A GATT object's handle (BlueZ 5.66 has it only in the path) and UUID.
    static func identity(_ path: ObjectPath, _ props: [String: Value], prefix: String) -> (UInt16, BluetoothUUID)? {
        guard let handle = handle(path, prefix: prefix), let uuid = props["UUID"]?.string.flatMap({ BluetoothUUID($0) }) else {
            return nil
        }
        return (handle, uuid)
    }

    /// One characteristic from its properties; `descriptors` may hold other characteristics' too.
    private func makeCharacteristic(_ path: ObjectPath, _ props: [String: Value], serviceHandle: UInt16,
                                    descriptors: [(ObjectPath, [String: Value])]) -> GATTCharacteristic? {
        guard let (handle, uuid) = Self.identity(path, props, prefix: "char") else { return nil }
        let flags = props["Flags"]?.strings ?? []
        let descs = descriptors.filter { $0.0.parent == path }.compactMap { descPath, dprops -> GATTDescriptor? in
            Self.identity(descPath, dprops, prefix: "desc").map { GATTDescriptor(handle: $0.0, uuid: $0.1) }
        }.sorted { $0.handle < $1.handle }
        return GATTCharacteristic(handle: handle, uuid: uuid, serviceHandle: serviceHandle,
                                  properties: CharacteristicProperties(bluezFlags: flags), flags: flags,
                                  isNotifying: props["Notifying"]?.bool ?? false, descriptors: descs)
    }

    /// The characteristic at `handle` and its path, read from the mirror without building the whole tree.
    private func characteristic(_ id: BluetoothAddress, _ handle: UInt16, connected: Bool = true) throws(BLEError) -> (ObjectPath, GATTCharacteristic) {
        let device = connected ? try connectedPath(id) : try devicePath(id)
        guard let (path, props) = tree.objects(with: BlueZ.gattCharacteristicInterface, under: device)
                .first(where: { Self.handle($0.0, prefix: "char") == handle }),
              let servicePath = path.parent, servicePath.parent == device,
              let serviceProps = tree.properties(at: servicePath, BlueZ.gattServiceInterface),
              let (serviceHandle, _) = Self.identity(servicePath, serviceProps, prefix: "service"),
              let c = makeCharacteristic(path, props, serviceHandle: serviceHandle,
                                         descriptors: tree.objects(with: BlueZ.gattDescriptorInterface, under: path)) else {
            throw BLEError(.invalidHandle, "no characteristic at handle \(AttributeSelector.format(handle)) on \(id)")
        }
        return (path, c)
    }

    private func descriptorPath(_ id: BluetoothAddress, _ handle: UInt16) throws(BLEError) -> ObjectPath {
        let device = try connectedPath(id)
        guard let path = tree.objects(with: BlueZ.gattDescriptorInterface, under: device)
            .first(where: { Self.handle($0.0, prefix: "desc") == handle })?.0 else {
            throw BLEError(.invalidHandle, "no descriptor at handle \(AttributeSelector.format(handle)) on \(id)")
        }
        return path
    }

    static func describe(_ c: GATTCharacteristic) -> String {
        "\(AttributeSelector.format(c.handle)) (\(c.uuid.shortForm ?? c.uuid.uuidString))"
    }

    static func isTimeout(_ error: BusError) -> Bool {
        error.name == "org.freedesktop.DBus.Error.NoReply" || error.name == "org.freedesktop.DBus.Error.Timeout"
    }

    static func seconds(_ d: Duration) -> String {
        let ms = d.components.seconds * 1000 + d.components.attoseconds / 1_000_000_000_000_000
        return ms % 1000 == 0 ? "\(ms / 1000) s" : "\(Double(ms) / 1000) s"
    }
}
