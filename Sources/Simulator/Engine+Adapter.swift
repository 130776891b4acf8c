import BLE
import DBus

/// Adapter1 of each adapter: discovery per D-Bus client, filters, RemoveDevice, power.
extension Engine {
    func adapterCall(_ call: Message, member: String, adapter a: Int, sender: String) {
        let id = adapters[a].config.id
        switch member {
        case "StartDiscovery":
            guard adapters[a].powered else { return fail(call, BlueZError.notReady) }
            if adapters[a].discoveryClients[sender]?.discovering == true { return fail(call, BlueZError.busy) }
            adapters[a].discoveryClients[sender, default: DiscoveryClient()].discovering = true
            log("\(id): discovery started by \(sender)")
            reply(call)
            discoveryChanged(a)
        case "StopDiscovery":
            guard adapters[a].powered else { return fail(call, BlueZError.notReady) }
            guard adapters[a].discoveryClients[sender]?.discovering == true else {
                return fail(call, BlueZError.failed("No discovery started"))
            }
            // bluetoothd frees the client with its filter.
            adapters[a].discoveryClients[sender] = nil
            log("\(id): discovery stopped by \(sender)")
            reply(call)
            discoveryChanged(a)
        case "SetDiscoveryFilter":
            guard adapters[a].powered else { return fail(call, BlueZError.notReady) }
            let filter: DiscoveryFilter?
            do { filter = try DiscoveryFilter.parse(call.body[0]) } catch { return fail(call, error) }
            if var client = adapters[a].discoveryClients[sender] {
                client.filter = filter
                adapters[a].discoveryClients[sender] = client.discovering || filter != nil ? client : nil
                reply(call)
                if client.discovering { discoveryChanged(a) }
            } else {
                if filter != nil { adapters[a].discoveryClients[sender] = DiscoveryClient(filter: filter) }
                reply(call)
            }
        case "GetDiscoveryFilters":
            reply(call, [.strings(DiscoveryFilter.keys)])
        case "RemoveDevice":
            guard let path = call.body[0].objectPath,
                  let d = peripherals.indices.lazy.map({ self.peripherals[$0].entries[a] }).first(where: {
                      self.devices[$0].exported && self.devices[$0].path == path
                  }) else {
                return fail(call, BlueZError.doesNotExist)
            }
            guard adapters[a].powered else { return fail(call, BlueZError.notReady) }
            devices[d].temporary = true
            devices[d].temporaryTimer = nil
            if devices[d].hasGATT {
                devices[d].removeAfterDisconnect = true
                requestDisconnect(d, call: call)
            } else {
                if case .connecting = devices[d].link { cancelConnect(d) }
                removeDevice(d)
                reply(call)
            }
        default:
            fail(call, DBusError.unknownMethod(call))
        }
    }

    /// A client that discovered or set a filter left the bus.
    func removeDiscoveryClient(_ a: Int, _ sender: String) {
        let wasDiscovering = adapters[a].discoveryClients.removeValue(forKey: sender)?.discovering ?? false
        if wasDiscovering {
            log("\(adapters[a].config.id): discovery of \(sender) ended: it left the bus")
            discoveryChanged(a)
        }
    }

    /// Every discovery session on the adapter ends (power off, `EndDiscovery`).
    func endDiscovery(_ a: Int) {
        adapters[a].discoveryClients = [:]
        discoveryChanged(a)
    }

    /// Withdraws the device and its GATT objects (children first, as bluetoothd unregisters
    /// them) and forgets everything bluetoothd knew about it.
    func removeDevice(_ d: Int) {
        guard devices[d].exported else { return }
        if devices[d].gattExported { withdrawGATT(d) }
        unexport(.device(d))
        adapters[devices[d].adapter].discoveryFound.remove(d)
        devices[d].forget()
    }

    // MARK: - Power

    /// Adapter1.Powered = false stops the adapter's discovery and drops its links.
    func setPowered(_ a: Int, _ on: Bool, call: Message?) {
        guard on != adapters[a].powered else { if let call { reply(call) }; return }
        log("\(adapters[a].config.id) powered \(on ? "on" : "off")")
        if !on {
            endDiscovery(a)
            // Its advertising stops (registrations stay, as the kernel keeps the instances) and links to its applications end.
            localLinkEnds(a)
            for p in peripherals.indices {
                let d = peripherals[p].entries[a]
                // Closing the adapter flushes the kernel's connections, a stale one too.
                devices[d].staleLink = false
                if isConnecting(d) {
                    failConnect(d, BlueZError.failed("le-connection-abort-by-local"), linkEstablished: false)
                } else if devices[d].hasGATT {
                    linkDown(d)
                }
            }
        }
        adapters[a].powered = on
        // bluetoothd answers when the kernel confirms, then signals the new settings.
        if let call { reply(call) }
        propertiesChanged(.adapter(a), Interface.adapter, ["Powered"])
    }
}
