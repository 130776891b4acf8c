import BLE
import DBus
import FoundationEssentials
import Synchronization

/// Keeping devices connected (`autoReconnect`): after an unexpected disconnection, attempts on
/// the `ReconnectPolicy`'s schedule, each once the device has been heard advertising since.
extension Connector {
    // MARK: - Keeping devices connected

    func reconnectStatus(_ id: BluetoothAddress) -> ReconnectStatus? { kept.withLock { $0[id]?.status } }

    func startKeeping(_ id: BluetoothAddress) {
        let new = kept.withLock { k -> Bool in
            guard k[id] == nil else { return false }
            k[id] = Kept()
            return true
        }
        if new { publish(id) }
    }

    func stopKeeping(_ id: BluetoothAddress) {
        let entry = kept.withLock { $0.removeValue(forKey: id) }
        entry?.timer?.cancel()
        if entry != nil {
            list.setReconnect(id, nil)
            Task { await list.stopListening(id) }
        }
    }

    func publish(_ id: BluetoothAddress) { list.setReconnect(id, reconnectStatus(id)) }

    /// The link came up through this side: the count starts again.
    func linkRestored(_ id: BluetoothAddress) {
        kept.withLock { k in
            k[id]?.timer?.cancel()
            k[id]?.timer = nil
            k[id]?.attempt = 0
            k[id]?.lastError = nil
            k[id]?.nextAttempt = nil
            k[id]?.listening = false
            k[id]?.failedHeard = 0
        }
        if reconnectStatus(id) != nil {
            publish(id)
            Task { await list.stopListening(id) }
        }
    }

    /// A kept device lost its link: listen for it from now on and schedule an attempt, unless one
    /// is running (its own failure schedules the next).
    func linkLost(_ id: BluetoothAddress, _ error: BLEError) {
        let schedule = kept.withLock { k -> Bool in
            guard let entry = k[id] else { return false }
            return !entry.attempting && entry.timer == nil
        }
        if schedule { Task { await retryLater(id, after: error) } }
    }

    /// After a loss or a failed attempt: the device must be heard again before the next attempt,
    /// which the policy schedules.
    func retryLater(_ id: BluetoothAddress, after error: BLEError, delay: Double? = nil) async {
        await list.listen(id)
        // No longer kept meanwhile (a disconnect): its listening ends here too.
        guard reconnectStatus(id) != nil else { return await list.stopListening(id) }
        scheduleAttempt(id, after: error, delay: delay)
    }

    /// Kept devices waiting for their next attempt try now (Bluetooth just became usable: the
    /// caller saw the state turn poweredOn).
    func retrySoon(_ why: String) {
        let waiting = kept.withLock { k in k.filter { !$0.value.attempting && $0.value.timer != nil }.map(\.key) }
        for id in waiting.sorted() {
            log("\(id): trying again now: \(why)")
            scheduleAttempt(id, after: nil, delay: policy.first.lowerBound / 2, recount: false)
        }
    }

    /// `recount` false: the attempt already announced comes sooner (it is not another one).
    func scheduleAttempt(_ id: BluetoothAddress, after error: BLEError?, delay fixed: Double? = nil, recount: Bool = true) {
        let plan = kept.withLock { k -> (attempt: Int, delay: Double)? in
            guard var entry = k[id] else { return nil }
            entry.timer?.cancel()
            if recount || entry.attempt == 0 { entry.attempt += 1 }
            let delay = fixed ?? policy.delay(attempt: entry.attempt)
            if let error { entry.lastError = error }
            entry.nextAttempt = Date().addingTimeInterval(delay)
            entry.timer = Task { [weak self] in
                do { try await Task.sleep(for: .milliseconds(Int(delay * 1000))) } catch { return }
                await self?.attempt(id)
            }
            k[id] = entry
            return (entry.attempt, delay)
        }
        guard let plan else { return }
        publish(id)
        log("\(id): reconnect attempt \(plan.attempt) in \(Self.seconds(.milliseconds(Int(plan.delay * 1000))))"
            + (error.map { " after \($0.name): \($0.message)" } ?? ""))
        events(.reconnecting(id: id, attempt: plan.attempt, delay: .milliseconds(Int(plan.delay * 1000)), error: error))
    }

    func attempt(_ id: BluetoothAddress) async {
        let go = kept.withLock { k -> Bool in
            guard k[id] != nil else { return false }
            k[id]?.timer = nil
            k[id]?.nextAttempt = nil
            k[id]?.attempting = true
            return true
        }
        guard go else { return }
        publish(id)
        defer { kept.withLock { $0[id]?.attempting = false } }
        let started = ContinuousClock.now
        do throws(BLEError) {
            _ = try link.usableAdapter()
            guard await heardSinceLastTry(id) else { return }
            _ = try await connectOnce(id, timeout: Self.attemptTimeout)
            guard reconnectStatus(id) != nil else { return }  // disconnected meanwhile: the caller's wish wins
            log("\(id): reconnected")
            linkRestored(id)
            reconnected(id)
        } catch {
            guard reconnectStatus(id) != nil else { return }
            if ReconnectPolicy.isPermanent(error) {
                log("\(id): no more reconnect attempts: \(error)")
                stopKeeping(id)
                return
            }
            let failedHeard = kept.withLock { k -> Int in
                k[id]?.attempting = false
                k[id]?.failedHeard += 1
                return k[id]?.failedHeard ?? 0
            }
            // After an adapter reset, soon. The device had just been heard: the first failure
            // (the link dropped while it was being made, as bleak retries once) and one that
            // looks stuck (it never reached the radio: a second try tells a passing state from a
            // stuck one) are tried again as soon as a first attempt would be; else the policy's
            // growing delay.
            let delay: Double? = adapterReset.done(since: started) ? policy.first.lowerBound
                : failedHeard == 1 || looksStuck(id, error) ? policy.delay(attempt: 1) : nil
            await retryLater(id, after: error, delay: delay)
        }
    }

    /// Waits, for as long as it takes, until the device has been heard advertising since its link
    /// was lost or its last attempt failed (discovery runs meanwhile): the device that went out of
    /// range is connected when it is back, and no connection attempt waits in the kernel for a
    /// device that is not there. False when it is no longer kept.
    func heardSinceLastTry(_ id: BluetoothAddress) async -> Bool {
        let hearing = list.hearing
        if !hearing.isListened(id) { await list.listen(id) }
        guard !hearing.wasHeard(id) else { return true }
        setListening(id, true)
        defer { setListening(id, false) }
        log("\(id): waiting to hear it advertise before connecting")
        while !(await hearing.wait(id, within: .seconds(3600))) {
            guard reconnectStatus(id) != nil else { return false }
            if !hearing.isListened(id) { await list.listen(id) }
        }
        log("\(id): heard it advertise")
        return reconnectStatus(id) != nil
    }

    func setListening(_ id: BluetoothAddress, _ listening: Bool) {
        let changed = kept.withLock { k -> Bool in
            guard k[id] != nil, k[id]?.listening != listening else { return false }
            k[id]?.listening = listening
            return true
        }
        if changed { publish(id) }
    }
}
