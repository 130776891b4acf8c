import BLE
import Synchronization
import Testing
import Threading
@testable import Gateway

/// `setNotifyValue` as `FakeCentral` answers it: every call recorded in order, and the next call
/// can be told to fail, or to wait at a gate until the test opens it.
final class NotifyCalls: Sendable {
    struct Call: Equatable, Sendable, CustomStringConvertible {
        var enabled: Bool
        var device: BluetoothAddress
        var characteristic: UInt16
        var description: String { "\(enabled ? "on" : "off") \(device) \(handleText(characteristic))" }
    }

    private struct State {
        var calls: [Call] = []
        var failNext: BLEError?
        var gateNext = false
        var parked: [CheckedContinuation<Void, Never>] = []
    }
    private let state = Mutex(State())

    /// Every call so far, in the order they were made (recorded as they start).
    var all: [Call] { state.withLock { $0.calls } }
    /// Calls waiting at the gate.
    var atGate: Int { state.withLock { $0.parked.count } }

    /// The next call fails with `error` (it is still recorded).
    func failNextCall(with error: BLEError) { state.withLock { $0.failNext = error } }
    /// The next call waits, once recorded, until `openGate()`.
    func gateNextCall() { state.withLock { $0.gateNext = true } }
    func openGate() {
        for continuation in state.withLock({ s in defer { s.parked = [] }; return s.parked }) { continuation.resume() }
    }

    func call(_ enabled: Bool, _ device: BluetoothAddress, characteristic: UInt16) async throws(BLEError) -> Bool {
        let (gated, failure) = state.withLock { s -> (Bool, BLEError?) in
            s.calls.append(Call(enabled: enabled, device: device, characteristic: characteristic))
            defer { (s.gateNext, s.failNext) = (false, nil) }
            return (s.gateNext, s.failNext)
        }
        if gated {
            await withCheckedContinuation { continuation in state.withLock { $0.parked.append(continuation) } }
        }
        if let failure { throw failure }
        return enabled
    }
}

/// Polls `condition` (yielding, then every millisecond) until it holds or `timeout` passes; returns
/// whether it held. For states that have no event to wait for.
func eventually(within timeout: Duration = .seconds(5), _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while !condition() {
        if ContinuousClock.now >= deadline { return false }
        await Task.yield()
        try? await Task.sleep(for: .milliseconds(1))
    }
    return true
}

@Suite struct NotificationHoldsTests {
    let central = FakeCentral()
    let holds: NotificationHolds
    let key = NotificationHolds.Key(device: BluetoothAddress("F0:00:00:00:00:01")!, characteristic: 0x0032)
    let otherKey = NotificationHolds.Key(device: BluetoothAddress("F0:00:00:00:00:02")!, characteristic: 0x0032)

    init() { holds = NotificationHolds(central: central) }

    func on(_ key: NotificationHolds.Key) -> NotifyCalls.Call { .init(enabled: true, device: key.device, characteristic: key.characteristic) }
    func off(_ key: NotificationHolds.Key) -> NotifyCalls.Call { .init(enabled: false, device: key.device, characteristic: key.characteristic) }

    /// Operations waiting behind the one in the key's turn: the tests below must know that a
    /// second operation is queued behind a gated one before they open the gate, or they could
    /// not tell a queue from a late arrival.
    func waitingForTurn(_ key: NotificationHolds.Key) -> Int? { holds.waiting(key) }

    @Test func firstHoldStartsNotificationsAndTheLastReleaseStopsThem() async throws {
        try await holds.acquire(key)
        #expect(central.notify.all == [on(key)])
        try await holds.acquire(key)
        try await holds.acquire(key)
        #expect(central.notify.all == [on(key)])
        #expect(holds.count(key) == 3)
        await holds.release(key)
        await holds.release(key)
        #expect(central.notify.all == [on(key)])
        #expect(holds.count(key) == 1)
        await holds.release(key)
        #expect(central.notify.all == [on(key), off(key)])
        #expect(holds.count(key) == 0)
    }

