import BLE
import Foundation
import Synchronization
import Testing
@testable import GatewayCore
import GatewayTesting
@testable import HTTPAPI
@testable import HTTPServer

private let heartRate = ValueUpdate(
    device: BluetoothAddress("F0:00:00:00:00:01")!, serviceHandle: 0x0010, serviceUUID: BluetoothUUID("180d")!,
    characteristicHandle: 0x0015, characteristicUUID: BluetoothUUID("2a37")!, value: [0x06, 0x48])

private func object(_ bytes: [UInt8]) throws -> [String: Any] {
    try #require(JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
}

/// Everything an SSE body has buffered, as text.
private func drain(_ body: StreamBody) -> String {
    var text = ""
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 4096, alignment: 1)
    defer { buffer.deallocate() }
    while case .bytes(let count) = body.read(into: buffer) {
        text += String(decoding: UnsafeRawBufferPointer(rebasing: buffer[..<count]), as: UTF8.self)
    }
    return text
}

/// The `data:` objects of an SSE text.
private func events(_ text: String) throws -> [[String: Any]] {
    try text.split(separator: "\n").filter { $0.hasPrefix("data: ") }.map { try object(Array($0.dropFirst(6).utf8)) }
}

@Suite struct StreamClientTests {
    /// A client whose transport is full queues events; when its queue overflows the oldest are
    /// dropped, and as the transport drains (its writable callback, no polling) the client gets
    /// a `dropped` event with the count, then the newest events in order.
    @Test func overflowIsCountedAndReportedWhenTheTransportDrains() throws {
        let body = StreamBody(capacityBytes: 600)
        let client = StreamClient(id: 1, transport: .stream(SSETransport(body: body)), queueLimit: 4)
        client.select(Selection(), as: "")
        for seq in 1...20 {
            let event = HubEvent(seq: UInt64(seq), time: Date(), event: .central(.value(heartRate)))
            var encodings = EventEncodings(event)
            #expect(client.offer(event, &encodings) == false)
        }
        var received = try events(drain(body))
        // The reads drained the buffer; each drain wrote more from the queue.
        while body.bufferedBytes > 0 { received += try events(drain(body)) }
        let dropped = received.filter { $0["type"] as? String == "dropped" }
        let notifications = received.filter { $0["type"] as? String == "notification" }
        let sequences = notifications.compactMap { $0["sequence"] as? Int }
        #expect(dropped.count == 1)
        let lost = dropped.first?["count"] as? Int ?? 0
        #expect(lost > 0)
        #expect(notifications.count + lost == 20)
        #expect(sequences == sequences.sorted())
        #expect(sequences.last == 20)
        // The newest four were queued, not dropped.
        #expect(Array(sequences.suffix(4)) == [17, 18, 19, 20])
    }

    /// A WebSocket client that subscribes and unsubscribes for months keeps no counters of the
    /// subscriptions it ended.
    @Test func endedSubscriptionsLeaveNoCounters() {
        let client = StreamClient(id: 1, transport: .stream(SSETransport(body: StreamBody(capacityBytes: 1 << 20))))
        for round in 1...100 {
            client.select(Selection(), as: "s\(round)")
            let event = HubEvent(seq: UInt64(round), time: Date(), event: .central(.value(heartRate)))
            var encodings = EventEncodings(event)
            _ = client.offer(event, &encodings)
            #expect(client.sequenceCounters == 1)
            _ = client.deselect("s\(round)")
        }
        #expect(client.sequenceCounters == 0)
    }

    /// `sequence` counts a characteristic's notifications: a `hold` event of that characteristic
    /// (which its selection receives too) carries none and leaves no gap.
    @Test func holdEventsTakeNoNotificationSequence() throws {
        let body = StreamBody(capacityBytes: 1 << 16)
        let client = StreamClient(id: 1, transport: .stream(SSETransport(body: body)))
        client.select(Selection(device: heartRate.device, characteristic: .handle(0x0015)), as: "")
        let restored = CentralEvent.resubscribed(id: heartRate.device, characteristic: 0x0015,
                                                 uuids: CharacteristicUUIDs(service: BluetoothUUID("180d")!, characteristic: BluetoothUUID("2a37")!), error: nil)
        for (seq, event) in [CentralEvent.value(heartRate), restored, .value(heartRate)].enumerated() {
            let hubEvent = HubEvent(seq: UInt64(seq + 1), time: Date(), event: .central(event))
            var encodings = EventEncodings(hubEvent)
            _ = client.offer(hubEvent, &encodings)
        }
        client.flushTransport()
        let received = try events(drain(body))
        #expect(received.map { $0["type"] as? String } == ["notification", "hold", "notification"])
        #expect(received.map { $0["sequence"] as? Int } == [1, nil, 2])
    }

