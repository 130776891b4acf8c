import BLE
import DBus

/// GattCharacteristic1 and GattDescriptor1 as bluetoothd 5.66's GATT client serves them
/// (src/gatt-client.c), in front of the simulated peripheral's GATT server. bluetoothd's side
/// is its cache (`GATTCache`: the objects, their values and sessions); a request goes to the
/// handle the cache knows, and the peripheral answers with whatever it holds there now.
extension Engine {
    /// A cached attribute of one device.
    enum Attribute: Sendable {
        case characteristic(Int)
        case descriptor(Int)
    }

    /// The peer's answer to a request, and whether the link drops after it (a failed MITM pairing).
    struct PeerFailure: Error {
        let code: ATTErrorCode
        var dropsLink = false
        var error: BusError { BlueZError.att(code) }
    }

    func characteristicCall(_ call: Message, member: String, device d: Int, characteristic c: Int, sender: String) {
        switch member {
        case "ReadValue": readValue(call, d, .characteristic(c))
        case "WriteValue": writeCharacteristic(call, d, c)
        case "StartNotify": startNotify(call, d, c, sender: sender)
        case "StopNotify":
            guard devices[d].gatt.characteristics[c].state.sessions[sender] != nil else {
                return fail(call, BlueZError.failed("No notify session started"))
            }
            endSession(device: d, characteristic: c, sender: sender)
            reply(call)
        case "AcquireNotify":
            guard devices[d].hasGATT else { return fail(call, BlueZError.failed("Not connected")) }
            guard devices[d].gatt.characteristics[c].state.sessions.isEmpty else { return fail(call, BlueZError.inProgress) }
            // Passing a socket is not simulated: StartNotify serves every characteristic.
            fail(call, BlueZError.notSupported)
        case "AcquireWrite":
            guard devices[d].hasGATT else { return fail(call, BlueZError.failed("Not connected")) }
            fail(call, BlueZError.notSupported)
        default:
            fail(call, DBusError.unknownMethod(call))
        }
    }

    func descriptorCall(_ call: Message, member: String, device d: Int, descriptor x: Int) {
        switch member {
        case "ReadValue": readValue(call, d, .descriptor(x))
        case "WriteValue": writeDescriptor(call, d, x)
        default: fail(call, DBusError.unknownMethod(call))
        }
    }

    // MARK: - Read

    private func readValue(_ call: Message, _ d: Int, _ attribute: Attribute) {
        guard devices[d].hasGATT else { return fail(call, BlueZError.failed("Not connected")) }
        guard let options = RequestOptions(call.body[0]) else { return fail(call, BlueZError.invalidArguments()) }
        let offset = options.offset
        if var pending = pendingRead(d, attribute) {
            // bluetoothd joins a read of the same offset and refuses another one.
            guard pending.offset == offset else { return fail(call, BlueZError.inProgress) }
            pending.calls.append(call)
            setPendingRead(d, attribute, pending)
            return
        }
        let id = makeID()
        setPendingRead(d, attribute, PendingRead(id: id, offset: offset, calls: [call]))
        respond(d) { engine in engine.completeRead(d, attribute, id: id) }
    }

    private func completeRead(_ d: Int, _ attribute: Attribute, id: Int) {
        guard let pending = pendingRead(d, attribute), pending.id == id else { return }
        let handle = handle(d, attribute)
        // An adapter's application answers after bluetoothd checked the permissions.
        if let target = servedObject(d, handle: handle), case .success = peerRead(d, handle: handle, offset: 0) {
            return forwardRead(d, target, offset: pending.offset) { engine, result in engine.finishRead(d, attribute, id: id, result) }
        }
        finishRead(d, attribute, id: id, peerRead(d, handle: handle, offset: pending.offset))
    }

    private func finishRead(_ d: Int, _ attribute: Attribute, id: Int, _ result: Result<[UInt8], PeerFailure>) {
        guard let pending = pendingRead(d, attribute), pending.id == id else { return }
        setPendingRead(d, attribute, nil)
        switch result {
        case .success(let bytes):
            // The result goes into bluetoothd's cache (reset by a read from offset 0), which
            // the Value property shows; the reply is the cache from the offset on.
            var cache = pending.offset == 0 ? [] : cached(d, attribute) ?? []
            if cache.count < pending.offset { cache += Array(repeating: 0, count: pending.offset - cache.count) }
            cache.replaceSubrange(pending.offset..<min(cache.count, pending.offset + bytes.count), with: bytes)
            setCached(d, attribute, cache)
            let result = Array(cache[pending.offset...])
            switch attribute {
            case .characteristic(let c):
                // Emitted at once (G_DBUS_PROPERTY_CHANGED_FLAG_FLUSH), before the reply.
                propertiesChanged(.characteristic(d, c), Interface.characteristic, ["Value"])
                pending.calls.forEach { reply($0, [.bytes(result)]) }
            case .descriptor(let x):
                pending.calls.forEach { reply($0, [.bytes(result)]) }
                propertiesChanged(.descriptor(d, x), Interface.descriptor, ["Value"])
            }
        case .failure(let failure):
            pending.calls.forEach { fail($0, failure.error) }
            if failure.dropsLink { linkDown(d) }
        }
    }

