import BLE
import Synchronization

/// Devices gattway listens for: a device whose link was lost is connected again only once it has
/// been heard advertising since (as bleak-retry-connector and Home Assistant do). A connection
/// attempt to a device that is not there leaves the kernel waiting for it, and with a controller
/// that misbehaves it can leave a stale link behind (see docs/running.md, "Recovery").
///
/// `heard` is called for every advertisement BlueZ signals, so it costs one atomic load while
/// nobody listens, one lock and a lookup otherwise.
final class Hearing: Sendable {
    /// Listening began at the link's loss, or when the last attempt failed.
    private struct Entry {
        /// The first advertisement heard since then.
        var heardAt: ContinuousClock.Instant?
        var waiters: [Int: CheckedContinuation<Bool, Never>] = [:]
    }

    private let entries = Mutex<(map: [BluetoothAddress: Entry], next: Int)>(([:], 0))
    private let count = Atomic<Int>(0)

    init() {}

    /// Whether any device is listened for: discovery must run meanwhile.
    var listening: Bool { count.load(ordering: .relaxed) > 0 }

    /// Listens for `id` from now on: what was heard before no longer counts.
    func listen(_ id: BluetoothAddress) {
        let (stale, total) = entries.withLock { e -> ([CheckedContinuation<Bool, Never>], Int) in
            let old = e.map[id].map { Array($0.waiters.values) } ?? []
            e.map[id] = Entry()
            return (old, e.map.count)
        }
        count.store(total, ordering: .relaxed)
        stale.forEach { $0.resume(returning: false) }
    }

    /// Stops listening for `id` (connected again, or no longer kept); whoever waits hears false.
    func forget(_ id: BluetoothAddress) {
        let (waiting, total) = entries.withLock { e -> ([CheckedContinuation<Bool, Never>], Int) in
            let waiting = e.map.removeValue(forKey: id).map { Array($0.waiters.values) } ?? []
            return (waiting, e.map.count)
        }
        count.store(total, ordering: .relaxed)
        waiting.forEach { $0.resume(returning: false) }
    }

    /// An advertisement of `id` was received.
    func heard(_ id: BluetoothAddress) {
        guard listening else { return }
        let waiting = entries.withLock { e -> [CheckedContinuation<Bool, Never>] in
            guard var entry = e.map[id] else { return [] }
            if entry.heardAt == nil { entry.heardAt = .now }
            let waiting = Array(entry.waiters.values)
            entry.waiters = [:]
            e.map[id] = entry
            return waiting
        }
        waiting.forEach { $0.resume(returning: true) }
    }

    /// Whether someone waits for `id` (for tests).
    func hasWaiters(_ id: BluetoothAddress) -> Bool { entries.withLock { $0.map[id]?.waiters.isEmpty == false } }

    /// Whether `id` is listened for.
    func isListened(_ id: BluetoothAddress) -> Bool { entries.withLock { $0.map[id] != nil } }

    /// Whether `id` has been heard since listening began (false when it is not listened for).
    func wasHeard(_ id: BluetoothAddress) -> Bool { entries.withLock { $0.map[id]?.heardAt != nil } }

    /// Waits until `id` is heard (true at once if it was since listening began), at most `limit`;
    /// false when the time is up or nobody listens for it.
    func wait(_ id: BluetoothAddress, within limit: Duration) async -> Bool {
        let key = entries.withLock { e -> Int? in
            guard e.map[id] != nil else { return nil }
            e.next += 1
            return e.next
        }
        guard let key else { return false }
        let timer = Task { [weak self] in
            try? await Task.sleep(for: limit)
            self?.resolve(id, key, false)
        }
        defer { timer.cancel() }
        return await withCheckedContinuation { continuation in
            let answer = entries.withLock { e -> Bool? in
                guard var entry = e.map[id] else { return false }
                if entry.heardAt != nil { return true }
                entry.waiters[key] = continuation
                e.map[id] = entry
                return nil
            }
            if let answer { continuation.resume(returning: answer) }
        }
    }

    private func resolve(_ id: BluetoothAddress, _ key: Int, _ answer: Bool) {
        entries.withLock { $0.map[id]?.waiters.removeValue(forKey: key) }?.resume(returning: answer)
    }
}