    /// SSE frames an event as `id:` (its seq), `event:` (its type) and one `data:` line of JSON,
    /// then a blank line; a `dropped` notice as `event: dropped` and its `data:`, with no `id:`.
    @Test func sseFramesEachEventAndTheDroppedNotice() throws {
        let body = StreamBody(capacityBytes: 1 << 20)
        let client = StreamClient(id: 1, transport: .stream(SSETransport(body: body)))
        client.select(Selection(), as: "")
        let event = HubEvent(seq: 5, time: Date(), event: .central(.connection(id: heartRate.device, state: .connected, error: nil)))
        var encodings = EventEncodings(event)
        #expect(client.offer(event, &encodings) == false)
        client.flushTransport()
        #expect(client.noteDropped(3) == false)
        let frames = drain(body).components(separatedBy: "\n\n")
        #expect(frames.count == 3 && frames.last == "")
        let eventLines = frames[0].split(separator: "\n", omittingEmptySubsequences: false)
        #expect(eventLines.prefix(2) == ["id: 5", "event: connection"])
        #expect(eventLines.count == 3 && eventLines[2].hasPrefix("data: {"))
        #expect(try events(frames[0]).first?["seq"] as? Int == 5)
        let noticeLines = frames[1].split(separator: "\n", omittingEmptySubsequences: false)
        #expect(noticeLines.count == 2 && noticeLines[0] == "event: dropped")
        #expect(try events(frames[1]).first?["count"] as? Int == 3)
    }

    @Test func aClientThatLosesTooManyAsksToBeDisconnected() {
        let body = StreamBody(capacityBytes: 200)
        let client = StreamClient(id: 1, transport: .stream(SSETransport(body: body)), queueLimit: 2, dropLimit: 5)
        client.select(Selection(), as: "")
        var disconnect = false
        for seq in 1...20 where !disconnect {
            let event = HubEvent(seq: UInt64(seq), time: Date(), event: .central(.value(heartRate)))
            var encodings = EventEncodings(event)
            disconnect = client.offer(event, &encodings)
        }
        #expect(disconnect)
    }
}

@Suite struct EventHubTests {
    /// Events published from another thread reach every client in order, numbered from 1; a
    /// client added with `Last-Event-ID` gets the replay first.
    @Test func fanOutKeepsOrderAndReplays() async throws {
        let hub = EventHub(keepAliveInterval: .seconds(60))
        let body = StreamBody(capacityBytes: 1 << 20)
        let client = StreamClient(id: hub.newClientID(), transport: .stream(SSETransport(body: body)))
        client.select(Selection(), as: "")
        hub.add(client)
        for i in 0..<1_000 {
            var update = heartRate
            update.value = [UInt8(i & 0xFF), UInt8(i >> 8)]
            hub.publish(.value(update))
        }
        await hub.offered()
        let received = try events(drain(body))
        #expect(received.compactMap { $0["seq"] as? Int } == Array(1...1_000))
        #expect(received.compactMap { $0["sequence"] as? Int } == Array(1...1_000))

        let late = StreamBody(capacityBytes: 1 << 20)
        let replayed = StreamClient(id: hub.newClientID(), transport: .stream(SSETransport(body: late)))
        replayed.select(Selection(), as: "")
        hub.add(replayed, replayAfter: 990)
        await hub.offered()
        #expect(try events(drain(late)).compactMap { $0["seq"] as? Int } == Array(991...1_000))
        hub.remove(client)
        hub.remove(replayed)
    }

    /// An SSE client of `hub` with these selections (by name), and its body.
    private func client(of hub: EventHub, _ selections: [String: Selection], capacityBytes: Int = 1 << 20,
                        queueLimit: Int = 256, dropLimit: Int = 10_000) -> (StreamClient, StreamBody) {
        let body = StreamBody(capacityBytes: capacityBytes)
        let client = StreamClient(id: hub.newClientID(), transport: .stream(SSETransport(body: body)), queueLimit: queueLimit,
                                  dropLimit: dropLimit)
        for (name, selection) in selections { client.select(selection, as: name) }
        hub.add(client)
        return (client, body)
    }

    private func value(_ device: BluetoothAddress, _ handle: UInt16, _ uuid: String) -> CentralEvent {
        var update = heartRate
        (update.device, update.characteristicHandle, update.characteristicUUID) = (device, handle, BluetoothUUID(uuid)!)
        return .value(update)
    }

