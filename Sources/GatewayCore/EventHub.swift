import BLE
import FoundationEssentials
import Synchronization
import Threading

/// The kinds of stream event, as clients select them (`?types=`).
package enum EventType: String, CaseIterable, Sendable {
    case state, advertisement, connection, notification, sensor, hold, pairing, servicesChanged, adapter
    // The peripheral role's.
    case centralConnected, centralDisconnected, subscribed, unsubscribed, peripheralRead, peripheralWrite, indicationConfirmed

    /// "state, advertisement, ...", for error messages.
    package static let names = allCases.map(\.rawValue).joined(separator: ", ")
}

/// What the hub fans out: the central's events, and the readings decoded from advertisements.
package enum StreamEvent: Sendable {
    case central(CentralEvent)
    case sensor(SensorBoard.Update)
    case peripheral(PeripheralNotice)
}

/// A set of event types, as bits: selections are checked for every event and every client.
package struct EventTypes: OptionSet, Sendable, Hashable {
    package let rawValue: UInt32
    package init(rawValue: UInt32) { self.rawValue = rawValue }
    package init(_ type: EventType) { rawValue = 1 << UInt32(EventType.allCases.firstIndex(of: type)!) }
    package static let all = EventTypes(rawValue: (1 << UInt32(EventType.allCases.count)) - 1)

    package func contains(_ type: EventType) -> Bool { contains(EventTypes(type)) }
}

/// One event with its hub-wide sequence number (what a client resumes after: `replayAfter`). A
/// class: the fan-out hands the same event to every client, and what selections look at is kept
/// in plain fields, so that checking it copies nothing.
package final class HubEvent: Sendable {
    package let seq: UInt64
    package let time: Date
    package let event: StreamEvent
    package let type: EventType
    package let device: BluetoothAddress?
    /// A notification's characteristic.
    package let characteristicHandle: UInt16?
    package let characteristicUUID: BluetoothUUID?
    /// A sensor packet with the same values as the one before: only for `everyPacket` selections.
    package let unchanged: Bool
    /// A value event that is the result of a read the gateway made (through `Gateway.readNow`),
    /// not a notification. Stream clients get both (`didUpdateValueFor`); a door whose protocol
    /// tells them apart forwards notifications only.
    package let readResult: Bool

    package init(seq: UInt64, time: Date, event: StreamEvent, readResult: Bool = false) {
        self.seq = seq
        self.time = time
        self.event = event
        self.readResult = readResult
        var handle: UInt16?
        var uuid: BluetoothUUID?
        var unchanged = false
        switch event {
        case .central(.state):
            (type, device) = (.state, nil)
        case .central(.advertisement(let p)), .central(.advertisementChanged(let p)):
            (type, device) = (.advertisement, p.id)
        case .central(.connection(let id, _, _)), .central(.reconnecting(let id, _, _, _)):
            (type, device) = (.connection, id)
        case .central(.value(let v)):
            (type, device) = (.notification, v.device)
            (handle, uuid) = (v.characteristicHandle, v.characteristicUUID)
        case .central(.pairing(let id, _)):
            (type, device) = (.pairing, id)
        case .central(.servicesChanged(let id)):
            (type, device) = (.servicesChanged, id)
        case .central(.resubscribed(let id, let characteristic, let uuids, _)):
            (type, device) = (.hold, id)
            (handle, uuid) = (characteristic, uuids?.characteristic)
        case .central(.adapter):
            (type, device) = (.adapter, nil)
        case .sensor(let update):
            (type, device) = (.sensor, update.device)
            unchanged = !update.changed
        case .peripheral(let notice):
            // `device` is the central: `?device=` follows one phone.
            (type, device) = (notice.kind.type, notice.central)
            (handle, uuid) = (notice.attribute?.handle, notice.attribute?.characteristic)
        }
        characteristicHandle = handle
        characteristicUUID = uuid
        self.unchanged = unchanged
    }
}

