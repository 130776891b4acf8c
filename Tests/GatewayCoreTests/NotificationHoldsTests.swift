import BLE
import Synchronization
import Testing
import Threading
@testable import GatewayCore
import GatewayTesting

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

    @Test func aKeptHoldIsOneHoldHoweverOftenItIsAskedFor() async throws {
        try await holds.keep(key)
        try await holds.keep(key)
        #expect(holds.count(key) == 1)
        #expect(central.notify.all == [on(key)])
        await holds.releaseKept(key)
        #expect(holds.count(key) == 0)
        #expect(central.notify.all == [on(key), off(key)])
    }

    /// Without a kept hold, `releaseKept` neither stops notifications nor takes a stream's hold.
    @Test func releasingWithoutAKeptHoldDoesNothing() async throws {
        await holds.releaseKept(key)
        #expect(central.notify.all == [])
        try await holds.acquire(key)
        await holds.releaseKept(key)
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