    /// The peripheral's GATT server answering a read of `handle`.
    private func peerRead(_ d: Int, handle: UInt16, offset: Int) -> Result<[UInt8], PeerFailure> {
        let table = peripherals[devices[d].peer].server.table
        guard let attribute = table.attribute(at: handle) else { return .failure(PeerFailure(code: .invalidHandle)) }
        if let code = injectedError(d, attribute, write: false) { return .failure(PeerFailure(code: ATTErrorCode(rawValue: code))) }
        var permission = Permission(allowed: true)
        let value: [UInt8]
        switch attribute {
        case .service, .declaration:
            value = table.declarationValue(attribute)
        case .value(let c):
            permission = table.characteristics[c].read
            value = peripherals[devices[d].peer].server.values[c]
        case .descriptor(let x):
            let info = table.descriptors[x]
            permission = info.read
            value = info.isCCCD ? cccdValue(d, info.characteristic) : peripherals[devices[d].peer].server.descriptorValues[x]
        }
        guard permission.allowed else { return .failure(PeerFailure(code: .readNotPermitted)) }
        if let failure = checkSecurity(d, permission) { return .failure(failure) }
        guard offset <= value.count else { return .failure(PeerFailure(code: .invalidOffset)) }
        return .success(Array(value[offset...]))
    }

    // MARK: - Write

    private func writeCharacteristic(_ call: Message, _ d: Int, _ c: Int) {
        guard devices[d].hasGATT else { return fail(call, BlueZError.failed("Not connected")) }
        if devices[d].gatt.characteristics[c].state.write != nil { return fail(call, BlueZError.inProgress) }
        guard let data = call.body[0].bytes, let options = RequestOptions(call.body[1], withType: true) else {
            return fail(call, BlueZError.invalidArguments())
        }
        let info = devices[d].gatt.characteristics[c]
        let type = options.type?.lowercased()
        // bluetoothd picks the procedure from `type`, or without one from the flags it cached:
        // reliable-write, then write (a request), then write-without-response (a command).
        if (type == nil && (info.hasReliableWrite || info.hasWrite)) || type == "reliable" || type == "request" {
            let id = makeID()
            devices[d].gatt.characteristics[c].state.write = PendingCall(id: id, call: call)
            respond(d) { engine in engine.completeWrite(d, .characteristic(c), id: id, data: data, offset: options.offset) }
            return
        }
        if (type != nil && type != "command") || options.offset != 0 || (type == nil && !info.hasWriteWithoutResponse) {
            return fail(call, BlueZError.notSupported)
        }
        // A command: answered at once; the ATT PDU must fit the MTU.
        guard data.count <= devices[d].mtu - 3 else { return fail(call, BlueZError.failed("Failed to initiate write")) }
        reply(call)
        // The peer drops a command it would refuse; nobody hears of it.
        guard case .success(let written) = peerWrite(d, handle: info.valueHandle, data, offset: 0, command: true) else { return }
        if let target = servedObject(d, handle: info.valueHandle) {
            return forwardWrite(d, target, data, offset: 0, command: true) { _, _ in }
        }
        if !uartReceive(d, written, data, request: nil) {
            echo(d, written)
        }
    }

    private func writeDescriptor(_ call: Message, _ d: Int, _ x: Int) {
        guard devices[d].hasGATT else { return fail(call, BlueZError.failed("Not connected")) }
        if devices[d].gatt.descriptors[x].state.write != nil { return fail(call, BlueZError.inProgress) }
        guard let data = call.body[0].bytes, let options = RequestOptions(call.body[1]) else {
            return fail(call, BlueZError.invalidArguments())
        }
        // StartNotify/StopNotify own the CCCD.
        if devices[d].gatt.descriptors[x].isCCCD { return fail(call, BlueZError.notPermitted("Write not permitted")) }
        let id = makeID()
        devices[d].gatt.descriptors[x].state.write = PendingCall(id: id, call: call)
        respond(d) { engine in engine.completeWrite(d, .descriptor(x), id: id, data: data, offset: options.offset) }
    }

