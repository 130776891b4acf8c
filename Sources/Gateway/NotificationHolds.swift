import BLE
import Synchronization

/// One BlueZ notification subscription serves every client: each client (a stream
/// subscription, or the REST `POST .../notifications`) holds the characteristic; the first
/// hold starts notifications, the last release stops them.
final class NotificationHolds: Sendable {
    struct Key: Hashable, Sendable {
        var device: BluetoothAddress
        var characteristic: UInt16
    }

    private let central: Central
    private let counts = Mutex<[Key: Int]>([:])
    /// The REST API's own holds (`POST`/`DELETE .../notifications`): one per characteristic.
    private let restHolds = Mutex<Set<Key>>([])
    /// Per characteristic, acquire and release run one after another, so that two first holds
    /// cannot both start notifications and a release cannot overtake the acquire it undoes.
    /// Other characteristics (and devices) do not wait for them.
    private let tails = Mutex<[Key: Task<Void, Never>]>([:])

    init(central: Central) { self.central = central }

    func count(_ key: Key) -> Int { counts.withLock { $0[key] ?? 0 } }

    /// Adds a hold; starts notifications if it is the first. On failure nothing is held.
    func acquire(_ key: Key) async throws(BLEError) {
        let result: Result<Void, BLEError> = await serially(key) {
            if self.count(key) == 0 {
                do {
                    _ = try await self.central.setNotifyValue(true, key.device, characteristic: key.characteristic)
                } catch let error as BLEError {
                    return .failure(error)
                } catch {
                    return .failure(BLEError(.unknown, "\(error)"))
                }
            }
            self.counts.withLock { $0[key, default: 0] += 1 }
            return .success(())
        }
        try result.get()
    }

    /// Drops a hold; stops notifications when it was the last.
    func release(_ key: Key) async {
        await serially(key) {
            let left = self.counts.withLock { counts -> Int in
                let n = max((counts[key] ?? 0) - 1, 0)
                counts[key] = n == 0 ? nil : n
                return n
            }
            if left == 0 { _ = try? await self.central.setNotifyValue(false, key.device, characteristic: key.characteristic) }
        }
    }

    /// `POST .../notifications`: the REST API holds the characteristic (once).
    func holdForREST(_ key: Key) async throws(BLEError) {
        guard restHolds.withLock({ $0.insert(key).inserted }) else { return }
        do throws(BLEError) { try await acquire(key) } catch {
            restHolds.withLock { _ = $0.remove(key) }
            throw error
        }
    }

    /// `DELETE .../notifications`: the REST API lets go; streams may still hold it.
    func releaseForREST(_ key: Key) async {
        guard restHolds.withLock({ $0.remove(key) != nil }) else { return }
        await release(key)
    }

    private func serially<T: Sendable>(_ key: Key, _ work: @escaping @Sendable () async -> T) async -> T {
        let task = tails.withLock { tails -> Task<T, Never> in
            let previous = tails[key]
            let task = Task {
                await previous?.value
                return await work()
            }
            tails[key] = Task { _ = await task.value }
            return task
        }
        return await task.value
    }
}