/// What one client subscription selects.
package struct Selection: Sendable, Equatable {
    package var types: EventTypes = .all
    package var device: BluetoothAddress?
    /// A notification's characteristic, by handle or UUID.
    package var characteristic: AttributeSelector?
    package var format: ValueFormat = .hex
    /// Sensor events for every new packet, not only those whose values changed.
    package var everyPacket = false

    package init(types: EventTypes = .all, device: BluetoothAddress? = nil, characteristic: AttributeSelector? = nil,
                 format: ValueFormat = .hex, everyPacket: Bool = false) {
        self.types = types
        self.device = device
        self.characteristic = characteristic
        self.format = format
        self.everyPacket = everyPacket
    }

    package func matches(_ event: HubEvent) -> Bool {
        // What becomes of a hold is told to whoever follows that characteristic's notifications.
        let selected = types.contains(event.type)
            || (event.type == .hold && characteristic != nil && types.contains(.notification))
        guard selected, everyPacket || !event.unchanged else { return false }
        if let device, event.device != device { return false }
        if let characteristic, event.type == .notification || event.type == .hold || event.type.namesLocalCharacteristic {
            switch characteristic {
            case .handle(let h): if event.characteristicHandle != h { return false }
            case .uuid(let u): if event.characteristicUUID != u { return false }
            }
        }
        return true
    }
}

