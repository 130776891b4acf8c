import BLE
import DBus

/// What this side serves outlives bluetoothd and the adapter: when bluetoothd comes back (a new
/// owner of org.bluez) and when an adapter powers on or appears again, every service and
/// advertisement is registered again. Connections to a serving adapter that the central side did
/// not make are centrals of ours.
extension BlueZPeripheral {
    /// After BlueZ's objects were loaded: a new bluetoothd knows nothing of this side's
    /// registrations (`observe` marked them unserved when it left), so they are made again.
    func restoreAll() async {
        let adapters = state.withLock { s in Set(s.services.values.map(\.adapter) + s.advertisements.values.map(\.adapter)).sorted() }
        for adapter in adapters { await restore(adapter) }
    }

    /// Registers the adapter's application and the advertisements BlueZ does not send, if the
    /// adapter is there and powered. Each registration checks again in its turn: the adapter may
    /// have gone off while the restore waited (one that came late then registered an advertisement
    /// on an adapter already off, and after power came back there was nothing left to restore).
    func restore(_ adapter: String) async {
        guard isPowered(adapter) else { return }
        await restoreServices(adapter)
        let waiting = state.withLock { $0.advertisements.values.filter { $0.adapter == adapter && !$0.registered }.map(\.id).sorted() }
        for id in waiting {
            do throws(BLEError) {
                try await inTurn(adapter) { () async throws(BLEError) in
                    let wanted = self.state.withLock { $0.advertisements[id]?.registered == false }
                    guard wanted, self.isPowered(adapter) else { return }
                    try await self.registerAdvertisement(id, adapter)
                }
            } catch {
                log("peripheral: cannot advertise \(id) on \(adapter) again: \(error)")
            }
        }
    }

    /// Registers the adapter's application again with the services it has now, logging a failure.
    func restoreServices(_ adapter: String, changed: Bool = false) async {
        guard isPowered(adapter) else { return }
        do throws(BLEError) {
            try await registerInTurn(adapter, changed: changed, poweredOnly: true)
        } catch {
            log("peripheral: cannot register the services on \(adapter) again: \(error)")
        }
    }

    /// In the adapter's turn: registers its application, unless this bluetoothd serves every
    /// service of it already and none was removed (`changed`), or (`poweredOnly`, a restore) the
    /// adapter went off meanwhile.
    func registerInTurn(_ adapter: String, changed: Bool, poweredOnly: Bool = false) async throws(BLEError) {
        try await inTurn(adapter) { () async throws(BLEError) in
            if poweredOnly, !self.isPowered(adapter) { return }
            let served = self.state.withLock { s in
                s.applications.contains(adapter) && s.owner == self.link.tree.owner
                    && s.services.values.allSatisfy { $0.adapter != adapter || $0.registered }
            }
            guard changed || !served else { return }
            do throws(BusError) { try await self.registerApplication(adapter) } catch { throw ErrorMapping.map(error, context: .adapter) }
        }
    }

    private func isPowered(_ adapter: String) -> Bool {
        BlueZ.root.child(adapter).flatMap { link.tree.properties(at: $0, BlueZ.adapterInterface) }?["Powered"]?.bool == true
    }

    /// Nothing is served on the adapter now (it powered off or went away, or bluetoothd did).
    private func setUnserved(_ adapter: String) {
        setRegistered(services: adapter, false)
        let ids = state.withLock { $0.advertisements.values.filter { $0.adapter == adapter }.map(\.id).sorted() }
        for id in ids { setRegistered(advertisement: id, false) }
    }

    /// Every change to BlueZ's objects, in order (from the central's observer).
    func observe(_ change: ObjectTree.Change) {
        switch change {
        case .reloaded:
            // bluetoothd left (or another took its place): nothing of this side is served.
            let gone = state.withLock { s -> [String] in
                guard s.owner != nil, s.owner != link.tree.owner else { return [] }
                return Set(s.services.values.map(\.adapter) + s.advertisements.values.map(\.adapter)).sorted()
            }
            gone.forEach(setUnserved)
        case .added(let path, let interfaces):
            if interfaces[BlueZ.adapterInterface] != nil, serves(String(path.lastElement)) {
                Task { await self.restore(String(path.lastElement)) }
            }
            // A central BlueZ had not seen before appears connected.
            if interfaces[BlueZ.deviceInterface]?["Connected"]?.bool == true { centralChanged(path, true) }
        case .removed(let path, let interfaces):
            if interfaces.contains(BlueZ.adapterInterface) {
                let adapter = String(path.lastElement)
                _ = state.withLock { $0.applications.remove(adapter) }
                setUnserved(adapter)
            }
            // A central's device object can go without a Connected false (BlueZ drops a temporary one).
            if interfaces.contains(BlueZ.deviceInterface) { centralChanged(path, false) }
        case .properties(let path, let interface, let changed, _):
            if interface == BlueZ.adapterInterface, let powered = changed["Powered"]?.bool {
                let adapter = String(path.lastElement)
                guard serves(adapter) else { return }
                if powered {
                    Task { await self.restore(adapter) }
                } else {
                    setUnserved(adapter)
                }
            } else if interface == BlueZ.deviceInterface, let connected = changed["Connected"]?.bool {
                centralChanged(path, connected)
            } else if interface == LEAdvertisement.managerInterface {
                room.check(path: path, advertisingManager)
            }
        }
    }

    private func serves(_ adapter: String) -> Bool {
        state.withLock { s in s.services.values.contains { $0.adapter == adapter } || s.advertisements.values.contains { $0.adapter == adapter } }
    }

    /// A device on a serving adapter connected or disconnected.
    private func centralChanged(_ path: ObjectPath, _ connected: Bool) {
        guard let adapterPath = path.parent, let id = BlueZ.address(pathElement: path.lastElement) else { return }
        let adapter = String(adapterPath.lastElement)
        let told = state.withLock { s -> Bool in
            if connected {
                return s.services.values.contains { $0.adapter == adapter && $0.registered } && s.centrals.insert(path).inserted
            }
            return s.centrals.remove(path) != nil
        }
        guard told, !(connected && isOwnLink(path)) else {
            if told { _ = state.withLock { $0.centrals.remove(path) } }
            return
        }
        events(.central(id, adapter: adapter, connected: connected))
    }
}
