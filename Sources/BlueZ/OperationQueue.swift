import BLE
import Synchronization

/// Serialises the operations on one device: BlueZ answers `InProgress` to a second GATT
/// operation while one runs, and clients should never see that. Bounded: past `limit`
/// waiting operations a new one is refused at once.
final class DeviceQueues: Sendable {
    private let queues = Mutex<[BluetoothAddress: Queue]>([:])
    let limit: Int

    init(limit: Int = 32) { self.limit = limit }

    /// `@unchecked Sendable`: `users` is only touched under `DeviceQueues.queues`' lock.
    private final class Queue: @unchecked Sendable {
        struct State {
            var busy = false
            var waiting: [CheckedContinuation<Void, Never>] = []
        }
        /// Operations that hold this queue (running or waiting); guarded by the queues' lock.
        var users = 0
        let state = Mutex(State())
    }

    /// How many operations wait for `id` (for tests and logs).
    func waiting(_ id: BluetoothAddress) -> Int {
        queues.withLock { $0[id] }?.state.withLock { $0.waiting.count } ?? 0
    }

    /// Runs `body` when the device's earlier operations are done.
    func run<T: Sendable>(_ id: BluetoothAddress, _ body: () async throws(BLEError) -> T) async throws(BLEError) -> T {
        let queue = queues.withLock { queues -> Queue in
            let queue = queues[id] ?? Queue()
            queues[id] = queue
            queue.users += 1
            return queue
        }
        // A device nobody operates on keeps no queue (rotating private addresses are many).
        defer {
            queues.withLock { queues in
                queue.users -= 1
                if queue.users == 0 { queues[id] = nil }
            }
        }
        let admitted = await enter(queue)
        guard admitted else {
            throw BLEError(.outOfSpace, "\(limit) operations are already waiting for device \(id); retry later")  // HTTP 503
        }
        defer { leave(queue) }
        return try await body()
    }

    private func enter(_ queue: Queue) async -> Bool {
        enum Decision { case run, wait, refuse }
        let decision = queue.state.withLock { s -> Decision in
            if !s.busy { s.busy = true; return .run }
            return s.waiting.count >= limit ? .refuse : .wait
        }
        switch decision {
        case .run: return true
        case .refuse: return false
        case .wait:
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let runNow = queue.state.withLock { s -> Bool in
                    if !s.busy { s.busy = true; return true }
                    s.waiting.append(continuation)
                    return false
                }
                if runNow { continuation.resume() }
            }
            return true
        }
    }

    private func leave(_ queue: Queue) {
        let next = queue.state.withLock { s -> CheckedContinuation<Void, Never>? in
            if s.waiting.isEmpty { s.busy = false; return nil }
            return s.waiting.removeFirst()  // stays busy: handed over
        }
        next?.resume()
    }
}

/// The adapter's scan calls, one at a time (a one-slot `DeviceQueues` under a fixed key).
final class ScanCalls: Sendable {
    private let queue = DeviceQueues(limit: 64)
    private static let key = BluetoothAddress(bytes: [0, 0, 0, 0, 0, 0])!

    func run<T: Sendable>(_ body: () async throws(BLEError) -> T) async throws(BLEError) -> T {
        try await queue.run(Self.key, body)
    }
}