/// Fans the central's events out to stream clients, on a thread of its own.
///
/// `publish` (on the central's thread, usually D-Bus's) only appends the event to a bounded
/// inbox and wakes the fan-out thread, so BlueZ's thread never waits for clients. The fan-out
/// thread numbers each event, keeps the last `ringSize` for clients that resume after one,
/// encodes it once per value format (and framing) and offers it to each client, which writes
/// what its transport takes and queues the rest (`StreamClient`). Clients are added and removed
/// through the same thread, so every client sees events in `seq` order and no live event
/// overtakes a replay.
///
/// Falling behind: an event that waited more than `maxLag` in the inbox is not delivered but
/// counted as dropped for every client that wanted it (they get a `dropped` event), so a
/// saturated gateway stays about `maxLag` behind instead of drifting; past `inboxLimit`
/// waiting events the oldest are dropped and counted for every client.
package final class EventHub: Sendable {
    package static let ringSize = 256
    package static let inboxLimit = 16_384
    package static let maxLag = Duration.seconds(1)

    private let inbox: Inbox<Mailbox>
    private let ids = Atomic<Int>(0)
    private let publishedCount = Atomic<Int>(0)
    /// Given to and lost for stream clients, summed (the clients count into it).
    package let counters = DeliveryCounters()

    /// - Parameter keepAliveInterval: how often each client's transport may say that an idle
    ///   stream is alive (`EventTransport.keepAlive`).
    package init(keepAliveInterval: Duration = .seconds(15)) {
        let inbox = Inbox(Mailbox())
        self.inbox = inbox
        Threads.start(name: "gattway-fanout") { FanOut(inbox: inbox, keepAliveInterval: keepAliveInterval).run() }
    }

    deinit { post(.stop) }

    package func publish(_ event: CentralEvent) { publish(.central(event)) }

    package func publish(_ event: StreamEvent, readResult: Bool = false) {
        publishedCount.add(1, ordering: .relaxed)
        let published = Published(event: event, time: Date(), at: .now, readResult: readResult)
        inbox.post { m in
            if m.events.count >= Self.inboxLimit {
                m.events.removeFirst()
                m.overflow += 1
            }
            m.events.append(published)
            return true
        }
    }

    /// Events published since start.
    package var published: Int { publishedCount.load(ordering: .relaxed) }

    /// Registers a client; events after `lastEventID` still in the ring are offered first.
    package func add(_ client: StreamClient, replayAfter lastEventID: UInt64? = nil) {
        post(.add(client, replayAfter: lastEventID))
    }

    package func remove(_ client: StreamClient) {
        post(.remove(client.id))
    }

    package func newClientID() -> Int { ids.wrappingAdd(1, ordering: .relaxed).newValue }

    /// Returns once every event published and every client added before the call has been
    /// through the fan-out thread (offered to the clients).
    package func offered() async {
        await withCheckedContinuation { post(.barrier($0)) }
    }

    private func post(_ command: Command) {
        inbox.post { m in
            m.commands.append(command)
            return true
        }
    }

    package struct Published: Sendable {
        let event: StreamEvent
        let time: Date
        let at: ContinuousClock.Instant
        let readResult: Bool
    }

    package enum Command: Sendable {
        case add(StreamClient, replayAfter: UInt64?)
        case remove(Int)
        case barrier(CheckedContinuation<Void, Never>)
        case stop
    }

    /// What `publish`, `add` and `remove` leave for the fan-out thread.
    private struct Mailbox: Sendable {
        var events: [Published] = []
        var commands: [Command] = []
        /// Events dropped because the inbox was full.
        var overflow = 0
    }

    /// The fan-out thread's state, touched by that thread only.
    private final class FanOut {
        let inbox: Inbox<Mailbox>
        let keepAliveInterval: Duration
        var seq: UInt64 = 0
        var ring: [HubEvent] = []
        var clients: [Int: StreamClient] = [:] {
            didSet { clientList = nil }
        }
        /// `clients.values` as an array, made again only after a change (not for every batch).
        private var clientList: [StreamClient]?
        var everyClient: [StreamClient] {
            if let clientList { return clientList }
            let list = Array(clients.values)
            clientList = list
            return list
        }
        let fragments = AttributeFragments()

        init(inbox: Inbox<Mailbox>, keepAliveInterval: Duration) {
            self.inbox = inbox
            self.keepAliveInterval = keepAliveInterval
        }

        func run() {
            var nextKeepAlive = ContinuousClock.now + keepAliveInterval
            while true {
                inbox.wait(until: nextKeepAlive)
                let contents = inbox.take { m in
                    defer { m = Mailbox() }
                    return m
                }
                var barriers: [CheckedContinuation<Void, Never>] = []
                for command in contents.commands {
                    switch command {
                    case .add(let client, let lastEventID):
                        clients[client.id] = client
                        if let lastEventID {
                            offer(ring.suffix(EventHub.ringSize).filter { $0.seq > lastEventID }, to: [client])
                        }
                    case .remove(let id):
                        clients[id] = nil
                    case .barrier(let continuation):
                        barriers.append(continuation)  // after this batch's events
                    case .stop:
                        for barrier in barriers { barrier.resume() }
                        return
                    }
                }
                if contents.overflow > 0 {
                    for client in everyClient where client.noteDropped(contents.overflow) { disconnect(client) }
                }
                let now = ContinuousClock.now
                var live: [HubEvent] = []
                for published in contents.events {
                    seq += 1
                    let event = HubEvent(seq: seq, time: published.time, event: published.event, readResult: published.readResult)
                    ring.append(event)
                    if ring.count > 2 * EventHub.ringSize { ring.removeFirst(ring.count - EventHub.ringSize) }
                    if now - published.at > EventHub.maxLag {
                        for client in everyClient where client.wants(event) && client.noteDropped(1) { disconnect(client) }
                    } else {
                        live.append(event)
                    }
                }
                if !live.isEmpty { offer(live, to: everyClient) }
                for barrier in barriers { barrier.resume() }
                if ContinuousClock.now >= nextKeepAlive {
                    for client in clients.values { client.keepAlive() }
                    nextKeepAlive = ContinuousClock.now + keepAliveInterval
                }
            }
        }

        /// Client by client, so that the first socket is written while the others are still
        /// being served, and each gets the whole batch in one write; each event is encoded once
        /// (per format and framing) for all of them.
        private func offer(_ events: [HubEvent], to targets: [StreamClient]) {
            var encodings = events.map { EventEncodings($0, fragments: fragments) }
            for client in targets {
                var disconnecting = false
                for i in encodings.indices where !disconnecting {
                    disconnecting = client.offer(events[i], &encodings[i])
                }
                if disconnecting { disconnect(client) } else { client.flushTransport() }
            }
        }

        private func disconnect(_ client: StreamClient) {
            clients[client.id] = nil
            client.disconnect()
        }
    }
}
