import BLE
import DBus

/// bluetoothd 5.66's GATT client and its cache (shared/gatt-client.c, src/gatt-client.c): what
/// it discovers of the peripheral's table, when it discovers again, and the D-Bus objects that
/// show the cache. The peripheral's own table changes with `SetServices` (a firmware update).
extension Engine {
    /// At each connection the GATT client discovers, unless its cache holds a Database Hash and
    /// the peripheral answers the same one (the cache is then taken as it is, stale or not). A
    /// server that owes a bonded client a Service Changed indication sends it now.
    func discoverAtConnection(_ d: Int) {
        let cache = devices[d].gatt
        let hashMatches = cache.hash != nil && cache.hash == peripherals[devices[d].peer].server.databaseHash
        let indicated = devices[d].serviceChangedPending
        devices[d].serviceChangedPending = false
        guard !cache.discovered || !hashMatches || indicated else { return }
        if cache.discovered { log("\(devices[d].address): discovering services again (\(indicated ? "Service Changed" : "no matching Database Hash"))") }
        if rediscover(d) { updateUUIDs(d) }
    }

    /// A discovery of the whole handle range against the cache, as the GATT client does it: a
    /// cached service with the same handles, UUID and kind as one the peripheral declares is
    /// kept with its characteristics (changed or not); the others are dropped (their objects
    /// withdrawn) and the peripheral's new services stored (exported by the caller). Returns
    /// whether the cache changed.
    @discardableResult
    func rediscover(_ d: Int) -> Bool {
        let table = peripherals[devices[d].peer].server.table
        let before = devices[d].gatt.present
        var kept: Set<Int> = []
        var added: [Int] = []
        for (s, service) in table.services.enumerated() {
            if let match = before.first(where: { devices[d].gatt.matches($0, service) }) { kept.insert(match) } else { added.append(s) }
        }
        let dropped = before.filter { !kept.contains($0) }
        for s in dropped { dropCachedService(d, s) }
        for s in added { devices[d].gatt.add(s, of: table, under: devices[d].path) }
        devices[d].gatt.markDiscovered()
        // Read once the discovery is done, from the peripheral (read_db_hash).
        devices[d].gatt.hash = devices[d].gatt.has(AttributeTable.databaseHash) ? peripherals[devices[d].peer].server.databaseHash : nil
        return !dropped.isEmpty || !added.isEmpty
    }

    /// A cached service the peripheral no longer has: requests on it fail, its notify sessions
    /// end, its objects are withdrawn (children first).
    private func dropCachedService(_ d: Int, _ s: Int) {
        for c in devices[d].gatt.services[s].characteristics {
            failPendingRequests(d, characteristic: c)
            for x in devices[d].gatt.characteristics[c].descriptors {
                failPendingRequests(d, descriptor: x)
                unexport(.descriptor(d, x))
            }
            unexport(.characteristic(d, c))
            devices[d].gatt.characteristics[c].state = CharacteristicState()
        }
        unexport(.service(d, s))
        devices[d].gatt.remove(s)
    }

    /// Exports these cached services with their characteristics and descriptors, those not exported yet.
    func exportGATT(_ d: Int, _ services: some Sequence<Int>) {
        for s in services {
            guard let path = path(of: .service(d, s)), objects[path] == nil else { continue }
            export(.service(d, s))
            for c in devices[d].gatt.services[s].characteristics {
                export(.characteristic(d, c))
                for x in devices[d].gatt.characteristics[c].descriptors { export(.descriptor(d, x)) }
            }
        }
    }

    /// bluetoothd drops its cache of the device: every GATT object is withdrawn (children first,
    /// as it unregisters them), and the next connection discovers anew. With `keepCache` only
    /// the objects go (bluetoothd's storage keeps a bonded device's cache).
    func withdrawGATT(_ d: Int, keepCache: Bool = false) {
        for s in devices[d].gatt.present {
            for c in devices[d].gatt.services[s].characteristics {
                for x in devices[d].gatt.characteristics[c].descriptors { unexport(.descriptor(d, x)) }
                unexport(.characteristic(d, c))
            }
            unexport(.service(d, s))
        }
        if !keepCache { devices[d].gatt = GATTCache() }
        devices[d].gattExported = false
    }

    /// Device1.UUIDs follows the cached primary services once they were resolved.
    func updateUUIDs(_ d: Int) {
        guard devices[d].servicesResolvedOnce else { return }
        var primaries: [BluetoothUUID] = []
        for s in devices[d].gatt.present where devices[d].gatt.services[s].primary {
            let uuid = devices[d].gatt.services[s].uuid
            if !primaries.contains(uuid) { primaries.append(uuid) }
        }
        let uuids = primaries.sorted { $0.uuidString < $1.uuidString }
        if uuids != devices[d].uuids {
            devices[d].uuids = uuids
            propertiesChanged(.device(d), Interface.device, ["UUIDs"])
        }
    }

    /// `SetServices`: the peripheral runs a new firmware with these services (new values, its
    /// generators restarted). With `indicate`, it sends Service Changed to each central that
    /// registered for it (its cache has 2A05): one connected discovers again at once; a bonded
    /// one that is away hears it at its next connection; an unbonded one never does. Otherwise
    /// the caches stay as they are until a connection finds another Database Hash, or the
    /// device is removed.
    func installFirmware(_ p: Int, _ services: [SimulatorConfiguration.Service], indicate: Bool) {
        peripherals[p].server.install(AttributeTable(services))
        startGenerators(p)
        log("\(peripherals[p].address): new firmware, \(services.count) services\(indicate ? ", Service Changed indicated" : "")")
        guard indicate else { return }
        let registered = peripherals[p].entries.filter { devices[$0].gatt.has(AttributeTable.serviceChanged) }
        if registered.isEmpty {
            log("\(peripherals[p].address): bluetoothd has no Service Changed characteristic of it cached, so hears nothing")
        }
        for d in registered {
            if devices[d].hasGATT {
                if rediscover(d) {
                    exportGATT(d, devices[d].gatt.present)
                    updateUUIDs(d)
                }
            } else if devices[d].bonded {
                devices[d].serviceChangedPending = true
            }
        }
    }
}
