import BLE
import DBus
import Glibc

/// The serving side of a link between two simulated adapters (src/gatt-database.c): a central's
/// reads and writes of an adapter's registered applications are calls to the application's
/// objects, with bluetoothd's options; its subscriptions are StartNotify/StopNotify; the
/// application's Value changes are notifications. The serving adapter shows the central as a
/// Device1, Connected while the link is up.
extension Engine {
    /// The application object behind the attribute at `handle` of entry `d`'s peripheral, with
    /// its interface; nil for a simulated device's own attribute or one bluetoothd serves (a CCCD).
    func servedObject(_ d: Int, handle: UInt16) -> (ServedObject, String)? {
        guard let local = peripherals[devices[d].peer].local else { return nil }
        switch peripherals[devices[d].peer].server.table.attribute(at: handle) {
        case .value(let c): return (local.characteristics[c], Interface.characteristic)
        case .descriptor(let x): return local.descriptors[x].map { ($0, Interface.descriptor) }
        default: return nil
        }
    }

    /// bluetoothd's options for a request: the central's device object on the serving adapter,
    /// the offset when there is one, the link and the MTU (append_options), and a write's type.
    private func requestOptions(_ d: Int, offset: Int, type: String?) -> Value {
        var options: [(String, Value)] = [("device", .objectPath(centralEntry(d).map { devices[$0].path } ?? Engine.root))]
        if offset != 0 { options.append(("offset", .uint16(UInt16(clamping: offset)))) }
        options.append(("link", .string("LE")))
        options.append(("mtu", .uint16(UInt16(clamping: devices[d].mtu))))
        if let type { options.append(("type", .string(type))) }
        return .stringVariantDictionary(options)
    }

    func forwardRead(_ d: Int, _ target: (ServedObject, String), offset: Int,
                     then: @escaping @Sendable (isolated Engine, Result<[UInt8], PeerFailure>) -> Void) {
        callClient(.methodCall(destination: target.0.owner, path: target.0.path, interface: target.1, member: "ReadValue",
                               [requestOptions(d, offset: offset, type: nil)])) { engine, result in
            // bluetoothd keeps at most an attribute's 512 bytes of the answer (read_reply_cb).
            then(engine, result.map { Array(($0.first?.bytes ?? []).prefix(512)) }.mapError { PeerFailure(code: Engine.attCode($0, write: false)) })
        }
    }

    /// A write request (`command` false: answered by the application's reply) or command.
    func forwardWrite(_ d: Int, _ target: (ServedObject, String), _ data: [UInt8], offset: Int, command: Bool,
                      then: @escaping @Sendable (isolated Engine, Result<Void, PeerFailure>) -> Void) {
        let type = target.1 == Interface.characteristic ? (command ? "command" : "request") : nil
        callClient(.methodCall(destination: target.0.owner, path: target.0.path, interface: target.1, member: "WriteValue",
                               [.bytes(data), requestOptions(d, offset: offset, type: type)])) { engine, result in
            then(engine, result.map { _ in }.mapError { PeerFailure(code: Engine.attCode($0, write: true)) })
        }
    }

    /// A call to a client (bluetoothd's proxies of its objects); `then` runs with the answer,
    /// in the engine, without holding up anything meanwhile.
    func callClient(_ message: Message, then: @escaping @Sendable (isolated Engine, Result<[Value], BusError>) -> Void) {
        let connection = connection
        tasks.spawn {
            let result: Result<[Value], BusError>
            do throws(BusError) {
                result = .success(try await connection.call(message).body)
            } catch {
                result = .failure(error)
            }
            await self.run { engine in then(engine, result) }
        }
    }

    /// A call bluetoothd makes without waiting for the answer (StartNotify, StopNotify, Confirm).
    private func tell(_ target: ServedObject, _ member: String) {
        var message = Message.methodCall(destination: target.owner, path: target.path, interface: Interface.characteristic, member: member)
        message.noReplyExpected = true
        send(message)
    }

    /// The application's error as the ATT error the central gets (dbus_error_to_att_ecode):
    /// `Failed` is an application error, 0x80 or the one its message gives (0x80...0x9f, read
    /// with strtol as bluetoothd does; a number outside them, or an empty message, is 0x0e).
    static func attCode(_ error: BusError, write: Bool) -> ATTErrorCode {
        switch error.name {
        case "org.bluez.Error.Failed":
            let (code, whole) = error.message.withCString { text -> (Int, Bool) in
                var end: UnsafeMutablePointer<CChar>?
                let n = strtol(text, &end, 0)
                return (n, end?.pointee == 0)
            }
            guard whole else { return ATTErrorCode(rawValue: 0x80) }
            return (0x80...0x9F).contains(code) ? ATTErrorCode(rawValue: UInt8(code)) : .unlikelyError
        case "org.bluez.Error.InProgress": return ATTErrorCode(rawValue: 0xFE)
        case "org.bluez.Error.NotSupported": return .requestNotSupported
        case "org.bluez.Error.NotAuthorized": return .insufficientAuthorization
        case "org.bluez.Error.InvalidValueLength": return .invalidAttributeValueLength
        case "org.bluez.Error.InvalidOffset": return .invalidOffset
        case "org.bluez.Error.NotPermitted": return write ? .writeNotPermitted : .readNotPermitted
        default: return .unlikelyError
        }
    }

