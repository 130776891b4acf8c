import BLE
import DBus
import Management

/// Device1: Connect, Disconnect, Pair and link loss, in bluetoothd 5.66's order of signals
/// and replies (src/device.c: device_add_connection, att_connect_cb, device_remove_connection).
extension Engine {
    func deviceCall(_ call: Message, member: String, device d: Int, sender: String) {
        switch member {
        case "Connect": connect(d, call: call)
        case "Disconnect": disconnect(d, call: call)
        case "Pair": pair(d, call: call, sender: sender)
        case "CancelPairing": cancelPairing(d, call: call)
        default:
            // ConnectProfile/DisconnectProfile: a LE-only device has no BR/EDR profiles.
            fail(call, BusError(name: "org.bluez.Error.NotAvailable", message: "Operation currently not available"))
        }
    }

    private func connect(_ d: Int, call: Message) {
        switch devices[d].link {
        case .connected, .disconnecting:
            return reply(call)
        case .connecting:
            return fail(call, BlueZError.failed("Operation already in progress"))
        case .idle:
            break
        }
        guard adapters[devices[d].adapter].powered else { return fail(call, BlueZError.failed("Input/output error")) }
        // bluetoothd's bt_io_connect gets EBUSY from the kernel, which holds a link to the device.
        if devices[d].staleLink { return fail(call, BlueZError.failed("Input/output error")) }
        devices[d].connectCall = call
        beginConnect(d)
    }

    /// How long a controller takes to refuse a connection it has no room for.
    static let refusalMs = 5

    /// Starts a connection attempt; it ends in `linkUp` or `failConnect`.
    func beginConnect(_ d: Int) {
        let attempt = makeID()
        devices[d].link = .connecting(attempt: attempt)
        devices[d].temporary = false
        devices[d].temporaryTimer = nil
        let p = devices[d].peer
        let peripheral = peripherals[p]
        let delay = peripheral.faults.connectDelayMs ?? peripheral.config.connectDelayMs
        log("\(describe(d)): connecting")
        let a = devices[d].adapter
        let links = peripherals.indices.count { devices[peripherals[$0].entries[a]].link != .idle } - 1
        if links >= adapters[a].config.maxConnections {
            // The controller answers LE Create Connection with Connection Limit Exceeded (0x09),
            // which the kernel passes on as EMLINK.
            log("\(adapters[a].config.id) holds \(links) links, its limit")
            tasks.after(milliseconds: Engine.refusalMs) {
                await self.connectAttemptFailed(d, attempt: attempt, BlueZError.failed("le-connection-concurrent-connection-limit"),
                                                linkEstablished: false)
            }
        } else if let error = peripheral.faults.connectError, peripheral.connectFailuresLeft.map({ $0 > 0 }) ?? true {
            if let left = peripheral.connectFailuresLeft { peripherals[p].connectFailuresLeft = left - 1 }
            tasks.after(milliseconds: delay) {
                await self.connectAttemptFailed(d, attempt: attempt, BusError(name: error.name, message: error.message),
                                                linkEstablished: error.linkEstablished)
            }
        } else if !answers(d) {
            nobodyAnswers(d, attempt: attempt)
        } else {
            tasks.after(milliseconds: delay) { await self.linkUp(d, attempt: attempt) }
        }
    }

    /// Whether the peripheral can take a connection through entry `d`'s adapter now: it is
    /// connectable, in that adapter's range, and not connected through another adapter (it has
    /// stopped advertising: a second central's connection request finds nobody).
    private func answers(_ d: Int) -> Bool {
        let p = devices[d].peer
        let peripheral = peripherals[p]
        // An adapter in the peripheral role answers while it is on.
        let on = peripheral.local.map { adapters[$0.adapter].usable } ?? true
        return on && peripheral.config.connectable && !peripheral.faults.outOfRange && peripheral.rssi[devices[d].adapter] != nil
            && peripheral.entries.allSatisfy { $0 == d || !devices[$0].hasGATT }
    }

    /// Nobody answers the connection request: the kernel gives up after its LE connection timeout.
    private func nobodyAnswers(_ d: Int, attempt: Int) {
        tasks.after(milliseconds: adapterConfig(d).connectTimeoutMs) {
            await self.connectAttemptFailed(d, attempt: attempt, BlueZError.failed("le-connection-abort-by-local"),
                                            linkEstablished: false)
        }
    }

    /// The device's address for log lines, with the adapter when there are several.
    func describe(_ d: Int) -> String {
        adapters.count == 1 ? devices[d].address.description : "\(adapters[devices[d].adapter].config.id) \(devices[d].address)"
    }

    private func connectAttemptFailed(_ d: Int, attempt: Int, _ error: BusError, linkEstablished: Bool) {
        guard devices[d].link == .connecting(attempt: attempt) else { return }
        failConnect(d, error, linkEstablished: linkEstablished)
    }

