import BLE
import Synchronization

/// The last value of each characteristic and descriptor, as a read answered it or the device
/// notified it, so that a poller's `?maxAge=` is answered without the radio when the value is
/// young enough. Fed by every whole read the gateway makes and by the central's value events
/// (which the blocklist has already filtered). Also keeps each device's tree as last seen
/// connected, so that attributes can be named while the device is not.
///
/// Bounded: at most `capacity` values (a new one pushes out the oldest) and `deviceCapacity`
/// trees (likewise).
package final class ValueCache: Sendable {
    /// Where a kept value came from.
    package enum Origin: Sendable, Equatable { case read, notification }

    package struct Entry: Sendable, Equatable {
        package var value: AttributeValue
        package var at: ContinuousClock.Instant
        package var origin: Origin
    }

    /// Handles are unique among a device's attributes, characteristics and descriptors alike.
    package struct Key: Hashable, Sendable {
        var device: BluetoothAddress
        var handle: UInt16
    }

    private struct State {
        var entries: [Key: Entry] = [:]
        /// Reads under way per attribute. BlueZ signals the read value (the Value property,
        /// flushed) before it replies, so a value event meanwhile is that read's, not a
        /// notification; the read records it when it returns.
        var reading: [Key: Int] = [:]
        var trees: [BluetoothAddress: (tree: GATTSnapshot, at: ContinuousClock.Instant)] = [:]
    }

    private let state = Mutex(State())
    package let capacity: Int
    package let deviceCapacity: Int
    private let clock: @Sendable () -> ContinuousClock.Instant

    package init(capacity: Int = 4096, deviceCapacity: Int = 256, clock: @escaping @Sendable () -> ContinuousClock.Instant = { .now }) {
        self.capacity = capacity
        self.deviceCapacity = deviceCapacity
        self.clock = clock
    }

    package var now: ContinuousClock.Instant { clock() }

    /// `read` runs as a read of `key`: what it returns is kept (when `whole`: a read from an
    /// offset answers only part of the value).
    package func reading(_ key: Key, whole: Bool, _ read: () async throws(BLEError) -> AttributeValue) async throws(BLEError) -> AttributeValue {
        state.withLock { $0.reading[key, default: 0] += 1 }
        defer {
            state.withLock { s in
                let left = (s.reading[key] ?? 1) - 1
                s.reading[key] = left > 0 ? left : nil
            }
        }
        let value = try await read()
        if whole { store(key, Entry(value: value, at: now, origin: .read)) }
        return value
    }

    /// Whether a value event is a notification, which is kept here; false (nothing kept) while
    /// a read of the attribute is under way: the event is that read's own value, which the read
    /// keeps.
    @discardableResult
    package func keepIfNotification(_ update: ValueUpdate) -> Bool {
        let key = Key(device: update.device, handle: update.characteristicHandle)
        guard state.withLock({ $0.reading[key] == nil }) else { return false }
        let value = AttributeValue(handle: update.characteristicHandle, uuid: update.characteristicUUID, value: update.value)
        store(key, Entry(value: value, at: now, origin: .notification))
        return true
    }

    /// The value kept for `key` if it is at most `maxAge` old and still of attribute `uuid` (a
    /// device whose tree changed may have put another attribute at the handle).
    package func entry(_ key: Key, uuid: BluetoothUUID, maxAge: Duration) -> Entry? {
        let now = self.now
        return state.withLock { s in
            guard let e = s.entries[key], e.value.uuid == uuid, now - e.at <= maxAge else { return nil }
            return e
        }
    }

    package func keep(_ tree: GATTSnapshot, for device: BluetoothAddress) {
        let now = self.now
        state.withLock { s in
            s.trees[device] = (tree, now)
            if s.trees.count > deviceCapacity, let oldest = s.trees.min(by: { $0.value.at < $1.value.at })?.key {
                s.trees[oldest] = nil
            }
        }
    }

    package func tree(_ device: BluetoothAddress) -> GATTSnapshot? { state.withLock { $0.trees[device]?.tree } }

    package var count: Int { state.withLock { $0.entries.count } }

    private func store(_ key: Key, _ entry: Entry) {
        state.withLock { s in
            s.entries[key] = entry
            if s.entries.count > capacity, let oldest = s.entries.min(by: { $0.value.at < $1.value.at })?.key {
                s.entries[oldest] = nil
            }
        }
    }
}
