import BLE
import Testing
@testable import GatewayCore
import GatewayTesting

/// The commands of `GET /v1/ws`, given to the session directly: each reply, and what the central
/// and the holds saw.
@Suite struct CommandSessionTests {
    let central = FakeCentral()
    let gateway: Gateway
    let client = StreamClient(id: 1, transport: .sink(EventSink { _, _, _ in }))
    let session: CommandSession
    let device = "F0:00:00:00:00:01"
    /// The serial characteristic ffe1, the fake's only one that notifies.
    let serial = NotificationHolds.Key(device: BluetoothAddress("F0:00:00:00:00:01")!, characteristic: 0x0032)

    init() {
        gateway = Gateway(central: central, version: "test")
        session = CommandSession(gateway: gateway, client: client)
    }

    func send(_ command: String) async throws -> [String: Any] {
        try JSONSerializationLite.object(await session.handle(Array(command.utf8)))
    }

    func subscribeToSerial(id: String) async throws -> [String: Any] {
        try await send(#"{"op": "subscribe", "id": "\#(id)", "device": "\#(device)", "characteristic": "ffe1"}"#)
    }

    var notifyCalls: [Bool] { central.notify.all.map(\.enabled) }

    @Test func subscribeAcksAndTakesTheHold() async throws {
        let reply = try await subscribeToSerial(id: "1")
        #expect(reply["op"] as? String == "ack")
        #expect(reply["id"] as? String == "1")
        #expect(reply["subscription"] as? String == "s1")
        #expect(central.notify.all == [.init(enabled: true, device: serial.device, characteristic: 0x0032)])
        #expect(gateway.holds.count(serial) == 1)
        #expect(client.selections["s1"]?.characteristic == .uuid(BluetoothUUID("ffe1")!))
        // A second subscription gets the next name and shares the hold.
        #expect(try await subscribeToSerial(id: "2")["subscription"] as? String == "s2")
        #expect(gateway.holds.count(serial) == 2)
        #expect(notifyCalls == [true])
    }

    @Test func subscribeWithoutACharacteristicHoldsNothing() async throws {
        let reply = try await send(#"{"op": "subscribe", "id": "1", "types": ["connection", "state"]}"#)
        #expect(reply["op"] as? String == "ack")
        #expect(reply["subscription"] as? String == "s1")
        #expect(client.selections["s1"]?.types == [EventTypes(.connection), EventTypes(.state)])
        #expect(notifyCalls == [])
    }

    @Test func subscribeToACharacteristicThatCannotNotifyIsRefused() async throws {
        let reply = try await send(#"{"op": "subscribe", "id": "n", "device": "\#(device)", "characteristic": "0x0012"}"#)
        #expect(reply["op"] as? String == "error")
        #expect(reply["id"] as? String == "n")
        let error = try #require(reply["error"] as? [String: Any])
        #expect(error["domain"] as? String == "CBATTErrorDomain")
        #expect(error["name"] as? String == "requestNotSupported")
        #expect(notifyCalls == [])
        #expect(client.selections.isEmpty)
    }

    @Test func unsubscribeAcksAndReleasesTheHold() async throws {
        _ = try await subscribeToSerial(id: "1")
        let reply = try await send(#"{"op": "unsubscribe", "id": "2", "subscription": "s1"}"#)
        #expect(reply["op"] as? String == "ack")
        #expect(reply["id"] as? String == "2")
        #expect(reply["subscription"] as? String == "s1")
        #expect(notifyCalls == [true, false])
        #expect(gateway.holds.count(serial) == 0)
        #expect(client.selections.isEmpty)
    }

    @Test func unsubscribeFromAnUnknownSubscriptionIsAnError() async throws {
        _ = try await subscribeToSerial(id: "1")
        let reply = try await send(#"{"op": "unsubscribe", "id": "u7", "subscription": "s9"}"#)
        #expect(reply["op"] as? String == "error")
        #expect(reply["id"] as? String == "u7")
        let error = try #require(reply["error"] as? [String: Any])
        #expect(error["domain"] as? String == "CBErrorDomain")
        #expect(error["code"] as? Int == 1)
        #expect(error["name"] as? String == "invalidParameters")
        #expect((error["message"] as? String)?.contains("\"s9\"") == true)
        // The real subscription and its hold are untouched.
        #expect(gateway.holds.count(serial) == 1)
        #expect(client.selections.keys.sorted() == ["s1"])
    }

    @Test func readAnswersTheValueInTheAskedFormat() async throws {
        let reply = try await send(#"{"op": "read", "id": "3", "device": "\#(device)", "characteristic": "ffe1", "format": "utf8"}"#)
        #expect(reply["op"] as? String == "result")
        #expect(reply["id"] as? String == "3")
        #expect(reply["device"] as? String == device)
        #expect(reply["characteristic"] as? String == "0x0032")
        #expect(reply["value"] as? String == "hi 50")
        #expect(reply["format"] as? String == "utf8")
        #expect(reply["length"] as? Int == 5)
        let hex = try await send(#"{"op": "read", "device": "\#(device)", "characteristic": "0x0032"}"#)
        #expect(hex["value"] as? String == "6869203530")
        #expect(hex["format"] as? String == "hex")
        #expect(hex["id"] == nil)
    }

    @Test func writeAnswersWhatWasWritten() async throws {
        let reply = try await send(#"""
            {"op": "write", "id": "4", "device": "\#(device)", "characteristic": "ffe1", "value": "hi", "format": "utf8", "withResponse": false}
            """#)
        #expect(reply["op"] as? String == "result")
        #expect(reply["id"] as? String == "4")
        #expect(reply["characteristic"] as? String == "0x0032")
        #expect(reply["written"] as? Int == 2)
        let write = try #require(central.writes.withLock { $0.last })
        #expect(write.0 == 0x0032 && write.1 == Array("hi".utf8) && write.2 == .withoutResponse)
        // Without `withResponse`, a write waits for the response.
        _ = try await send(#"{"op": "write", "id": "5", "device": "\#(device)", "characteristic": "ffe1", "value": "0102"}"#)
        #expect(central.writes.withLock { $0.last?.2 } == .withResponse)
        #expect(central.writes.withLock { $0.last?.1 } == [1, 2])
    }

    @Test func anUnknownOpIsAnErrorListingTheOps() async throws {
        let reply = try await send(#"{"op": "notify", "id": "9"}"#)
        #expect(reply["op"] as? String == "error")
        #expect(reply["id"] as? String == "9")
        let error = try #require(reply["error"] as? [String: Any])
        #expect(error["code"] as? Int == 1)
        #expect((error["message"] as? String)?.contains("ops are subscribe, unsubscribe, read, write") == true)
    }

    /// What cannot be decoded is answered (without an id: none could be read), and the session goes on.
    @Test("undecodable commands get an error reply", arguments: [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        (#"{"op": "read", "id": "5", "bogus": 1}"#, #"unknown field "bogus"; known fields: characteristic, device"#),
        (#"{"id": "6"}"#, #"field "op" is required"#),
        (#"{"op": "read", "offset": "ten"}"#, #"field "offset" must be of type Int"#),
        ("", #"field "op" is required"#),
    ])
    func undecodableCommands(command: String, text: String) async throws {
        let reply = try await send(command)
        #expect(reply["op"] as? String == "error")
        #expect(reply["id"] == nil)
        let error = try #require(reply["error"] as? [String: Any])
        #expect(error["code"] as? Int == 1)
        #expect((error["message"] as? String)?.contains(text) == true, "\(error["message"] ?? "")")
        #expect(try await subscribeToSerial(id: "after")["op"] as? String == "ack")
    }

    @Test func commandsWithMissingOrBadFieldsAreErrors() async throws {
        for command in [
            #"{"op": "read", "id": "r"}"#,
            #"{"op": "read", "id": "r", "device": "nope", "characteristic": "ffe1"}"#,
            #"{"op": "write", "id": "r", "device": "\#(device)", "characteristic": "ffe1"}"#,
            #"{"op": "write", "id": "r", "device": "\#(device)", "characteristic": "ffe1", "value": "zz"}"#,
            #"{"op": "subscribe", "id": "r", "types": ["bogus"]}"#,
            #"{"op": "subscribe", "id": "r", "characteristic": "ffe1"}"#,
        ] {
            let reply = try await send(command)
            #expect(reply["op"] as? String == "error", "\(command)")
            #expect(reply["id"] as? String == "r", "\(command)")
            #expect((reply["error"] as? [String: Any])?["code"] as? Int == 1, "\(command)")
        }
        #expect(central.writes.withLock { $0.isEmpty })
        #expect(client.selections.isEmpty)
    }

    @Test func endReleasesEveryHoldOfTheSocket() async throws {
        _ = try await subscribeToSerial(id: "1")
        _ = try await subscribeToSerial(id: "2")
        _ = try await send(#"{"op": "subscribe", "id": "3", "types": ["state"]}"#)
        _ = try await subscribeToSerial(id: "4")
        _ = try await send(#"{"op": "unsubscribe", "id": "5", "subscription": "s1"}"#)
        #expect(gateway.holds.count(serial) == 2)
        // Another socket's hold stays.
        let other = CommandSession(gateway: gateway, client: StreamClient(id: 2, transport: .sink(EventSink { _, _, _ in })))
        _ = await other.handle(Array(#"{"op": "subscribe", "device": "\#(device)", "characteristic": "ffe1"}"#.utf8))
        #expect(gateway.holds.count(serial) == 3)

        await session.end()
        #expect(gateway.holds.count(serial) == 1)
        #expect(notifyCalls == [true])
        await other.end()
        #expect(gateway.holds.count(serial) == 0)
        #expect(notifyCalls == [true, false])
        // Ending again releases nothing more.
        await session.end()
        #expect(notifyCalls == [true, false])
    }
}
