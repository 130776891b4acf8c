import BLE
import Synchronization

/// One stream client (a door's event stream): its selections and its bounded queue.
///
/// The hub's fan-out thread offers it events; it writes what its transport takes at once and
/// queues the rest as encoded messages. The transport says when it has room again
/// (`onWritable`), and the queue is written then: nothing polls.
///
/// Overflow policy: when `queueLimit` messages are waiting, the oldest is dropped and counted;
/// the count reaches the client in a `dropped` event as soon as there is room. Events the hub
/// itself could not deliver in time count the same way. A client that has lost more than
/// `dropLimit` events in a row is disconnected.
package final class StreamClient: Sendable {
    package enum Transport: Sendable {
        /// A door's stream, which frames each event as its wire format wants (`EventFraming`).
        case stream(any EventTransport)
        /// In-process: every event is handed over as it comes, to a door that bounds its own queue.
        case sink(EventSink)
    }

    package let id: Int
    package let queueLimit: Int
    package let dropLimit: Int
    package let transport: Transport
    /// Where deliveries and losses are summed over all clients (the doors' metrics).
    package let counters: DeliveryCounters?
    /// The transport's framing (nil: each event is its JSON alone) and what it writes after
    /// each event, read once here rather than for every delivery.
    private let framing: (any EventFraming.Type)?
    private let tail: [UInt8]

    private struct SequenceKey: Hashable {
        /// The subscription's number (names are strings: slower to hash for every event).
        var subscription: Int
        var device: BluetoothAddress
        var characteristic: UInt16
    }

    private struct Subscription {
        var selection: Selection
        let number: Int
        /// `,"subscription":"<name>"`, written into each of its events.
        let field: [UInt8]
    }

    private struct State {
        var subscriptions: [String: Subscription] = [:]
        var numbered = 0
        /// Encoded messages the transport refused, oldest first from `head`.
        var pending: [[UInt8]] = []
        var head = 0
        var dropped = 0
        var droppedInARow = 0
        /// Per subscription and characteristic: the last notification's `sequence`.
        var sequences: [SequenceKey: UInt64] = [:]
        var closed = false

        var waiting: Int { pending.count - head }
    }
    private let state = Mutex(State())

    package init(id: Int, transport: Transport, queueLimit: Int = 256, dropLimit: Int = 10_000, counters: DeliveryCounters? = nil) {
        self.counters = counters
        self.id = id
        self.transport = transport
        self.queueLimit = queueLimit
        self.dropLimit = dropLimit
        if case .stream(let stream) = transport {
            framing = stream.framing
            tail = stream.framing?.tail ?? []
            stream.onWritable { [weak self] in self?.flush() }
        } else {
            (framing, tail) = (nil, [])
        }
    }

    package func select(_ selection: Selection, as name: String) {
        state.withLock { s in
            s.numbered += 1
            s.subscriptions[name] = Subscription(selection: selection, number: s.numbered,
                                                 field: ClientEvent.subscriptionField(name))
        }
    }

    /// Ends a subscription, and its sequence counters (a client that subscribes and unsubscribes
    /// for months must not accumulate them).
    package func deselect(_ name: String) -> Selection? {
        state.withLock { s in
            guard let removed = s.subscriptions.removeValue(forKey: name) else { return nil }
            s.sequences = s.sequences.filter { $0.key.subscription != removed.number }
            return removed.selection
        }
    }
    package var selections: [String: Selection] { state.withLock { $0.subscriptions.mapValues(\.selection) } }

    /// Sequence counters kept (one per subscription and characteristic it has seen).
    package var sequenceCounters: Int { state.withLock { $0.sequences.count } }

    /// Whether any selection wants the event.
    package func wants(_ event: HubEvent) -> Bool {
        state.withLock { s in !s.closed && s.subscriptions.values.contains { $0.selection.matches(event) } }
    }

    /// Writes or queues the event for each selection that wants it (on the hub's thread); what
    /// is written waits for `flushTransport()`, which the hub calls once per batch of events. Returns true when the client has lost too many events and must be disconnected.
    package func offer(_ event: HubEvent, _ encodings: inout EventEncodings) -> Bool {
        state.withLock { s in
            guard !s.closed else { return false }
            let named = s.subscriptions.count > 1
            for (name, subscription) in s.subscriptions where subscription.selection.matches(event) {
                var sequence: UInt64?
                // Notifications only: a `hold` event of the characteristic neither has one nor
                // takes a number from them (their `sequence` has no gaps).
                if event.type == .notification, let device = event.device, let handle = event.characteristicHandle {
                    sequence = Self.next(in: &s.sequences, SequenceKey(subscription: subscription.number, device: device, characteristic: handle))
                }
                let message = ClientEvent(head: framing.map { encodings.head($0) } ?? [],
                                          open: encodings.open(subscription.selection.format), sequence: sequence,
                                          subscription: named || !name.isEmpty ? subscription.field : [], tail: tail)
                if case .sink(let sink) = transport {
                    sink.deliver(event, name, message.bytes)
                    counters?.delivered.add(1, ordering: .relaxed)
                    continue
                }
                // Straight into the transport's buffer when nothing waits; a copy only to queue.
                if s.waiting == 0 && s.dropped == 0 && write(message) {
                    s.droppedInARow = 0
                } else {
                    s.pending.append(message.bytes)
                }
                counters?.delivered.add(1, ordering: .relaxed)
            }
            trim(&s)
            return s.droppedInARow > dropLimit
        }
    }

    /// Counts up the key's sequence, hashing it once (this runs for every delivery).
    private static func next(in sequences: inout [SequenceKey: UInt64], _ key: SequenceKey) -> UInt64 {
        guard let index = sequences.index(forKey: key) else {
            sequences[key] = 1
            return 1
        }
        sequences.values[index] += 1
        return sequences.values[index]
    }

    /// Counts events lost before they reached this client (the hub fell behind).
    package func noteDropped(_ count: Int) -> Bool {
        state.withLock { s in
            guard !s.closed else { return false }
            s.dropped += count
            s.droppedInARow += count
            counters?.dropped.add(count, ordering: .relaxed)
            write(&s)
            return s.droppedInARow > dropLimit
        }
    }

    /// Writes queued messages while the transport takes them.
    package func flush() {
        state.withLock { write(&$0) }
    }

    /// Writes what `offer` left in the transport's buffer.
    package func flushTransport() {
        if case .stream(let stream) = transport { stream.flush() }
    }

    /// Lets an idle stream's transport say it is alive (what keeps proxies from closing it).
    package func keepAlive() {
        guard case .stream(let stream) = transport else { return }
        state.withLock { s in
            if !s.closed && s.waiting == 0 { stream.keepAlive() }
        }
    }

    /// Ends the transport: the client read too slowly for too long.
    package func disconnect() {
        close()
        if case .stream(let stream) = transport { stream.disconnect(reason: "too slow: events were dropped") }
    }

    package func close() { state.withLock { $0.closed = true; $0.pending = []; $0.head = 0 } }

    // MARK: - Under the lock

    private func trim(_ s: inout State) {
        let excess = s.waiting - queueLimit
        if excess > 0 {
            s.head += excess
            s.dropped += excess
            s.droppedInARow += excess
            counters?.dropped.add(excess, ordering: .relaxed)
            counters?.delivered.add(-excess, ordering: .relaxed)
        }
        write(&s)
    }

    private func write(_ s: inout State) {
        guard !s.closed else { return }
        if s.dropped > 0 {
            // The count goes out with the event after the gap, not one notice per lost event
            // while the transport has room for notices only.
            let json = JSON.encodeCompact(EventBody(dropped: s.dropped))
            let notice = framing?.dropped(json) ?? json
            let next = s.waiting > 0 ? s.pending[s.head].count : 0
            guard room() >= notice.count + next + 2 * 10, write(notice) else { return }
            s.dropped = 0
        }
        while s.head < s.pending.count {
            guard write(s.pending[s.head]) else { break }
            s.head += 1
            s.droppedInARow = 0
        }
        if s.head == s.pending.count {
            s.pending.removeAll(keepingCapacity: s.pending.capacity <= 64)
            s.head = 0
        } else if s.head > 64 && s.head * 2 > s.pending.count {
            s.pending.removeFirst(s.head)
            s.head = 0
        }
    }

    /// Bytes the transport takes now (its own header, if any, adds up to 10).
    private func room() -> Int {
        switch transport {
        case .stream(let stream): stream.room
        case .sink: Int.max / 2
        }
    }

    private func write(_ message: [UInt8]) -> Bool {
        switch transport {
        case .stream(let stream): stream.write(message)
        case .sink(let sink): sink.notice(message)
        }
    }

    /// Writes an event in place; the transport is woken by `flushTransport()`.
    private func write(_ message: ClientEvent) -> Bool {
        switch transport {
        case .stream(let stream): stream.write(count: message.count) { message.write(into: &$0) }
        case .sink(let sink): sink.notice(message.bytes)
        }
    }
}

