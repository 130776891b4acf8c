import BLE
import DBus

/// Discovery as each adapter's controller and bluetoothd do it: a peripheral's advertisement is
/// heard by every discovering adapter in its range, each at its own RSSI, and reported through
/// that adapter's merged discovery filters; what discovery found loses its RSSI when it stops;
/// devices nobody uses go after TemporaryTimeout.
extension Engine {
    /// After discovery sessions or filters of adapter `a` changed: update Discovering, and report
    /// every device in range at once (a scan restart sees them all again).
    func discoveryChanged(_ a: Int) {
        let active = adapters[a].discoveryClients.values.contains { $0.discovering }
        if active != adapters[a].discovering {
            adapters[a].discovering = active
            propertiesChanged(.adapter(a), Interface.adapter, ["Discovering"])
            if !active { discoveryCleanup(a) }
        }
        if active { for p in peripherals.indices { advertise(p, only: a) } }
    }

    /// When discovery stops, bluetoothd forgets the RSSI and TX power of what it found and drops
    /// the temporary devices that cannot be connected to (beacons).
    private func discoveryCleanup(_ a: Int) {
        for d in adapters[a].discoveryFound.sorted() where devices[d].exported {
            var names: [String] = []
            if devices[d].rssi != nil { devices[d].rssi = nil; names.append("RSSI") }
            if devices[d].txPower != nil { devices[d].txPower = nil; names.append("TxPower") }
            if !names.isEmpty { propertiesChanged(.device(d), Interface.device, names) }
        }
        adapters[a].discoveryFound = []
        for p in peripherals.indices {
            let d = peripherals[p].entries[a]
            if devices[d].exported && devices[d].temporary && !devices[d].config.connectable { removeDevice(d) }
        }
    }

    /// One advertisement of peripheral `p`, as every discovering adapter in its range receives
    /// it (`only`: that adapter alone, for a scan that starts).
    func advertise(_ p: Int, only: Int? = nil) {
        let peripheral = peripherals[p]
        // A connected peripheral stops advertising (to every adapter); an absent one is not heard.
        guard !peripheral.faults.outOfRange, !peripheral.retired, linked(p) == nil else { return }
        // An adapter advertises its registered advertisements, in turn, while it is on.
        guard takeTurn(p) else { return }
        let inRange = adapters.indices.filter { a in
            (only == nil || only == a) && adapters[a].usable && peripheral.rssi[a] != nil && !devices[peripheral.entries[a]].blocked
        }
        // A discovering controller scans actively; one with an advertisement monitor and no
        // discovery, passively (only the kernel's management clients hear it).
        let listening = inRange.filter { adapters[$0].discovering }
        let monitoring = inRange.filter { !adapters[$0].discovering && !adapters[$0].monitors.isEmpty }
        guard !listening.isEmpty || !monitoring.isEmpty else { return }
        // One packet: counters and sensor payloads move once, whoever hears it.
        var ad = nextAdvertisement(p)
        let jitter = peripheral.config.rssiJitter
        for a in listening + monitoring {
            ad.rssi = min(max(peripheral.rssi[a]! + Int.random(in: -jitter...jitter), -127), 20)
            if adapters[a].discovering { hear(peripheral.entries[a], ad) } else { streamMonitorFound(peripheral.entries[a], ad) }
        }
    }

    /// The advertisement reaches the kernel, then bluetoothd, through the adapter of entry `d`.
    /// The kernel reports it to the management socket (Device Found) unless its discovery filter
    /// drops it; bluetoothd then applies its own checks. With a filter set, bluetoothd reports
    /// every advertisement's RSSI, else only changes of 8 dB or more.
    private func hear(_ d: Int, _ ad: Advertisement) {
        let a = devices[d].adapter
        let device = devices[d]
        let merged = MergedDiscovery(adapters[a].discoveryClients.values)
        // bluetoothd restarts a device's TemporaryTimeout on every report it hears, even one
        // the discovery filter then drops.
        devices[d].heardAt = .now
        guard merged.kernelReports(ad) else { return }
        streamDeviceFound(d, ad)
        guard merged.isDiscoverable(ad, address: device.address) else { return }
        adapters[a].discoveryFound.insert(d)

        if !device.exported { return firstHeard(d, ad) }

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
            if adapters[a].config.experimental { changed.append("AdvertisingFlags") }
        }
        if !changed.isEmpty { propertiesChanged(.device(d), Interface.device, changed) }
    }

    /// bluetoothd hears a device for the first time: its Device1, with what the advertisement said.
    func firstHeard(_ d: Int, _ ad: Advertisement) {
        devices[d].exported = true
        devices[d].temporary = true
        devices[d].name = ad.name
        devices[d].rssi = ad.rssi
        devices[d].txPower = ad.txPower
        devices[d].uuids = ad.uuids
        devices[d].manufacturerData = ad.manufacturerData
        devices[d].serviceData = ad.serviceData
        devices[d].advertisingFlags = ad.flags
        log("\(adapters[devices[d].adapter].config.id): discovered \(devices[d].address) \(ad.name ?? "(no name)") rssi \(ad.rssi)")
        export(.device(d))
        scheduleTemporaryRemoval(d)
    }

    func isConnecting(_ d: Int) -> Bool {
        if case .connecting = devices[d].link { return true }
        return false
    }

    /// The peripheral's next advertisement: the counter in its manufacturer data, and its
    /// sensor's latest payload (the RSSI is each adapter's).
    func nextAdvertisement(_ p: Int) -> Advertisement {
        let config = peripherals[p].config
        var data = config.manufacturerData.mapValues(\.bytes)
        if config.advertisingCounter {
            peripherals[p].advertisingCounter &+= 1
            for key in data.keys where !data[key]!.isEmpty { data[key]![data[key]!.count - 1] = peripherals[p].advertisingCounter }
        }
        var serviceData = config.serviceData.mapValues(\.bytes).merging(peripherals[p].advertisedServiceData) { $1 }
        if let sensor = peripherals[p].sensor {
            switch sensor.slot {
            case .serviceData(let uuid): serviceData[uuid] = sensor.payload
            case .manufacturerData(let company): data[company] = sensor.payload
            }
        }
        return Advertisement(name: config.name, uuids: config.uuids, manufacturerData: data,
                             serviceData: serviceData, txPower: config.txPower,
                             flags: config.advertisingFlags.bytes, rssi: config.rssi)
    }

    /// BlueZ's TemporaryTimeout: a device nobody connected to or paired with goes away.
    func scheduleTemporaryRemoval(_ d: Int) {
        let seconds = adapterConfig(d).temporaryTimeoutSec
        guard seconds > 0 else { return }
        let id = makeID()
        devices[d].temporaryTimer = id
        tasks.after(milliseconds: seconds * 1000) {
            await self.temporaryTimeout(d, id: id)
        }
    }

    private func temporaryTimeout(_ d: Int, id: Int) {
        guard devices[d].temporaryTimer == id, devices[d].temporary, devices[d].exported, devices[d].link == .idle else { return }
        let timeout = Duration.seconds(adapterConfig(d).temporaryTimeoutSec)
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
}
