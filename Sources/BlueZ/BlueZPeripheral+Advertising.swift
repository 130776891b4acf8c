import BLE
import DBus

/// Advertisements: an `LEAdvertisement1` object each, registered with the adapter's
/// `LEAdvertisingManager1` (doc/advertising-api.txt); `Release` from BlueZ ends one's sending.
extension BlueZPeripheral {
    public func advertisements() async -> [RegisteredAdvertisement] {
        state.withLock { $0.advertisements.values.sorted { $0.id < $1.id } }
    }

    public func startAdvertising(_ advertisement: AdvertisementDefinition) async throws(BLEError) -> RegisteredAdvertisement {
        let adapter = try adapterName(advertisement.adapter)
        let id = state.withLock { s in
            defer { s.nextAdvertisement += 1 }
            s.advertisements[s.nextAdvertisement] = RegisteredAdvertisement(id: s.nextAdvertisement, adapter: adapter, definition: advertisement)
            return s.nextAdvertisement
        }
        adverts.add(LEAdvertisement.path(id), [LEAdvertisement.interface: LEAdvertisement.properties(advertisement)])
        let before = activeInstances(adapter)
        do throws(BLEError) {
            try await inTurn(adapter) { () async throws(BLEError) in try await self.registerAdvertisement(id, adapter) }
        } catch {
            state.withLock { _ = $0.advertisements.removeValue(forKey: id) }
            adverts.remove(under: LEAdvertisement.path(id))
            throw error
        }
        await roomFollows(adapter, apartFrom: before)
        log("peripheral: advertising on \(adapter) (id \(id))")
        return state.withLock { $0.advertisements[id] } ?? RegisteredAdvertisement(id: id, adapter: adapter, definition: advertisement)
    }

    public func stopAdvertising(_ id: Int) async throws(BLEError) {
        guard let advertisement = state.withLock({ $0.advertisements.removeValue(forKey: id) }) else {
            throw BLEError(.invalidParameters, "no advertisement \(id)")
        }
        if advertisement.registered, let adapterPath = BlueZ.root.child(advertisement.adapter) {
            let before = activeInstances(advertisement.adapter)
            do throws(BusError) {
                _ = try await link.call(.methodCall(destination: BlueZ.service, path: adapterPath, interface: LEAdvertisement.managerInterface,
                                                    member: "UnregisterAdvertisement", [.objectPath(LEAdvertisement.path(id))]),
                                        timeout: BusLink.callDeadline)
                await roomFollows(advertisement.adapter, apartFrom: before)
            } catch {
                // Gone already (bluetoothd or the adapter went away): nothing is sent.
                log("peripheral: unregistering advertisement \(id): \(error)")
            }
        }
        adverts.remove(under: LEAdvertisement.path(id))
        var stopped = advertisement
        stopped.registered = false
        events(.advertisement(stopped))
    }

    /// The adapter's `LEAdvertisingManager1` properties (its advertisement counts), as BlueZ last
    /// signalled them.
    func advertisingManager(_ adapterPath: ObjectPath) -> [String: Value]? {
        link.tree.properties(at: adapterPath, LEAdvertisement.managerInterface)
    }

    /// BlueZ's count of the adapter's advertisements (`ActiveInstances`), as last signalled.
    private func activeInstances(_ adapter: String) -> Int? {
        BlueZ.root.child(adapter).flatMap(advertisingManager)?["ActiveInstances"]?.integer
    }

    /// Waits, at most a second, until BlueZ's count of the adapter's advertisements is no longer
    /// `before`: it signals the count after it answered (un)registering, and a status read right
    /// after the answer would still show the old one.
    private func roomFollows(_ adapter: String, apartFrom before: Int?) async {
        guard let before, let path = BlueZ.root.child(adapter) else { return }
        _ = await room.wait(for: path, timeout: .seconds(1), current: { [self] in advertisingManager($0) }) {
            guard let active = $0?["ActiveInstances"]?.integer else { return nil }
            return active != before ? true : nil
        }
    }

    /// Registers an advertisement (again); `outOfSpace` when the adapter sends as many as it can.
    func registerAdvertisement(_ id: Int, _ adapter: String) async throws(BLEError) {
        guard let adapterPath = BlueZ.root.child(adapter) else { return }
        do throws(BusError) {
            _ = try await link.call(.methodCall(destination: BlueZ.service, path: adapterPath, interface: LEAdvertisement.managerInterface,
                                                member: "RegisterAdvertisement",
                                                [.objectPath(LEAdvertisement.path(id)), .emptyDictionary(key: "s", value: "v")]),
                                    timeout: BusLink.callDeadline)
        } catch where error.name == "org.bluez.Error.AlreadyExists" {
            // BlueZ kept it (an adapter power cycle): it is sent.
        } catch {
            throw advertisingError(error, adapter)
        }
        setRegistered(advertisement: id, true)
    }

    func advertisingError(_ error: BusError, _ adapter: String) -> BLEError {
        let mapped = ErrorMapping.map(error, context: .adapter)
        guard mapped.code == .cb(.outOfSpace) else { return mapped }
        let room = BlueZ.root.child(adapter).flatMap { LEAdvertisement.instances(advertisingManager($0)) }
        let limit = room.map { "its SupportedInstances: \($0.supported)" } ?? "its SupportedInstances"
        return BLEError(.outOfSpace, "adapter \(adapter) sends as many advertisements at once as it can (\(limit)); stop one first",
                        detail: error.description)
    }

    func setRegistered(advertisement id: Int, _ registered: Bool) {
        let changed = state.withLock { s -> RegisteredAdvertisement? in
            guard let a = s.advertisements[id], a.registered != registered else { return nil }
            s.advertisements[id]?.registered = registered
            return s.advertisements[id]
        }
        if let changed { events(.advertisement(changed)) }
    }

    /// BlueZ's calls on an advertisement object: `Release` (it no longer sends it).
    func handleAdvertisementCall(_ call: Message) {
        guard call.sender != nil, call.sender == link.tree.owner, call.member == "Release",
              let id = call.path.flatMap(LEAdvertisement.id) else {
            return adverts.answer(call, call.errorReply(BusError(name: "org.freedesktop.DBus.Error.UnknownMethod", message: "no such method")))
        }
        adverts.answer(call, call.reply())
        log("peripheral: BlueZ released advertisement \(id)")
        setRegistered(advertisement: id, false)
    }
}