    /// The attempt failed: Connect gets `error`; a Pair that had to connect first gets
    /// bluetoothd's "Software caused connection abort".
    func failConnect(_ d: Int, _ error: BusError, linkEstablished: Bool) {
        devices[d].link = .idle
        log("\(describe(d)): connect failed: \(error)")
        if linkEstablished {
            streamLink(d, up: true)
            streamLink(d, up: false, reason: error.message.contains("by-remote") ? .remoteHost : .localHost)
            devices[d].connected = true
            propertiesChanged(.device(d), Interface.device, ["Connected"])
            devices[d].connected = false
            propertiesChanged(.device(d), Interface.device, ["Connected"])
        }
        if let call = devices[d].connectCall {
            devices[d].connectCall = nil
            fail(call, error)
        }
        if devices[d].pairing != nil { endPairing(d, BlueZError.failed("Software caused connection abort")) }
    }

    /// Disconnect while connecting cancels the attempt.
    func cancelConnect(_ d: Int) {
        devices[d].link = .idle
        if let call = devices[d].connectCall {
            devices[d].connectCall = nil
            fail(call, BlueZError.failed("br-connection-canceled"))
        }
        if devices[d].pairing != nil { endPairing(d, BlueZError.authenticationCanceled) }
    }

    /// The link is up: Connected=true, the Connect reply, the GATT objects (first time) or
    /// their MTU, the notification sessions re-enabled, then ServicesResolved=true.
    private func linkUp(_ d: Int, attempt: Int) {
        guard devices[d].link == .connecting(attempt: attempt) else { return }
        // It went out of range, or another adapter's link got it first: nobody answers.
        guard answers(d) else { return nobodyAnswers(d, attempt: attempt) }
        let faults = peripherals[devices[d].peer].faults
        devices[d].link = .connected
        devices[d].linkEpoch += 1
        let epoch = devices[d].linkEpoch
        devices[d].connected = true
        log("\(describe(d)): connected")
        // The kernel tells its management sockets first; bluetoothd hears it from there.
        streamLink(d, up: true)
        if !faults.suppressConnectedSignal {
            propertiesChanged(.device(d), Interface.device, ["Connected"])
        }
        if let call = devices[d].connectCall {
            devices[d].connectCall = nil
            reply(call)
        }
        centralLinkChanged(d, up: true)
        // bluez#1489: on a first connection ServicesResolved can come before the objects.
        let early = faults.servicesResolvedEarly && !devices[d].gattExported
        discoverAtConnection(d)
        if early { resolveServices(d) }
        var resolved = early
        let services = devices[d].gatt.present
        if !devices[d].gattExported {
            devices[d].gattExported = true
            if let late = faults.lateServices, late.first < services.count {
                // In two pieces, ServicesResolved between them or after both (the race seen on
                // real bluetoothd after a restart).
                exportGATT(d, services.prefix(late.first))
                if !resolved && late.resolved == .between {
                    resolveServices(d)
                    resolved = true
                }
                log("\(devices[d].address): \(late.first) of \(services.count) services exported; the others in \(late.restAfterMs) ms")
                let resolveLater = !resolved
                tasks.after(milliseconds: late.restAfterMs) { await self.exportRest(d, epoch: epoch, resolve: resolveLater) }
                resolved = true  // now, or by exportRest
            } else {
                exportGATT(d, services)
            }
        } else {
            // A piece that a lost link kept from being exported comes now.
            exportGATT(d, services)
            for c in devices[d].gatt.characteristics.indices { propertiesChanged(.characteristic(d, c), Interface.characteristic, ["MTU"]) }
        }
        for c in devices[d].gatt.characteristics.indices where !devices[d].gatt.characteristics[c].state.sessions.isEmpty {
            if faults.keptSessionsLost {
                // Gone without a word: Notifying stays as it was.
                devices[d].gatt.characteristics[c].state.sessions = devices[d].gatt.characteristics[c].state.sessions.filter { $0.value != .inactive }
                continue
            }
            for sender in devices[d].gatt.characteristics[c].state.sessions.keys {
                devices[d].gatt.characteristics[c].state.sessions[sender] = .active
            }
            if !devices[d].gatt.characteristics[c].state.notifying {
                devices[d].gatt.characteristics[c].state.notifying = true
                propertiesChanged(.characteristic(d, c), Interface.characteristic, ["Notifying"])
            }
        }
        // servicesResolvedAfterPairingMs: the pairing that made this link resolves them, after its reply.
        let pairingResolves = devices[d].pairing != nil && faults.servicesResolvedAfterPairingMs != nil
        if !resolved && !pairingResolves { resolveServices(d) }
        startUART(devices[d].peer)  // its stream, for sessions kept from the last connection
        if let ms = faults.dropLinkAfterMs {
            tasks.after(milliseconds: ms) { await self.linkDown(d, epoch: epoch, reason: .timeout) }
        }
        if devices[d].pairing != nil { startPairing(d) }
    }

    /// The second piece of `lateServices`, if the link it belongs to is still up.
    private func exportRest(_ d: Int, epoch: Int, resolve: Bool) {
        guard devices[d].linkEpoch == epoch, devices[d].hasGATT, devices[d].gattExported else { return }
        exportGATT(d, devices[d].gatt.present)
        log("\(devices[d].address): the other services exported")
        if resolve { resolveServices(d) }
    }

