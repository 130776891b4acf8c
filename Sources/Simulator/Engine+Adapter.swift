import BLE
import DBus

/// Adapter1: discovery per D-Bus client, filters, RemoveDevice, power.
extension Engine {
    func adapterCall(_ call: Message, member: String, sender: String) {
        switch member {
        case "StartDiscovery":
            guard powered else { return fail(call, BlueZError.notReady) }
            if discoveryClients[sender]?.discovering == true { return fail(call, BlueZError.busy) }
            discoveryClients[sender, default: DiscoveryClient()].discovering = true
            log("discovery started by \(sender)")
            reply(call)
            discoveryChanged()
        case "StopDiscovery":
            guard powered else { return fail(call, BlueZError.notReady) }
            guard discoveryClients[sender]?.discovering == true else { return fail(call, BlueZError.failed("No discovery started")) }
            // bluetoothd frees the client with its filter.
            discoveryClients[sender] = nil
            log("discovery stopped by \(sender)")
            reply(call)
            discoveryChanged()
        case "SetDiscoveryFilter":
            guard powered else { return fail(call, BlueZError.notReady) }
            let filter: DiscoveryFilter?
            do { filter = try DiscoveryFilter.parse(call.body[0]) } catch { return fail(call, error) }
            if var client = discoveryClients[sender] {
                client.filter = filter
                discoveryClients[sender] = client.discovering || filter != nil ? client : nil
                reply(call)
                if client.discovering { discoveryChanged() }
            } else {
                if filter != nil { discoveryClients[sender] = DiscoveryClient(filter: filter) }
                reply(call)
            }
        case "GetDiscoveryFilters":
            reply(call, [.strings(DiscoveryFilter.keys)])
        case "RemoveDevice":
            guard let path = call.body[0].objectPath,
                  let d = devices.firstIndex(where: { $0.exported && $0.path == path }) else {
                return fail(call, BlueZError.doesNotExist)
            }
            guard powered else { return fail(call, BlueZError.notReady) }
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
    func removeDiscoveryClient(_ sender: String) {
        let wasDiscovering = discoveryClients.removeValue(forKey: sender)?.discovering ?? false
        if wasDiscovering {
            log("discovery of \(sender) ended: it left the bus")
            discoveryChanged()
        }
    }

    /// After discovery sessions or filters changed: update Discovering, and report every
    /// device in range at once (a scan restart sees them all again).
    func discoveryChanged() {
        let active = discoveryClients.values.contains { $0.discovering }
        if active != discovering {
            discovering = active
            propertiesChanged(.adapter, Interface.adapter, ["Discovering"])
            if !active { discoveryCleanup() }
        }
        if active { for d in devices.indices { advertise(d) } }
    }

    /// When discovery stops, bluetoothd forgets the RSSI and TX power of what it found and drops
    /// the temporary devices that cannot be connected to (beacons).
    private func discoveryCleanup() {
        for d in discoveryFound.sorted() where devices[d].exported {
            var names: [String] = []
            if devices[d].rssi != nil { devices[d].rssi = nil; names.append("RSSI") }
            if devices[d].txPower != nil { devices[d].txPower = nil; names.append("TxPower") }
            if !names.isEmpty { propertiesChanged(.device(d), Interface.device, names) }
        }
        discoveryFound = []
        for d in devices.indices where devices[d].exported && devices[d].temporary && !devices[d].config.connectable {
            removeDevice(d)
        }
    }

    /// One advertisement of device `d`, as a discovering adapter receives it.
    func advertise(_ d: Int) {
        guard powered, discovering else { return }
        let device = devices[d]
        // A connected peripheral stops advertising; an absent one is not heard. With a filter set,
        // bluetoothd reports every advertisement's RSSI, else only changes of 8 dB or more.
        guard !device.faults.outOfRange, !device.retired, device.link == .idle || isConnecting(d), !device.blocked else { return }
        let merged = MergedDiscovery(discoveryClients.values)
        let ad = nextAdvertisement(d)
        // bluetoothd restarts a device's TemporaryTimeout on every report it hears, even one
        // the discovery filter then drops.
        devices[d].heardAt = .now
        guard merged.reports(ad, address: device.address) else { return }
        discoveryFound.insert(d)

        if !device.exported {
            devices[d].exported = true
            devices[d].temporary = true
            devices[d].name = ad.name
            devices[d].rssi = ad.rssi
            devices[d].txPower = ad.txPower
            devices[d].uuids = ad.uuids
            devices[d].manufacturerData = ad.manufacturerData
            devices[d].serviceData = ad.serviceData
            devices[d].advertisingFlags = ad.flags
            log("discovered \(device.address) \(ad.name ?? "(no name)") rssi \(ad.rssi)")
            export(.device(d))
            scheduleTemporaryRemoval(d)
            return
        }

        var changed: [String] = []
        let old = device.rssi
        if old == nil || abs(old! - ad.rssi) >= (merged.isFiltered ? 0 : 8) {
            devices[d].rssi = ad.rssi
            changed.append("RSSI")
        }
        if let tx = ad.txPower, tx != device.txPower {
            devices[d].txPower = tx
            changed.append("TxPower")
        }
        if let name = ad.name, name != device.name {
            devices[d].name = name
            changed.append("Name")
            if device.alias == nil { changed.append("Alias") }
        }
        if !device.servicesResolvedOnce {
            let added = ad.uuids.filter { !device.uuids.contains($0) }
            if !added.isEmpty {
                devices[d].uuids += added
                changed.append("UUIDs")
            }
        }
        let duplicates = merged.duplicateData
        let data = duplicates ? ad.manufacturerData : device.manufacturerData.merging(ad.manufacturerData) { $1 }
        if data != device.manufacturerData || (duplicates && !data.isEmpty) {
            devices[d].manufacturerData = data
            changed.append("ManufacturerData")
        }
        let service = duplicates ? ad.serviceData : device.serviceData.merging(ad.serviceData) { $1 }
        if service != device.serviceData || (duplicates && !service.isEmpty) {
            devices[d].serviceData = service
            changed.append("ServiceData")
        }
        if ad.flags != device.advertisingFlags {
            devices[d].advertisingFlags = ad.flags
            if adapterConfig.experimental { changed.append("AdvertisingFlags") }
        }
        if !changed.isEmpty { propertiesChanged(.device(d), Interface.device, changed) }
    }

    func isConnecting(_ d: Int) -> Bool {
        if case .connecting = devices[d].link { return true }
        return false
    }

    /// The device's next advertisement: RSSI jitter, the counter in its manufacturer data, and
    /// its sensor's latest payload.
    private func nextAdvertisement(_ d: Int) -> Advertisement {
        let config = devices[d].config
        let rssi = min(max(config.rssi + Int.random(in: -config.rssiJitter...config.rssiJitter), -127), 20)
        var data = config.manufacturerData.mapValues(\.bytes)
        if config.advertisingCounter {
            devices[d].advertisingCounter &+= 1
            for key in data.keys where !data[key]!.isEmpty { data[key]![data[key]!.count - 1] = devices[d].advertisingCounter }
        }
        var serviceData = config.serviceData.mapValues(\.bytes).merging(devices[d].advertisedServiceData) { $1 }
        if let sensor = devices[d].sensor {
            switch sensor.slot {
            case .serviceData(let uuid): serviceData[uuid] = sensor.payload
            case .manufacturerData(let company): data[company] = sensor.payload
            }
        }
        return Advertisement(name: config.name, uuids: config.uuids, manufacturerData: data,
                             serviceData: serviceData, txPower: config.txPower,
                             flags: config.advertisingFlags.bytes, rssi: rssi)
    }

    /// BlueZ's TemporaryTimeout: a device nobody connected to or paired with goes away.
    private func scheduleTemporaryRemoval(_ d: Int) {
        guard adapterConfig.temporaryTimeoutSec > 0 else { return }
        let id = makeID()
        devices[d].temporaryTimer = id
        tasks.after(milliseconds: adapterConfig.temporaryTimeoutSec * 1000) {
            await self.temporaryTimeout(d, id: id)
        }
    }

    private func temporaryTimeout(_ d: Int, id: Int) {
        guard devices[d].temporaryTimer == id, devices[d].temporary, devices[d].exported, devices[d].link == .idle else { return }
        let timeout = Duration.seconds(adapterConfig.temporaryTimeoutSec)
        if let heard = devices[d].heardAt, ContinuousClock.now - heard < timeout {
            // Heard since the timer started: wait out the rest from the last report.
            let left = timeout - (ContinuousClock.now - heard)
            let next = makeID()
            devices[d].temporaryTimer = next
            let ms = Int(left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000) + 1
            tasks.after(milliseconds: ms) { await self.temporaryTimeout(d, id: next) }
            return
        }
        log("\(devices[d].address) removed: TemporaryTimeout expired")
        removeDevice(d)
    }

    /// Withdraws the device and its GATT objects (children first, as bluetoothd unregisters
    /// them) and forgets everything bluetoothd knew about it.
    func removeDevice(_ d: Int) {
        guard devices[d].exported else { return }
        if devices[d].gattExported { withdrawGATT(d) }
        unexport(.device(d))
        discoveryFound.remove(d)
        devices[d].forget()
    }

    /// Adapter1.Powered = false stops every discovery and drops every link.
    func setPowered(_ on: Bool, call: Message?) {
        guard on != powered else { if let call { reply(call) }; return }
        log("adapter powered \(on ? "on" : "off")")
        if !on {
            discoveryClients = [:]
            discoveryChanged()
            for d in devices.indices {
                // Closing the adapter flushes the kernel's connections, a stale one too.
                devices[d].faults.staleLink = false
                if isConnecting(d) {
                    failConnect(d, BlueZError.failed("le-connection-abort-by-local"), linkEstablished: false)
                } else if devices[d].hasGATT {
                    linkDown(d)
                }
            }
        }
        powered = on
        // bluetoothd answers when the kernel confirms, then signals the new settings.
        if let call { reply(call) }
        propertiesChanged(.adapter, Interface.adapter, ["Powered"])
    }
}