/// Where a stream client's events are written: a door's transport. Called on the hub's thread,
/// under the client's lock: nothing here may wait.
package protocol EventTransport: Sendable {
    /// How each event's JSON is framed; nil: each event is its JSON alone (one message).
    var framing: (any EventFraming.Type)? { get }
    /// Bytes it takes now.
    var room: Int { get }
    /// Writes and sends `bytes`, or refuses them all (false) when there is no room.
    func write(_ bytes: [UInt8]) -> Bool
    /// Writes `count` bytes in place, sent at the next `flush` (one per batch of events).
    func write(count: Int, _ fill: (inout [UInt8]) -> Void) -> Bool
    func flush()
    /// `handler` runs whenever there is room again after a refusal.
    func onWritable(_ handler: @escaping @Sendable () -> Void)
    /// Called every keep-alive interval while nothing waits to be written: what keeps an idle
    /// stream open through proxies, if its wire format has such a thing.
    func keepAlive()
    /// Ends the stream for `reason` (the client read too slowly).
    func disconnect(reason: String)
}

/// Where a `.sink` client's events go: the event (nil for a `dropped` notice), the name of the
/// subscription that selected it, and its JSON, unframed. Called on the hub's thread: it must
/// not wait.
package final class EventSink: Sendable {
    package let deliver: @Sendable (HubEvent?, String, [UInt8]) -> Void
    package init(_ deliver: @escaping @Sendable (HubEvent?, String, [UInt8]) -> Void) { self.deliver = deliver }

    /// A message that is not one event (a `dropped` notice); always taken.
    package func notice(_ json: [UInt8]) -> Bool {
        deliver(nil, "", json)
        return true
    }
}

/// How a transport frames each event's JSON on its wire, written by the door that owns the
/// transport: the core hands over events and `dropped` notices as JSON and knows no wire format.
/// A framing is a kind (a type), not an instance: what it writes before an event depends on the
/// event alone, so the hub makes it once per event for all the clients of that kind.
package protocol EventFraming: Sendable {
    /// Bytes before an event's JSON.
    static func head(_ event: HubEvent) -> [UInt8]
    /// Bytes after each event's JSON.
    static var tail: [UInt8] { get }
    /// A `dropped` notice as the transport sends it; `json` is its JSON object.
    static func dropped(_ json: [UInt8]) -> [UInt8]
}