    /// UUIDs becomes the primary services (first time), then ServicesResolved=true.
    func resolveServices(_ d: Int) {
        if !devices[d].servicesResolvedOnce {
            devices[d].servicesResolvedOnce = true
            updateUUIDs(d)
        }
        devices[d].servicesResolved = true
        propertiesChanged(.device(d), Interface.device, ["ServicesResolved"])
    }

    private func disconnect(_ d: Int, call: Message) {
        if disconnectCentral(d, call: call) { return }
        switch devices[d].link {
        case .idle:
            reply(call)
        case .connecting:
            cancelConnect(d)
            reply(call)
        case .connected, .disconnecting:
            requestDisconnect(d, call: call)
        }
    }

    /// bluetoothd waits before it drops the link (DISCONNECT_TIMER) and answers every
    /// Disconnect (and RemoveDevice) once it is down. `reason`: as entry `d`'s adapter sees it
    /// (the remote host's when the serving adapter ends a link to its applications).
    func requestDisconnect(_ d: Int, call: Message?, reason: DisconnectReason = .localHost) {
        if let call { devices[d].disconnectCalls.append(call) }
        guard devices[d].link == .connected else { return }
        devices[d].link = .disconnecting
        let epoch = devices[d].linkEpoch
        tasks.after(milliseconds: adapterConfig(d).disconnectDelayMs) { await self.linkDown(d, epoch: epoch, reason: reason) }
    }

    /// The link went down (by request, link loss or power off): pending ATT requests fail,
    /// notification sessions wait for the next connection, ServicesResolved=false, the
    /// Disconnect replies, Connected=false. The GATT objects stay, as in 5.66. `reason`: why, as
    /// the kernel of entry `d`'s adapter tells it (this host ended it, unless said otherwise).
    func linkDown(_ d: Int, epoch: Int? = nil, reason: DisconnectReason = .localHost) {
        guard devices[d].hasGATT, epoch == nil || epoch == devices[d].linkEpoch else { return }
        log("\(describe(d)): disconnected")
        streamLink(d, up: false, reason: reason)
        devices[d].link = .idle
        for c in devices[d].gatt.characteristics.indices {
            failPendingRequests(d, characteristic: c)
            for sender in devices[d].gatt.characteristics[c].state.sessions.keys {
                devices[d].gatt.characteristics[c].state.sessions[sender] = .inactive
            }
        }
        for x in devices[d].gatt.descriptors.indices { failPendingRequests(d, descriptor: x) }
        if devices[d].servicesResolved {
            devices[d].servicesResolved = false
            propertiesChanged(.device(d), Interface.device, ["ServicesResolved"])
        }
        for call in devices[d].disconnectCalls { reply(call) }
        devices[d].disconnectCalls = []
        devices[d].connected = false
        propertiesChanged(.device(d), Interface.device, ["Connected"])
        centralLinkChanged(d, up: false)
        // bluetoothd hears of the disconnection, then finishes the bonding it was doing.
        if devices[d].pairing != nil { endPairing(d, BlueZError.authenticationCanceled) }
        if peripherals[devices[d].peer].faults.forgetGATT {
            // No cache: the objects, and the notification sessions on them, go with the link.
            withdrawGATT(d)
        }
        if devices[d].removeAfterDisconnect { removeDevice(d) }
    }

    /// What was waiting for the peer gets bluetoothd's answer for a request that never got a
    /// response (the link went down, or the attribute left the cache).
    func failPendingRequests(_ d: Int, characteristic c: Int) {
        let failed = BlueZError.att(.success)
        let state = devices[d].gatt.characteristics[c].state
        state.read?.calls.forEach { fail($0, failed) }
        if let write = state.write { fail(write.call, failed) }
        for waiter in state.subscribing?.waiters ?? [] {
            devices[d].gatt.characteristics[c].state.sessions[waiter.sender] = nil
            fail(waiter.call, failed)
        }
        devices[d].gatt.characteristics[c].state.read = nil
        devices[d].gatt.characteristics[c].state.write = nil
        devices[d].gatt.characteristics[c].state.subscribing = nil
    }

    func failPendingRequests(_ d: Int, descriptor x: Int) {
        let failed = BlueZError.att(.success)
        let state = devices[d].gatt.descriptors[x].state
        state.read?.calls.forEach { fail($0, failed) }
        if let write = state.write { fail(write.call, failed) }
        devices[d].gatt.descriptors[x].state.read = nil
        devices[d].gatt.descriptors[x].state.write = nil
    }

    func setBlocked(_ d: Int, _ blocked: Bool) {
        guard blocked != devices[d].blocked else { return }
        devices[d].blocked = blocked
        propertiesChanged(.device(d), Interface.device, ["Blocked"])
        if blocked {
            if isConnecting(d) { cancelConnect(d) } else { linkDown(d) }
        }
    }
}
