import BLE
import DBus

/// Notifications as bluetoothd 5.66's GATT client handles them (src/gatt-client.c): StartNotify
/// sessions per D-Bus client, the CCCD write that the first one makes, Notifying, and the
/// peripheral's notifications reaching the characteristic bluetoothd cached at the value handle.
extension Engine {
    func startNotify(_ call: Message, _ d: Int, _ c: Int, sender: String) {
        if devices[d].link == .disconnecting { return fail(call, BlueZError.notConnected) }
        guard devices[d].gatt.characteristics[c].canNotify else { return fail(call, BlueZError.notSupported) }
        // One session per client; a session kept from an earlier connection is still waiting.
        if let session = devices[d].gatt.characteristics[c].state.sessions[sender] {
            return session == .inactive ? fail(call, BlueZError.inProgress) : reply(call)
        }
        guard devices[d].hasGATT else {
            // Subscribes on the next connection.
            devices[d].gatt.characteristics[c].state.sessions[sender] = .inactive
            return reply(call)
        }
        if devices[d].gatt.characteristics[c].state.sessions.values.contains(.active) {
            devices[d].gatt.characteristics[c].state.sessions[sender] = .active
            return reply(call)
        }
        devices[d].gatt.characteristics[c].state.sessions[sender] = .pending
        if devices[d].gatt.characteristics[c].state.subscribing != nil {
            devices[d].gatt.characteristics[c].state.subscribing!.waiters.append((sender, call))
            return
        }
        let id = makeID()
        devices[d].gatt.characteristics[c].state.subscribing = CharacteristicState.Subscribing(id: id, waiters: [(sender, call)])
        respond(d) { engine in engine.completeSubscribe(d, c, id: id) }
    }

    /// The CCCD write (to the CCCD handle bluetoothd cached) came back.
    private func completeSubscribe(_ d: Int, _ c: Int, id: Int) {
        guard let subscribing = devices[d].gatt.characteristics[c].state.subscribing, subscribing.id == id else { return }
        devices[d].gatt.characteristics[c].state.subscribing = nil
        let info = devices[d].gatt.characteristics[c]
        let result: Result<Void, PeerFailure>
        if let cccd = devices[d].gatt.cccd(of: c) {
            result = peerWrite(d, handle: devices[d].gatt.descriptors[cccd].handle, info.subscriptionValue, offset: 0, command: false)
                .map { _ in }
        } else {
            result = .failure(PeerFailure(code: .requestNotSupported))
        }
        if case .failure(let failure) = result {
            for waiter in subscribing.waiters {
                devices[d].gatt.characteristics[c].state.sessions[waiter.sender] = nil
                fail(waiter.call, failure.error)
            }
            if failure.dropsLink { linkDown(d) }
            return
        }
        for waiter in subscribing.waiters where devices[d].gatt.characteristics[c].state.sessions[waiter.sender] == .pending {
            devices[d].gatt.characteristics[c].state.sessions[waiter.sender] = .active
        }
        if !devices[d].gatt.characteristics[c].state.notifying {
            devices[d].gatt.characteristics[c].state.notifying = true
            propertiesChanged(.characteristic(d, c), Interface.characteristic, ["Notifying"])
        }
        for waiter in subscribing.waiters { reply(waiter.call) }
        localSubscriptionChanged(d, c)
        startUART(devices[d].peer)  // its stream, if this is its tx
    }

    /// StopNotify, or the client left the bus. Notifying turns false when no session remains
    /// subscribed (sessions kept across a disconnection do not count, as in 5.66).
    func endSession(device d: Int, characteristic c: Int, sender: String) {
        devices[d].gatt.characteristics[c].state.sessions[sender] = nil
        if var subscribing = devices[d].gatt.characteristics[c].state.subscribing,
           let i = subscribing.waiters.firstIndex(where: { $0.sender == sender }) {
            fail(subscribing.waiters[i].call, BlueZError.failed("Operation failed"))
            subscribing.waiters.remove(at: i)
            devices[d].gatt.characteristics[c].state.subscribing = subscribing.waiters.isEmpty ? nil : subscribing
        }
        let stillSubscribed = devices[d].gatt.characteristics[c].state.sessions.values.contains { $0 != .inactive }
        if devices[d].gatt.characteristics[c].state.notifying && !stillSubscribed {
            devices[d].gatt.characteristics[c].state.notifying = false
            propertiesChanged(.characteristic(d, c), Interface.characteristic, ["Notifying"])
        }
        localSubscriptionChanged(d, c)
    }

    /// The peripheral notifies (or indicates) its characteristic `c`: bluetoothd hears it while
    /// connected and subscribed, under the value handle, and passes it to the characteristic it
    /// cached there; it stores it and signals Value even when it did not change. False: not heard.
    @discardableResult
    func notify(_ d: Int, _ c: Int, _ value: [UInt8]) -> Bool {
        guard devices[d].hasGATT, let cached = subscribedCharacteristic(d, c) else { return false }
        devices[d].gatt.characteristics[cached].state.cached = value
        if devices[d].gatt.characteristics[cached].state.sessions[Engine.controlSender] == .active {
            devices[d].gatt.characteristics[cached].state.controlValues.append(value)
            devices[d].gatt.characteristics[cached].state.controlValues.removeFirst(
                max(0, devices[d].gatt.characteristics[cached].state.controlValues.count - Engine.controlValuesKept))
        }
        propertiesChanged(.characteristic(d, cached), Interface.characteristic, ["Value"])
        return true
    }

    /// The cached characteristic at the value handle of the peripheral's characteristic `c`, if a
    /// session has it subscribed (the peripheral's CCCD is then on).
    func subscribedCharacteristic(_ d: Int, _ c: Int) -> Int? {
        guard let cached = devices[d].gatt.characteristic(valueHandle: peripherals[devices[d].peer].server.table.characteristics[c].valueHandle),
              devices[d].gatt.characteristics[cached].state.sessions.values.contains(.active) else { return nil }
        return cached
    }

    func cccdValue(_ d: Int, _ c: Int) -> [UInt8] {
        devices[d].hasGATT && subscribedCharacteristic(d, c) != nil ? peripherals[devices[d].peer].server.table.characteristics[c].subscriptionValue : [0, 0]
    }
}