    private func completeWrite(_ d: Int, _ attribute: Attribute, id: Int, data: [UInt8], offset: Int) {
        // Only this write's own timer may complete it: a late timer of a write lost with the
        // link must not take a newer one away.
        guard pendingWrite(d, attribute)?.id == id else { return }
        let handle = handle(d, attribute)
        // An adapter's application answers after bluetoothd checked the permissions; the write
        // stays pending meanwhile (a lost link answers it).
        if let target = servedObject(d, handle: handle), case .success = peerWrite(d, handle: handle, data, offset: 0, command: false) {
            return forwardWrite(d, target, data, offset: offset, command: false) { engine, result in
                guard let pending = engine.takeWrite(d, attribute, id: id) else { return }
                switch result {
                case .success: engine.reply(pending.call)
                case .failure(let failure): engine.fail(pending.call, failure.error)
                }
            }
        }
        guard let pending = takeWrite(d, attribute, id: id) else { return }
        switch peerWrite(d, handle: handle, data, offset: offset, command: false) {
        case .success(let written):
            if case .characteristic(let c) = attribute, uartReceive(d, written, data, request: (c, pending)) { return }
            reply(pending.call)
            echo(d, written)
        case .failure(let failure):
            fail(pending.call, failure.error)
            if failure.dropsLink { linkDown(d) }
        }
    }

    private func pendingWrite(_ d: Int, _ attribute: Attribute) -> PendingCall? {
        switch attribute {
        case .characteristic(let c): devices[d].gatt.characteristics[c].state.write
        case .descriptor(let x): devices[d].gatt.descriptors[x].state.write
        }
    }

    /// The write `id`, no longer pending; nil when it is not the pending one.
    private func takeWrite(_ d: Int, _ attribute: Attribute, id: Int) -> PendingCall? {
        guard let pending = pendingWrite(d, attribute), pending.id == id else { return nil }
        switch attribute {
        case .characteristic(let c): devices[d].gatt.characteristics[c].state.write = nil
        case .descriptor(let x): devices[d].gatt.descriptors[x].state.write = nil
        }
        return pending
    }

    /// The peripheral's GATT server taking a write to `handle`: on success the attribute written,
    /// its value updated (a CCCD's write is the subscription to its characteristic).
    func peerWrite(_ d: Int, handle: UInt16, _ data: [UInt8], offset: Int, command: Bool)
        -> Result<AttributeTable.Attribute, PeerFailure> {
        let table = peripherals[devices[d].peer].server.table
        guard let attribute = table.attribute(at: handle) else { return .failure(PeerFailure(code: .invalidHandle)) }
        if let code = injectedError(d, attribute, write: true) { return .failure(PeerFailure(code: ATTErrorCode(rawValue: code))) }
        let permission: Permission
        let current: [UInt8]
        var accept: [HexBytes]?
        var rejectCode: UInt8 = 0x80
        switch attribute {
        case .service, .declaration:
            return .failure(PeerFailure(code: .writeNotPermitted))
        case .value(let c):
            let info = table.characteristics[c]
            permission = info.write
            current = peripherals[devices[d].peer].server.values[c]
            accept = info.configuration.accept
            rejectCode = info.configuration.rejectCode
        case .descriptor(let x):
            let info = table.descriptors[x]
            // A subscription needs what the characteristic demands for notifications.
            permission = info.isCCCD ? table.characteristics[info.characteristic].subscribe : info.write
            current = peripherals[devices[d].peer].server.descriptorValues[x]
        }
        guard permission.allowed else { return .failure(PeerFailure(code: .writeNotPermitted)) }
        // A command cannot start pairing: without the security it is dropped.
        if command, permission.security > .none, !devices[d].paired { return .failure(PeerFailure(code: .insufficientEncryption)) }
        if let failure = checkSecurity(d, permission) { return .failure(failure) }
        guard offset <= current.count else { return .failure(PeerFailure(code: .invalidOffset)) }
        guard offset + data.count <= 512 else { return .failure(PeerFailure(code: .invalidAttributeValueLength)) }
        if let accept, !accept.contains(HexBytes(data)) { return .failure(PeerFailure(code: ATTErrorCode(rawValue: rejectCode))) }
        let value = Array(current[..<offset]) + data
        switch attribute {
        case .value(let c): peripherals[devices[d].peer].server.values[c] = value
        case .descriptor(let x): peripherals[devices[d].peer].server.descriptorValues[x] = value
        case .service, .declaration: break
        }
        return .success(attribute)
    }

