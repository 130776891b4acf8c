import BLE
import FoundationEssentials
import Synchronization

/// The kinds of stream event, as clients select them (`?types=`).
enum EventType: String, CaseIterable, Sendable {
    case state, advertisement, connection, notification
}

/// One event with its hub-wide sequence number (the SSE `id`, for `Last-Event-ID`).
struct HubEvent: Sendable {
    let seq: UInt64
    let time: Date
    let event: CentralEvent

    var type: EventType {
        switch event {
        case .state: .state
        case .advertisement: .advertisement
        case .connection: .connection
        case .value: .notification
        }
    }

    var device: BluetoothAddress? {
        switch event {
        case .state: nil
        case .advertisement(let p): p.id
        case .connection(let id, _, _): id
        case .value(let v): v.device
        }
    }
}

/// What one client subscription selects.
struct Selection: Sendable, Equatable {
    var types: Set<EventType> = Set(EventType.allCases)
    var device: BluetoothAddress?
    /// A notification's characteristic, by handle or UUID.
    var characteristic: AttributeSelector?
    var format: ValueFormat = .hex

    func matches(_ event: HubEvent) -> Bool {
        guard types.contains(event.type) else { return false }
        if let device, event.device != device { return false }
        if let characteristic, case .value(let v) = event.event {
            switch characteristic {
            case .handle(let h): if v.characteristicHandle != h { return false }
            case .uuid(let u): if v.characteristicUUID != u { return false }
            }
        }
        return true
    }
}

/// Fans the central's events out to stream clients.
///
/// `publish` runs on the central's thread: it numbers the event, keeps it in a small ring for
/// `Last-Event-ID` replay, and offers it to each client, which queues it (bounded) and writes
/// what its transport will take. Nothing here waits, so a slow client never delays the
/// central or the other clients.
final class EventHub: Sendable {
    static let ringSize = 256

    private struct State {
        var seq: UInt64 = 0
        var ring: [HubEvent] = []
        var clients: [Int: StreamClient] = [:]
        var nextClient = 0
    }
    private let state = Mutex(State())

    /// Offers happen under the hub's lock, so every client sees events in `seq` order even when
    /// two threads publish at once (an offer never waits: it queues and writes what fits).
    func publish(_ event: CentralEvent) {
        let disconnects = state.withLock { s -> [@Sendable () -> Void] in
            s.seq += 1
            let e = HubEvent(seq: s.seq, time: Date(), event: event)
            s.ring.append(e)
            if s.ring.count > Self.ringSize { s.ring.removeFirst(s.ring.count - Self.ringSize) }
            return s.clients.values.compactMap { $0.offer(e) }
        }
        for disconnect in disconnects { disconnect() }
    }

    /// Registers a client; events after `lastEventID` still in the ring are offered first, and
    /// no live event overtakes them.
    func add(_ client: StreamClient, replayAfter lastEventID: UInt64? = nil) {
        let disconnects = state.withLock { s -> [@Sendable () -> Void] in
            s.clients[client.id] = client
            guard let lastEventID else { return [] }
            return s.ring.filter { $0.seq > lastEventID }.compactMap { client.offer($0) }
        }
        for disconnect in disconnects { disconnect() }
    }

    func remove(_ client: StreamClient) { _ = state.withLock { $0.clients.removeValue(forKey: client.id) } }

    func newClientID() -> Int { state.withLock { $0.nextClient += 1; return $0.nextClient } }

    var clientCount: Int { state.withLock { $0.clients.count } }
}

/// One stream client (an SSE response or a WebSocket): its selections and its bounded queue.
///
/// Overflow policy: when `queueLimit` events are waiting, the oldest is dropped and counted;
/// the count reaches the client in a `dropped` event as soon as there is room. A client that
/// has lost more than `dropLimit` events in a row is disconnected.
final class StreamClient: Sendable {
    let id: Int
    let queueLimit: Int
    let dropLimit: Int
    /// Writes one encoded event to the transport; false when its buffer is full.
    private let write: @Sendable ([UInt8]) -> Bool
    private let encode: @Sendable (Encoded) -> [UInt8]
    private let disconnect: @Sendable () -> Void

    enum Encoded {
        case event(HubEvent, Selection, subscription: String?, sequence: UInt64?)
        case dropped(count: Int)
    }

    private struct State {
        var selections: [String: Selection] = [:]
        var pending: [(HubEvent, Selection, String)] = []
        var dropped = 0
        var droppedInARow = 0
        /// Per subscription and characteristic: the notification sequence numbers.
        var sequences: [String: UInt64] = [:]
        var closed = false
    }
    private let state = Mutex(State())

    init(id: Int, queueLimit: Int = 256, dropLimit: Int = 10_000,
         write: @escaping @Sendable ([UInt8]) -> Bool, encode: @escaping @Sendable (Encoded) -> [UInt8],
         disconnect: @escaping @Sendable () -> Void) {
        self.id = id
        self.queueLimit = queueLimit
        self.dropLimit = dropLimit
        self.write = write
        self.encode = encode
        self.disconnect = disconnect
    }

    func select(_ selection: Selection, as name: String) { state.withLock { $0.selections[name] = selection } }
    func deselect(_ name: String) -> Selection? { state.withLock { $0.selections.removeValue(forKey: name) } }
    var selections: [String: Selection] { state.withLock { $0.selections } }

    /// Queues the event if a selection wants it and writes what the transport takes. Returns
    /// the transport's disconnect when the client has lost too many events (the caller runs it
    /// outside its locks).
    func offer(_ event: HubEvent) -> (@Sendable () -> Void)? {
        let overLimit = state.withLock { s -> Bool in
            guard !s.closed else { return false }
            for (name, selection) in s.selections where selection.matches(event) {
                s.pending.append((event, selection, name))
            }
            if s.pending.count > queueLimit {
                let excess = s.pending.count - queueLimit
                s.pending.removeFirst(excess)
                s.dropped += excess
                s.droppedInARow += excess
            }
            return s.droppedInARow > dropLimit
        }
        if overLimit {
            close()
            return disconnect
        }
        flush()
        return nil
    }

    /// Writes queued events while the transport takes them.
    func flush() {
        state.withLock { s in
            guard !s.closed else { return }
            if s.dropped > 0 {
                guard write(encode(.dropped(count: s.dropped))) else { return }
                s.dropped = 0
            }
            while let (event, selection, name) = s.pending.first {
                var sequence: UInt64?
                var key = ""
                if case .value(let v) = event.event {
                    key = "\(name)/\(v.device)/\(v.characteristicHandle)"
                    sequence = (s.sequences[key] ?? 0) + 1
                }
                guard write(encode(.event(event, selection, subscription: s.selections.count > 1 || name != "" ? name : nil,
                                          sequence: sequence))) else { return }
                if let sequence { s.sequences[key] = sequence }
                s.pending.removeFirst()
                s.droppedInARow = 0
            }
        }
    }

    func close() { state.withLock { $0.closed = true; $0.pending.removeAll() } }
}
