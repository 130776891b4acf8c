import BLE
import Synchronization
import Testing
@testable import GatewayCore

@Suite struct ValueCacheTests {
    let key = ValueCache.Key(device: BluetoothAddress("F0:00:00:00:00:01")!, handle: 0x1d)
    let uuid = BluetoothUUID("2a19")!

    func update(_ value: [UInt8], handle: UInt16 = 0x1d) -> ValueUpdate {
        ValueUpdate(device: key.device, serviceHandle: 0x1b, serviceUUID: BluetoothUUID("180f")!,
                    characteristicHandle: handle, characteristicUUID: uuid, value: value)
    }

    @Test func valuesExpireAfterMaxAge() {
        let now = Mutex(ContinuousClock.now)
        let cache = ValueCache(clock: { now.withLock { $0 } })
        cache.keepIfNotification(update([1]))
        now.withLock { $0 += .seconds(30) }
        #expect(cache.entry(key, uuid: uuid, maxAge: .seconds(30))?.value.value == [1])
        #expect(cache.entry(key, uuid: uuid, maxAge: .seconds(29)) == nil)
        #expect(cache.entry(key, uuid: BluetoothUUID("2a37")!, maxAge: .seconds(60)) == nil)
    }

    @Test func aValueSignalledDuringAReadIsTheReads() async throws {
        let cache = ValueCache()
        let read = try await cache.reading(key, whole: true) { () async throws(BLEError) in
            cache.keepIfNotification(update([5]))
            return AttributeValue(handle: 0x1d, uuid: uuid, value: [5])
        }
        #expect(read.value == [5])
        #expect(cache.entry(key, uuid: uuid, maxAge: .seconds(60))?.origin == .read)
        cache.keepIfNotification(update([6]))
        #expect(cache.entry(key, uuid: uuid, maxAge: .seconds(60))?.origin == .notification)
    }

    @Test func aPartialReadIsNotKept() async throws {
        let cache = ValueCache()
        _ = try await cache.reading(key, whole: false) { () async throws(BLEError) in AttributeValue(handle: 0x1d, uuid: uuid, value: [5]) }
        #expect(cache.entry(key, uuid: uuid, maxAge: .seconds(60)) == nil)
    }

    @Test func theOldestValueMakesRoom() {
        let now = Mutex(ContinuousClock.now)
        let cache = ValueCache(capacity: 2, clock: { now.withLock { $0 } })
        for handle: UInt16 in 1...3 {
            cache.keepIfNotification(update([UInt8(handle)], handle: handle))
            now.withLock { $0 += .seconds(1) }
        }
        #expect(cache.count == 2)
        #expect(cache.entry(.init(device: key.device, handle: 1), uuid: uuid, maxAge: .seconds(60)) == nil)
        #expect(cache.entry(.init(device: key.device, handle: 3), uuid: uuid, maxAge: .seconds(60))?.value.value == [3])
    }
}
