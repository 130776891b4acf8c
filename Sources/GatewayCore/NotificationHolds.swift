import BLE
import Synchronization
import Threading

/// One BlueZ notification subscription serves every client: each client (a stream
/// subscription, or a kept hold that no connection carries) holds the characteristic; the
/// first hold starts notifications, the last release stops them.
package final class NotificationHolds: Sendable {
    package struct Key: Hashable, Sendable {
        package var device: BluetoothAddress
        package var characteristic: UInt16

        package init(device: BluetoothAddress, characteristic: UInt16) {
            self.device = device
            self.characteristic = characteristic
        }
    }

    private let central: Central
    private let counts = Mutex<[Key: Int]>([:])
    /// The kept holds (`keep`, `releaseKept`): one per characteristic.
    private let kept = Mutex<Set<Key>>([])
    /// Per characteristic, acquire and release run one after another, so that two first holds
    /// cannot both start notifications and a release cannot overtake the acquire it undoes.
    /// Other characteristics (and devices) do not wait for them. The line is as long as the
    /// clients that hold at once (the stream limit bounds it) and each turn but the first is a
    /// counter change, so nobody is refused for waiting.
    private let turns = SerialQueues<Key>(maxWaiting: .max, maxWait: nil)

    package init(central: Central) { self.central = central }

    package func count(_ key: Key) -> Int { counts.withLock { $0[key] ?? 0 } }

    /// Every characteristic held, with its number of holders.
    package func snapshot() -> [Key: Int] { counts.withLock { $0 } }

    /// Operations on `key` waiting for their turn (tests).
    package func waiting(_ key: Key) -> Int { turns.waiting(key) }

    /// Adds a hold; starts notifications if it is the first. On failure nothing is held.
    package func acquire(_ key: Key) async throws(BLEError) {
        try await serially(key) { await self.acquireNow(key) }.get()
    }

    /// Drops a hold; stops notifications when it was the last.
    package func release(_ key: Key) async {
        await serially(key) { await self.releaseNow(key) }
    }

    /// A kept hold: a client's hold that outlives its connection (and, through `Restoration`,
    /// a restart) until `releaseKept`; one hold however often it is asked for. In the same
    /// order as every other hold of it, so a second ask answers after the first has finished.
    package func keep(_ key: Key) async throws(BLEError) {
        try await serially(key) { () async -> Result<Void, BLEError> in
            guard !self.kept.withLock({ $0.contains(key) }) else { return .success(()) }
            let result = await self.acquireNow(key)
            if case .success = result { self.kept.withLock { _ = $0.insert(key) } }
            return result
        }.get()
    }

    /// A kept hold from an earlier run (state restoration): held whatever the device can do
    /// now. The central starts notifications when it can (now, at the device's next connection,
    /// or when the characteristic appears) and reports each outcome (`.resubscribed`).
    package func restoreKept(_ key: Key) async {
        await serially(key) {
            guard self.kept.withLock({ $0.insert(key).inserted }) else { return }
            let first = self.counts.withLock { c -> Bool in
                c[key, default: 0] += 1
                return c[key] == 1
            }
            if first { await self.central.keepNotifying(key.device, characteristic: key.characteristic) }
        }
    }

    /// Ends the kept hold, if there is one; streams may still hold the characteristic.
    package func releaseKept(_ key: Key) async {
        await serially(key) {
            guard self.kept.withLock({ $0.remove(key) != nil }) else { return }
            await self.releaseNow(key)
        }
    }

    // Only inside `serially(key)`.
    private func acquireNow(_ key: Key) async -> Result<Void, BLEError> {
        if count(key) == 0 {
            do {
                _ = try await central.setNotifyValue(true, key.device, characteristic: key.characteristic)
            } catch {
                return .failure(error)
            }
        }
        counts.withLock { $0[key, default: 0] += 1 }
        return .success(())
    }

    private func releaseNow(_ key: Key) async {
        let left = counts.withLock { counts -> Int in
            let n = max((counts[key] ?? 0) - 1, 0)
            counts[key] = n == 0 ? nil : n
            return n
        }
        if left == 0 { _ = try? await central.setNotifyValue(false, key.device, characteristic: key.characteristic) }
    }

    /// `work` in the key's turn. A release must happen even when the task that asks for it is
    /// cancelled (a stream that closed), so the turn is taken by a task of its own.
    private func serially<T: Sendable>(_ key: Key, _ work: @escaping @Sendable () async -> T) async -> T {
        await Task {
            // Not refused: no bound on waiting, and this task is never cancelled.
            await turns.run(key, work)!
        }.value
    }
}
