import BLE
import DBus

/// What makes a connection made again hold: BlueZ's workarounds (a lost signal, a link without
/// services ended), and the last step, the adapter reset after connects that fail as a stale
/// link makes them fail.
extension Connector {
    /// Connect failures that say a link to the device is still held below BlueZ's view of it:
    /// the kernel refuses a new one (bluetoothd's "Input/output error" for EBUSY, "Operation
    /// already in progress"), or BlueZ still works on an attempt that will not end. A connect
    /// that timed out although the device was just heard counts too.
    func looksStuck(_ id: BluetoothAddress, _ error: BLEError) -> Bool {
        if error.code == .cb(.connectionTimeout) { return discovery.hearing.wasHeard(id) }
        guard error.code == .cb(.connectionFailed), let detail = error.detail?.lowercased() else { return false }
        return Self.stuckSignatures.contains { detail.contains($0) }
    }

    static let stuckSignatures = ["input/output error", "operation already in progress", "device or resource busy",
                                  "org.bluez.error.inprogress", "org.bluez.error.alreadyconnected"]

    /// Counts a failed connect; the second in a row that looks stuck resets the adapter (which
    /// the error then says).
    func failedConnect(_ id: BluetoothAddress, _ error: BLEError, on adapter: ObjectPath?) async -> BLEError {
        guard let adapter else { return error }
        let stuck = looksStuck(id, error)
        let key = Strike(device: id, adapter: adapter)
        let count = strikes.withLock { s -> Int in
            s[key] = stuck ? (s[key] ?? 0) + 1 : nil
            return s[key] ?? 0
        }
        guard count >= 2 else { return error }
        strikes.withLock { _ = $0.removeValue(forKey: key) }
        let what = await adapterReset.reset(adapter, because: "\(id) failed to connect \(count) times in a row as it does while a stale link "
                                            + "is left below BlueZ (\(error.detail ?? error.message))")
        var told = error
        told.message += "; \(what)"
        return told
    }

    // MARK: - Workarounds

    /// Waits for ServicesResolved=true (true), a disconnection (false) or the deadline (nil).
    /// A lost signal is not fatal: the properties are read again every second.
    func waitUntilResolved(_ path: ObjectPath, deadline: ContinuousClock.Instant) async -> Bool? {
        let tree = self.tree
        while ContinuousClock.now < deadline {
            let slice = min(deadline - ContinuousClock.now, .seconds(1))
            let decided = await waiters.wait(for: path, timeout: slice, current: { tree.properties(at: $0, BlueZ.deviceInterface) }) { props in
                guard let props else { return false }
                if props["ServicesResolved"]?.bool == true { return true }
                if props["Connected"]?.bool == false { return false }
                return nil
            }
            if let decided { return decided }
            await refreshDevice(path)
        }
        return nil
    }

    /// After a pairing: waits until a connected device's services are resolved, by `deadline`
    /// and within `servicesDeadline`. bluetoothd answers a `Pair` that had to connect (the link
    /// a refused authenticated read dropped) before it has resolved the new link's services: in
    /// the lab ServicesResolved came 0.02-0.14 s after the reply, and an operation sent on the
    /// answer could find the device not ready (`notConnected`). A device that is not connected,
    /// or is ready, is answered at once; one whose services do not come is answered as it is
    /// (the pairing itself succeeded), the log saying so.
    func settleAfterPairing(_ id: BluetoothAddress, by deadline: ContinuousClock.Instant) async {
        guard let path = try? index.devicePath(id),
              tree.properties(at: path, BlueZ.deviceInterface)?["Connected"]?.bool == true, !isReady(path) else { return }
        let started = ContinuousClock.now
        switch await waitUntilResolved(path, deadline: min(deadline, started + Self.servicesDeadline)) {
        case true?:
            // As after a connect: ServicesResolved can come before every object is exported (bluez#1489).
            await link.reload()
            log("\(id): paired; its services resolved again \(Self.seconds(ContinuousClock.now - started)) after the pairing's answer")
        case false?:
            log("\(id): paired, but the link went down before its services were resolved again")
        case nil:
            log("\(id): paired, but its services were not resolved again within \(Self.seconds(ContinuousClock.now - started))")
        }
    }

    /// Disconnect, by this side's wish (`disconnecting` tells that end from a lost link), then
    /// the device's properties read again. In the caller's turn.
    func endLink(_ id: BluetoothAddress, _ path: ObjectPath) async throws(BLEError) {
        disconnecting.withLock { _ = $0.insert(id) }
        do throws(BusError) {
            _ = try await link.call(.methodCall(destination: BlueZ.service, path: path, interface: BlueZ.deviceInterface,
                                                member: "Disconnect"), timeout: Self.disconnectDeadline)
        } catch {
            throw ErrorMapping.map(error, context: .device)
        }
        await refreshDevice(path)
    }

    /// Cancels a connection attempt that ran out of time: BlueZ stops trying on Disconnect.
    func abortConnection(_ path: ObjectPath) async {
        if let id = tree.properties(at: path, BlueZ.deviceInterface).flatMap(DeviceProperties.address) {
            disconnecting.withLock { _ = $0.insert(id) }
        }
        _ = try? await link.call(.methodCall(destination: BlueZ.service, path: path, interface: BlueZ.deviceInterface,
                                                   member: "Disconnect"), timeout: Self.disconnectDeadline)
        await refreshDevice(path)
    }
}