    // MARK: - Subscriptions and notifications

    /// After a central's subscriptions to cached characteristic `c` of entry `d` changed: the
    /// application hears StartNotify at the first subscription and StopNotify after the last.
    func localSubscriptionChanged(_ d: Int, _ c: Int) {
        let p = devices[d].peer
        guard peripherals[p].local != nil,
              let (target, _) = servedObject(d, handle: devices[d].gatt.characteristics[c].valueHandle) else { return }
        let subscribed = devices[d].hasGATT && devices[d].gatt.characteristics[c].state.sessions.values.contains(.active)
        guard subscribed != peripherals[p].local!.notifying.contains(target) else { return }
        if subscribed { peripherals[p].local!.notifying.insert(target) } else { peripherals[p].local!.notifying.remove(target) }
        tell(target, subscribed ? "StartNotify" : "StopNotify")
    }

    /// PropertiesChanged from a registered application: a characteristic's new Value goes to
    /// the central that subscribed (an indication's confirmation is told with Confirm).
    func applicationSignal(_ signal: Message) {
        guard signal.member == "PropertiesChanged", signal.body.count == 3, signal.body[0].string == Interface.characteristic,
              let path = signal.path, let sender = signal.sender,
              let value = signal.body[1].stringDictionary?["Value"]?.unwrapped.bytes else { return }
        let target = ServedObject(owner: sender, path: path)
        for p in peripherals.indices {
            guard let c = peripherals[p].local?.characteristics.firstIndex(of: target) else { continue }
            peripherals[p].server.values[c] = value
            // A notification carries at most 512 bytes and what fits the link's ATT MTU
            // (property_changed_cb, bt_gatt_server_send_notification).
            guard let d = linked(p), notify(d, c, Array(value.prefix(min(512, devices[d].mtu - 3)))) else { continue }
            if peripherals[p].server.table.characteristics[c].subscriptionValue == [0x02, 0x00] { tell(target, "Confirm") }
        }
    }

    /// Follows the signals of a client that registered an application.
    func watch(_ owner: String) {
        guard watched[owner] == nil, let deliver else { return }
        watched[owner] = .pending
        let connection = connection
        tasks.spawn {
            let rule = MatchRule(sender: owner, interface: Interface.properties, member: "PropertiesChanged")
            guard let id = try? await connection.subscribe(rule, deliver) else { return }
            await self.watching(owner, id)
        }
    }

    private func watching(_ owner: String, _ id: SubscriptionID) {
        if watched[owner] == .pending { watched[owner] = .subscribed(id) } else { connection.unsubscribe(id) }
    }

    func unwatch(_ owner: String) {
        if case .subscribed(let id) = watched.removeValue(forKey: owner) { connection.unsubscribe(id) }
    }

    // MARK: - The central, as the serving adapter shows it

    /// The serving adapter's Device1 entry for the central of entry `d`'s link (nil: `d` is not
    /// a link to an adapter).
    func centralEntry(_ d: Int) -> Int? {
        guard let server = peripherals[devices[d].peer].local?.adapter else { return nil }
        return peripherals[adapterPeripheral(devices[d].adapter)].entries[server]
    }

    /// Entry `d`'s link to an adapter's applications came up or went down: the serving adapter
    /// shows the central Connected, or no longer; the application's notifications stop.
    func centralLinkChanged(_ d: Int, up: Bool) {
        guard let e = centralEntry(d) else { return }
        if !up {
            for c in devices[d].gatt.characteristics.indices { localSubscriptionChanged(d, c) }
        }
        devices[e].incoming = up
        devices[e].connected = up
        devices[e].temporary = !up
        if up && !devices[e].exported {
            devices[e].exported = true
            export(.device(e))
        } else if devices[e].exported {
            propertiesChanged(.device(e), Interface.device, ["Connected"])
        }
        // A central nobody paired with is a temporary device once it left.
        if !up && !devices[e].paired { scheduleTemporaryRemoval(e) }
    }

    /// Disconnect called on the serving side's Device1 of a central: the link ends, answered when it is down.
    func disconnectCentral(_ e: Int, call: Message) -> Bool {
        guard devices[e].incoming, let p = adapters[devices[e].adapter].asPeripheral, let d = linked(p) else { return false }
        requestDisconnect(d, call: call, reason: .remoteHost)
        return true
    }
}
