import BLE
import Synchronization
import Testing
@testable import BlueZ

/// Shared state for the operations under test.
final class Shared<T: Sendable>: Sendable {
    let value: Mutex<T>
    init(_ initial: T) { value = Mutex(initial) }
    func withLock<R>(_ body: (inout T) -> R) -> R { value.withLock { body(&$0) } }
}

@Suite struct DeviceQueuesTests {
    let device = BluetoothAddress("F0:00:00:00:00:01")!

    @Test func operationsOnOneDeviceRunOneAtATimeInOrder() async throws {
        let queues = DeviceQueues(limit: 32)
        let log = Shared<[String]>([])
        let running = Shared(0)
        let maxRunning = Shared(0)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<10 {
                group.addTask {
                    try await queues.run(device) { () async throws(BLEError) in
                        let now = running.withLock { $0 += 1; return $0 }
                        maxRunning.withLock { $0 = max($0, now) }
                        try? await Task.sleep(for: .milliseconds(5))
                        log.withLock { $0.append("op\(i)") }
                        running.withLock { $0 -= 1 }
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(maxRunning.withLock { $0 } == 1)
        #expect(log.withLock { $0.count } == 10)
    }

    @Test func aFullQueueRefusesAtOnce() async throws {
        let queues = DeviceQueues(limit: 2)
        let release = AsyncStream.makeStream(of: Void.self)
        let started = AsyncStream.makeStream(of: Void.self)
        // One operation runs and blocks; two wait; the fourth is refused.
        let blocker = Task {
            try await queues.run(device) { () async throws(BLEError) in
                started.continuation.yield()
                for await _ in release.stream { break }
            }
        }
        var it = started.stream.makeAsyncIterator()
        _ = await it.next()
        let waiters = (0..<2).map { _ in Task { try await queues.run(device) { () async throws(BLEError) in } } }
        // Let both waiters reach the queue before the next one arrives.
        while queues.waiting(device) < 2 { await Task.yield() }
        await #expect(throws: BLEError.self) {
            try await queues.run(device) { () async throws(BLEError) in }
        }
        let other = BluetoothAddress("F0:00:00:00:00:02")!
        try await queues.run(other) { () async throws(BLEError) in }  // other devices are not held up
        release.continuation.yield()
        try await blocker.value
        for waiter in waiters { try await waiter.value }
    }
}
