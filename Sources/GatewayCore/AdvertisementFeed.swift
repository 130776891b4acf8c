import BLE
import Synchronization

/// Every advertisement the central reports — the scan's (`advertisement`) and the watch's
/// (`advertisementChanged`), duplicates included — for doors that pass each one on as it comes
/// (a Bluetooth proxy), beside the event hub: they need neither its JSON nor
/// its ring, and the watch's reports are not hub events.
///
/// Listeners run on the central's thread, one after the other: each only hands the
/// advertisement on (into a bounded queue of its own) and never waits.
package final class AdvertisementFeed: Sendable {
    /// A listener in a box: a closure read out of a `Mutex` by an inout round trip grows a
    /// thunk at every call (FIELD-NOTES), a class reference does not.
    private final class Listener: Sendable {
        let id: Int
        let hear: @Sendable (PeripheralInfo) -> Void
        init(id: Int, hear: @escaping @Sendable (PeripheralInfo) -> Void) {
            self.id = id
            self.hear = hear
        }
    }

    private let listeners = Mutex<(list: [Listener], next: Int)>(([], 0))

    package init() {}

    /// Adds a listener; the answer is what `remove` takes.
    package func add(_ hear: @escaping @Sendable (PeripheralInfo) -> Void) -> Int {
        listeners.withLock { l in
            l.next += 1
            l.list.append(Listener(id: l.next, hear: hear))
            return l.next
        }
    }

    package func remove(_ id: Int) {
        listeners.withLock { $0.list.removeAll { $0.id == id } }
    }

    /// Whether anyone listens (so that nothing is done for no one).
    package var isEmpty: Bool { listeners.withLock { $0.list.isEmpty } }

    /// An advertisement the central reported (its thread).
    func heard(_ info: PeripheralInfo) {
        let list = listeners.withLock { $0.list }
        for listener in list { listener.hear(info) }
    }
}
