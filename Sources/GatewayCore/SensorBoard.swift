import BLE
import FoundationEssentials
import Sensors
import Synchronization

/// The latest sensor reading of each device, decoded from what it advertises.
///
/// Fed with every advertisement the central reports (`advertisement`, and `advertisementChanged`
/// while a scan without duplicates runs) and with every device the gateway lists, so that a
/// listing never shows a reading older than the device's advertisement. A device's advertisement
/// is decoded once per change: the same bytes heard again only move `heard` on. A new reading
/// (other bytes: a new packet) goes to `publish`, marked `changed` when a measurement (or the
/// format, or what became of its encryption) differs from the last one's; a snapshot older than
/// the one already taken (a listing read before the event that replaced it) is ignored.
///
/// The bind keys can be replaced while it runs (SIGHUP): each device's advertisement is then
/// decoded again when next heard or listed.
///
/// Bounded: at most `limit` devices are kept (a device no decoder would look at is kept only
/// once it was a sensor); past it the one heard longest ago makes room.
package final class SensorBoard: Sendable {
    package static let limit = 4096

    /// A new reading, as the `sensor` stream event reports it.
    package struct Update: Sendable {
        package var device: BluetoothAddress
        package var reading: SensorReading
        package var rssi: Int?
        /// A measurement, the format or the encryption outcome differs from the previous reading's
        /// (a first reading counts as changed); false for a new packet with the same values.
        var changed: Bool
    }

    /// A device's current reading and when it was last heard.
    package struct Current: Sendable {
        package var reading: SensorReading
        package var heard: Date

        package init(reading: SensorReading, heard: Date) {
            self.reading = reading
            self.heard = heard
        }
    }

    private struct Entry {
        /// What `reading` was decoded from; nil: decode again (the keys changed).
        var advertisement: AdvertisementData?
        /// nil: no decoder knows the advertisement.
        var reading: SensorReading?
        var heard: Date
    }

    private struct State {
        var entries: [BluetoothAddress: Entry] = [:]
        var replays = ReplayGuard()
        var keys: SensorKeys
    }

    private let state: Mutex<State>
    private let publish: @Sendable (Update) -> Void

    package init(keys: SensorKeys, publish: @escaping @Sendable (Update) -> Void) {
        state = Mutex(State(keys: keys))
        self.publish = publish
    }

    /// Decodes with `keys` from now on. Readings already taken stay until their device is heard
    /// again; the replay guard's counters are kept (a key change is no reason to accept an old counter).
    package func replaceKeys(_ keys: SensorKeys) {
        state.withLock { s in
            s.keys = keys
            for id in s.entries.keys { s.entries[id]?.advertisement = nil }
        }
    }

    package var keyCount: Int { state.withLock { $0.keys.count } }

    /// Takes what the central says of a device; its reading, if it advertises one.
    @discardableResult
    package func hear(_ info: PeripheralInfo) -> Current? { hearing(info).current }

    /// As `hear`, and whether the reading is a changed one, published now as an `Update` that
    /// every `sensor` event stream gets: a caller that publishes readings itself leaves that one to the event.
    package func hearing(_ info: PeripheralInfo) -> (current: Current?, changed: Bool) {
        let heard = info.lastSeen ?? Date()
        // Most advertisements are no sensor's: those of devices never seen as one go no further.
        let mayDecode = Sensors.mayDecode(info.advertisement)
        let (current, update) = state.withLock { s -> (Current?, Update?) in
            if var entry = s.entries[info.id] {
                guard heard >= entry.heard else { return (entry.reading.map { Current(reading: $0, heard: entry.heard) }, nil) }
                entry.heard = heard
                guard entry.advertisement != info.advertisement else {
                    s.entries[info.id] = entry
                    return (entry.reading.map { Current(reading: $0, heard: heard) }, nil)
                }
            } else if !mayDecode {
                return (nil, nil)
            } else if s.entries.count >= Self.limit, let oldest = s.entries.min(by: { $0.value.heard < $1.value.heard })?.key {
                s.entries[oldest] = nil
            }
            let previous = s.entries[info.id]?.reading
            let reading = Sensors.decode(info.advertisement, address: info.id, keys: s.keys)
                .map { s.replays.admit($0, from: info.id) }
            s.entries[info.id] = Entry(advertisement: info.advertisement, reading: reading, heard: heard)
            guard let reading else { return (nil, nil) }
            let changed = previous.map {
                $0.measurements != reading.measurements || $0.format != reading.format || $0.encryption != reading.encryption
            } ?? true
            return (Current(reading: reading, heard: heard), Update(device: info.id, reading: reading, rssi: info.rssi, changed: changed))
        }
        if let update { publish(update) }
        return (current, update?.changed == true)
    }

    /// Devices kept.
    package var count: Int { state.withLock { $0.entries.count } }
}