    /// After a characteristic took a write: an echo device sends it back.
    private func echo(_ d: Int, _ written: AttributeTable.Attribute) {
        guard case .value(let c) = written, peripherals[devices[d].peer].server.table.characteristics[c].configuration.echo else { return }
        notify(d, c, peripherals[devices[d].peer].server.values[c])
    }

    // MARK: - Helpers

    /// Security the peer demands: encryption is reached by Just Works pairing, which bluetoothd
    /// starts by itself; authentication (MITM) needs a pairing that was authenticated (Pair with
    /// an agent that could do it). Without one the request fails with ATT 0x0e and the link
    /// drops, as measured on real bluetoothd (the MITM pairing it then tries cannot succeed).
    private func checkSecurity(_ d: Int, _ permission: Permission) -> PeerFailure? {
        switch permission.security {
        case .none: break
        case .encrypted: bond(d)
        case .authenticated:
            guard devices[d].paired && devices[d].authenticated else { return PeerFailure(code: .unlikelyError, dropsLink: true) }
        }
        return permission.authorize ? PeerFailure(code: .insufficientAuthorization) : nil
    }

    /// An ATT error set by a fault for this attribute of the peripheral and this access.
    private func injectedError(_ d: Int, _ attribute: AttributeTable.Attribute, write: Bool) -> UInt8? {
        let table = peripherals[devices[d].peer].server.table
        let (uuid, handles): (BluetoothUUID, [UInt16])
        switch attribute {
        case .value(let c):
            let info = table.characteristics[c]
            (uuid, handles) = (info.uuid, [info.handle, info.valueHandle])
        case .descriptor(let x):
            let info = table.descriptors[x]
            (uuid, handles) = (info.uuid, [info.handle])
        case .service, .declaration:
            return nil
        }
        return peripherals[devices[d].peer].faults.attErrors.first { fault in
            guard fault.operation == .any || (fault.operation == .write) == write else { return false }
            if let u = fault.uuid { return u == uuid }
            return handles.contains { Int($0) == fault.handle }
        }?.code
    }

    /// Runs `action` after the device's response delay (at once when there is none).
    func respond(_ d: Int, _ action: @escaping @Sendable (isolated Engine) -> Void) {
        let delay = peripherals[devices[d].peer].responseDelayMs
        if delay == 0 { return action(self) }
        tasks.after(milliseconds: delay) { await self.run(action) }
    }

    func run(_ action: @Sendable (isolated Engine) -> Void) { action(self) }

    /// The handle bluetoothd addresses for a cached attribute: a characteristic's value, a descriptor.
    private func handle(_ d: Int, _ attribute: Attribute) -> UInt16 {
        switch attribute {
        case .characteristic(let c): devices[d].gatt.characteristics[c].valueHandle
        case .descriptor(let x): devices[d].gatt.descriptors[x].handle
        }
    }

    private func pendingRead(_ d: Int, _ attribute: Attribute) -> PendingRead? {
        switch attribute {
        case .characteristic(let c): devices[d].gatt.characteristics[c].state.read
        case .descriptor(let x): devices[d].gatt.descriptors[x].state.read
        }
    }

    private func setPendingRead(_ d: Int, _ attribute: Attribute, _ value: PendingRead?) {
        switch attribute {
        case .characteristic(let c): devices[d].gatt.characteristics[c].state.read = value
        case .descriptor(let x): devices[d].gatt.descriptors[x].state.read = value
        }
    }

    private func cached(_ d: Int, _ attribute: Attribute) -> [UInt8]? {
        switch attribute {
        case .characteristic(let c): devices[d].gatt.characteristics[c].state.cached
        case .descriptor(let x): devices[d].gatt.descriptors[x].state.cached
        }
    }

    private func setCached(_ d: Int, _ attribute: Attribute, _ value: [UInt8]) {
        switch attribute {
        case .characteristic(let c): devices[d].gatt.characteristics[c].state.cached = value
        case .descriptor(let x): devices[d].gatt.descriptors[x].state.cached = value
        }
    }
}

/// The a{sv} options of ReadValue/WriteValue: "offset" (q) and, for writes, "type" (s); keys
/// compared without case, others ignored, a wrong type refused (parse_options).
struct RequestOptions {
    var offset = 0
    var type: String?

    init?(_ value: Value, withType: Bool = false) {
        guard let entries = value.dictionaryEntries else { return nil }
        for entry in entries {
            guard let key = entry.key.string?.lowercased() else { return nil }
            let inner = entry.value.unwrapped
            if key == "offset" {
                guard case .uint16(let n) = inner else { return nil }
                offset = Int(n)
            }
            if withType && key == "type" {
                guard case .string(let s) = inner else { return nil }
                type = s
            }
        }
    }
}