    /// An acquire of `key` whose call to the central waits at the gate, then `next` on the same
    /// key; the gate opens once `next` waits for its turn (after `whileQueued`). Returns when both are done.
    func behindAGatedAcquire(_ next: @escaping @Sendable () async throws -> Void, whileQueued: () -> Void = {}) async throws {
        let (holds, key) = (self.holds, self.key)
        central.notify.gateNextCall()
        let first = Task { try await holds.acquire(key) }
        #expect(await eventually { central.notify.atGate == 1 })
        let second = Task { try await next() }
        #expect(await eventually { waitingForTurn(key) == 1 })
        whileQueued()
        central.notify.openGate()
        try await first.value
        try await second.value
    }

    @Test func twoFirstHoldsAtOnceStartNotificationsOnce() async throws {
        let (holds, key) = (self.holds, self.key)
        try await behindAGatedAcquire { try await holds.acquire(key) }
        #expect(central.notify.all == [on(key)])
        #expect(holds.count(key) == 2)
    }

    @Test func aReleaseDoesNotOvertakeTheAcquireItUndoes() async throws {
        let (holds, key) = (self.holds, self.key)
        try await behindAGatedAcquire({ await holds.release(key) }, whileQueued: {
            #expect(central.notify.all == [on(key)])
        })
        #expect(central.notify.all == [on(key), off(key)])
        #expect(holds.count(key) == 0)
    }

    @Test func aFailedFirstHoldHoldsNothingAndTheNextOneTriesAgain() async throws {
        central.notify.failNextCall(with: BLEError(.notConnected, "the device went away"))
        let error = await #expect(throws: BLEError.self) { try await holds.acquire(key) }
        #expect(error?.code == .cb(.notConnected))
        #expect(holds.count(key) == 0)
        try await holds.acquire(key)
        #expect(central.notify.all == [on(key), on(key)])
        #expect(holds.count(key) == 1)
        // Nothing was held by the failed one: one release stops notifications.
        await holds.release(key)
        #expect(central.notify.all == [on(key), on(key), off(key)])
    }

    @Test func theRESTHoldIsOneHoldHoweverOftenItIsTaken() async throws {
        try await holds.holdForREST(key)
        try await holds.holdForREST(key)
        #expect(holds.count(key) == 1)
        #expect(central.notify.all == [on(key)])
        await holds.releaseForREST(key)
        #expect(holds.count(key) == 0)
        #expect(central.notify.all == [on(key), off(key)])
    }

    /// Without a REST hold, `releaseForREST` neither stops notifications nor takes a stream's hold.
    @Test func aRESTReleaseWithoutARESTHoldDoesNothing() async throws {
        await holds.releaseForREST(key)
        #expect(central.notify.all == [])
        try await holds.acquire(key)
        await holds.releaseForREST(key)
        #expect(holds.count(key) == 1)
        #expect(central.notify.all == [on(key)])
    }

    /// A first hold that takes long (BlueZ answers slowly) keeps no other characteristic waiting,
    /// of the same device or another.
    @Test func otherCharacteristicsDoNotWait() async throws {
        let holds = self.holds
        let sameDevice = NotificationHolds.Key(device: key.device, characteristic: 0x0015)
        central.notify.gateNextCall()
        let gated = Task { [key] in try await holds.acquire(key) }
        #expect(await eventually { central.notify.atGate == 1 })
        var others: [Task<Void, any Error>] = []
        var done: [Bool] = []
        for other in [sameDevice, otherKey] {
            others.append(Task { try await holds.acquire(other) })
            done.append(await eventually { holds.count(other) == 1 })
        }
        let keyStillGated = holds.count(key) == 0
        central.notify.openGate()
        try await gated.value
        for other in others { try await other.value }
        #expect(done == [true, true], "an acquire of another characteristic waited for the gated one")
        #expect(keyStillGated)
        #expect(central.notify.all == [on(key), on(sameDevice), on(otherKey)])
        #expect(holds.count(key) == 1)
    }
}