    /// Each client gets the events its selection matches (by type, device, characteristic handle
    /// or UUID), in publish order; notifications carry a `sequence` per characteristic.
    @Test func eachClientGetsWhatItsSelectionMatches() async throws {
        let hub = EventHub(keepAliveInterval: .seconds(60))
        let a = heartRate.device, b = BluetoothAddress("F0:00:00:00:00:02")!
        let (_, all) = client(of: hub, ["": Selection()])
        let (_, connections) = client(of: hub, ["": Selection(types: [EventTypes(.connection)])])
        let (_, deviceA) = client(of: hub, ["": Selection(device: a)])
        let (_, byHandle) = client(of: hub, ["": Selection(types: [EventTypes(.notification)], device: a, characteristic: .handle(0x0015))])
        let (_, byUUID) = client(of: hub, ["": Selection(types: [EventTypes(.notification)], device: a,
                                                         characteristic: .uuid(BluetoothUUID("2a38")!))])
        let (_, deviceBNotifications) = client(of: hub, ["": Selection(types: [EventTypes(.notification)], device: b)])

        let published: [CentralEvent] = [
            .state(ManagerStatus(state: .poweredOn, adapter: "hci0")),                     // 1
            .advertisement(PeripheralInfo(id: a, addressType: "public", name: nil, rssi: -60, lastSeen: nil,
                                          state: .disconnected, paired: false, advertisement: AdvertisementData())),  // 2
            .connection(id: a, state: .connected, error: nil),                               // 3
            value(a, 0x0015, "2a37"),                                                        // 4
            value(a, 0x0018, "2a38"),                                                        // 5
            .connection(id: b, state: .connected, error: nil),                               // 6
            value(b, 0x0015, "2a37"),                                                        // 7
            value(a, 0x0015, "2a37"),                                                        // 8
        ]
        for event in published { hub.publish(event) }
        await hub.offered()

        func received(_ body: StreamBody) throws -> [[String: Any]] { try events(drain(body)) }
        func seqs(_ events: [[String: Any]]) -> [Int] { events.compactMap { $0["seq"] as? Int } }
        let everything = try received(all)
        #expect(seqs(everything) == Array(1...8))
        #expect(everything.map { $0["type"] as? String ?? "" }
                == ["state", "advertisement", "connection", "notification", "notification", "connection", "notification", "notification"])
        // Counted per characteristic: a/0x0015 twice, the others once; other events have none.
        #expect(everything.map { $0["sequence"] as? Int ?? 0 } == [0, 0, 0, 1, 1, 0, 1, 2])
        #expect(seqs(try received(connections)) == [3, 6])
        #expect(seqs(try received(deviceA)) == [2, 3, 4, 5, 8])
        let handled = try received(byHandle)
        #expect(seqs(handled) == [4, 8])
        #expect(handled.compactMap { $0["sequence"] as? Int } == [1, 2])
        #expect(seqs(try received(byUUID)) == [5])
        #expect(seqs(try received(deviceBNotifications)) == [7])
    }

    /// A client with several subscriptions gets an event once for each that matches, named.
    @Test func anEventReachesEachMatchingSubscriptionOfAClient() async throws {
        let hub = EventHub(keepAliveInterval: .seconds(60))
        let (_, body) = client(of: hub, [
            "s1": Selection(types: [EventTypes(.notification)], device: heartRate.device),
            "s2": Selection(),
        ])
        hub.publish(.value(heartRate))
        hub.publish(.connection(id: heartRate.device, state: .disconnected, error: nil))
        await hub.offered()
        let received = try events(drain(body))
        let named = received.map { "\($0["seq"] as? Int ?? 0) \($0["subscription"] as? String ?? "-") \($0["sequence"] as? Int ?? 0)" }
        #expect(named.count == 3)
        #expect(Set(named.prefix(2)) == ["1 s1 1", "1 s2 1"])
        #expect(named.last == "2 s2 0")
    }

    @Test func aRemovedClientGetsNothingMore() async throws {
        let hub = EventHub(keepAliveInterval: .seconds(60))
        let (leaving, leavingBody) = client(of: hub, ["": Selection()])
        let (_, stayingBody) = client(of: hub, ["": Selection()])
        for _ in 0..<3 { hub.publish(.value(heartRate)) }
        await hub.offered()
        hub.remove(leaving)
        for _ in 0..<2 { hub.publish(.value(heartRate)) }
        await hub.offered()
        #expect(try events(drain(leavingBody)).compactMap { $0["seq"] as? Int } == [1, 2, 3])
        #expect(try events(drain(stayingBody)).compactMap { $0["seq"] as? Int } == [1, 2, 3, 4, 5])
    }

    /// A client that has lost more than its `dropLimit` in a row is disconnected by the hub: its
    /// stream ends, and the others go on.
    @Test func theHubDisconnectsAClientThatLosesTooMany() async throws {
        let hub = EventHub(keepAliveInterval: .seconds(60))
        // Nobody reads this body: once 200 bytes are buffered every event queues, then drops.
        let (_, stuck) = client(of: hub, ["": Selection()], capacityBytes: 200, queueLimit: 2, dropLimit: 5)
        let (_, reader) = client(of: hub, ["": Selection()])
        for _ in 0..<20 { hub.publish(.value(heartRate)) }
        await hub.offered()
        #expect(stuck.isClosed)
        #expect(try events(drain(reader)).count == 20)
    }

    /// Idle SSE clients get a comment line every `keepAliveInterval`. Time is what is tested here:
    /// the interval is short, and the wait for the comment is bounded.
    @Test func idleStreamsGetKeepAliveComments() async throws {
        let hub = EventHub(keepAliveInterval: .milliseconds(20))
        let (_, body) = client(of: hub, ["": Selection()])
        await hub.offered()
        var text = ""
        let deadline = ContinuousClock.now + .seconds(5)
        while text.components(separatedBy: ": keep-alive\n\n").count < 3 && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
            text += drain(body)
        }
        #expect(text.components(separatedBy: ": keep-alive\n\n").count >= 3, "\(text)")
        #expect(try events(text).isEmpty)
    }
}
