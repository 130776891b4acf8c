import BLE
import HTTPServer
import Synchronization
import Testing
@testable import GatewayCore
import GatewayTesting
@testable import HTTPAPI

/// The GATT blocklist as clients meet it: the fake's two 2a29 characteristics hidden, ffe1 only
/// readable, its CCCD (2902) not writable by the default list.
@Suite struct BlocklistRouteTests {
    let central = FakeCentral()
    let gateway: Gateway
    let dev = "/v1/devices/F0:00:00:00:00:01"

    init() throws {
        var blocklist = Blocklist.standard
        blocklist.add(try Blocklist(parsing: "2a29\nffe1 exclude-writes\n180d\n", source: "ops.txt"))
        gateway = Gateway(central: central, version: "test", blocklist: blocklist)
    }

    var router: Router { gateway.router() }

    func expectNotAllowed(_ method: String, _ path: String, body: String = "", _ message: String? = nil) async throws {
        let reply = try await call(router, method, path, body: body)
        #expect(reply.status == 403, "\(method) \(path)")
        #expect(reply.error?["domain"] as? String == "CBErrorDomain")
        #expect(reply.error?["code"] as? Int == 8)
        #expect(reply.error?["name"] as? String == "uuidNotAllowed")
        if let message { #expect(reply.error?["message"] as? String == message) }
    }

    @Test func hiddenCharacteristicsAreLeftOutOfEveryListing() async throws {
        let gatt = try await call(router, "GET", dev + "/gatt")
        let services = try #require(gatt.json["services"] as? [[String: Any]])
        #expect(services.map { ($0["characteristics"] as? [[String: Any]])?.count } == [0, 0, 1])
        let all = try await call(router, "GET", dev + "/characteristics")
        #expect((all.json["characteristics"] as? [[String: Any]])?.map { $0["handle"] as? String } == ["0x0032"])
        let inService = try await call(router, "GET", dev + "/services/0x0010/characteristics")
        #expect((inService.json["characteristics"] as? [[String: Any]])?.isEmpty == true)
        let service = try await call(router, "GET", dev + "/services/0x0020")
        #expect((service.json["characteristics"] as? [[String: Any]])?.isEmpty == true)
    }

    @Test func addressingAHiddenCharacteristicIsNotAllowed() async throws {
        try await expectNotAllowed("GET", dev + "/characteristics/2a29", "characteristic 2a29 is in the GATT blocklist: it is hidden from clients")
        try await expectNotAllowed("GET", dev + "/characteristics/0x0012/value")
        try await expectNotAllowed("GET", dev + "/services/0x0020/characteristics/2a29/value")
        try await expectNotAllowed("PUT", dev + "/characteristics/0x0022/value", body: #"{"value": "00"}"#)
        try await expectNotAllowed("POST", dev + "/characteristics/0x0012/notifications")
        try await expectNotAllowed("GET", dev + "/characteristics/0x0012/descriptors")
        // What does not exist is still not found.
        #expect(try await call(router, "GET", dev + "/characteristics/0x0099/value").status == 404)
    }

    @Test func aHiddenServiceTakesItsCharacteristicsWithIt() async throws {
        let router = Gateway(central: central, version: "test", blocklist: try Blocklist(parsing: "180a", source: "ops")).router()
        let services = try await call(router, "GET", dev + "/services")
        #expect((services.json["services"] as? [[String: Any]])?.map { $0["handle"] as? String } == ["0x0030"])
        for path in ["/services/180a", "/services/0x0010/characteristics", "/services/0x0020/characteristics/2a29/value",
                     "/characteristics/2a29", "/characteristics/0x0022/value"] {
            let reply = try await call(router, "GET", dev + path)
            #expect(reply.status == 403, "\(path)")
            #expect(reply.error?["name"] as? String == "uuidNotAllowed", "\(path)")
        }
    }

    @Test func anExcludedWriteIsRefusedBeforeItReachesTheDevice() async throws {
        #expect(try await call(router, "GET", dev + "/characteristics/ffe1/value").status == 200)
        try await expectNotAllowed("PUT", dev + "/characteristics/ffe1/value", body: #"{"value": "00"}"#,
                                   "writing characteristic 0x0032 (ffe1) is not allowed: the GATT blocklist has ffe1 exclude-writes")
        #expect(central.writes.withLock { $0.isEmpty })
        // Notifications are reads.
        #expect(try await call(router, "POST", dev + "/characteristics/ffe1/notifications").status == 200)
    }

    @Test func theDefaultListRefusesWritingTheCCCDButNotSubscribing() async throws {
        let descriptors = try await call(router, "GET", dev + "/characteristics/ffe1/descriptors")
        #expect((descriptors.json["descriptors"] as? [[String: Any]])?.map { $0["handle"] as? String } == ["0x0034"])
        #expect(try await call(router, "GET", dev + "/characteristics/ffe1/descriptors/2902/value").status == 200)
        try await expectNotAllowed("PUT", dev + "/characteristics/ffe1/descriptors/2902/value", body: #"{"value": "0100"}"#,
                                   "writing descriptor 0x0034 (2902) is not allowed: the GATT blocklist has 2902 exclude-writes")
        try await expectNotAllowed("PUT", dev + "/descriptors/0x0034/value", body: #"{"value": "0100"}"#)
        #expect(try await call(router, "POST", dev + "/characteristics/ffe1/notifications").status == 200)
        #expect(central.notify.all.map(\.enabled) == [true])
    }

    @Test func advertisedServiceUUIDsStayListed() async throws {
        let devices = try await call(router, "GET", "/v1/devices")
        let advertisement = (devices.json["devices"] as? [[String: Any]])?.first?["advertisement"] as? [String: Any]
        #expect(advertisement?["serviceUUIDs"] as? [String] == ["0000180d-0000-1000-8000-00805f9b34fb"])
    }

    @Test func theEntriesInForceAreListed() async throws {
        let reply = try await call(router, "GET", "/v1/blocklist")
        let entries = try #require(reply.json["entries"] as? [[String: Any]])
        let byUUID = Dictionary(uniqueKeysWithValues: entries.map { ($0["uuid"] as? String ?? "", $0) })
        let ffe1 = try #require(byUUID["0000ffe1-0000-1000-8000-00805f9b34fb"])
        #expect(ffe1["exclude"] as? String == "writes")
        #expect(ffe1["sources"] as? [String] == ["ops.txt:2"])
        #expect(byUUID["00001812-0000-1000-8000-00805f9b34fb"]?["exclude"] as? String == "all")
        #expect(byUUID["00001812-0000-1000-8000-00805f9b34fb"]?["sources"] as? [String] == ["default:3"])
        #expect(byUUID["00002902-0000-1000-8000-00805f9b34fb"]?["sources"] as? [String] == ["default:19"])
        #expect(byUUID["00002a25-0000-1000-8000-00805f9b34fb"]?["exclude"] as? String == "reads")
        #expect(entries.count == Blocklist.standard.entries.count + 3)
    }
}

/// Notifications and WebSocket commands under a list that forbids reading ffe1.
@Suite struct BlocklistStreamTests {
    let central = FakeCentral()
    let gateway: Gateway
    let device = "F0:00:00:00:00:01"

    init() throws {
        gateway = Gateway(central: central, version: "test", blocklist: try Blocklist(parsing: "ffe1 exclude-reads", source: "ops"))
    }

    func send(_ command: String) async throws -> [String: Any] {
        let client = StreamClient(id: 1, transport: .stream(SSETransport(body: StreamBody(capacityBytes: 1 << 16))))
        let session = CommandSession(gateway: gateway, client: client)
        return try JSONSerializationLite.object(await session.handle(Array(command.utf8)))
    }

    @Test(arguments: [
        #"{"op": "subscribe", "id": "1", "device": "F0:00:00:00:00:01", "characteristic": "ffe1"}"#,
        #"{"op": "read", "id": "1", "device": "F0:00:00:00:00:01", "characteristic": "0x0032"}"#,
    ])
    func webSocketCommandsAreRefused(command: String) async throws {
        let reply = try await send(command)
        #expect(reply["op"] as? String == "error")
        #expect(reply["id"] as? String == "1")
        let error = try #require(reply["error"] as? [String: Any])
        #expect(error["code"] as? Int == 8)
        #expect(error["name"] as? String == "uuidNotAllowed")
        #expect(central.notify.all.isEmpty)
    }

    @Test func aWebSocketWriteIsAllowed() async throws {
        let reply = try await send(#"{"op": "write", "id": "2", "device": "F0:00:00:00:00:01", "characteristic": "ffe1", "value": "00"}"#)
        #expect(reply["op"] as? String == "result")
    }

    @Test func restAndServerSentEventSubscriptionsAreRefused() async throws {
        let router = gateway.router()
        let rest = try await call(router, "POST", "/v1/devices/\(device)/characteristics/ffe1/notifications")
        #expect(rest.status == 403)
        #expect(rest.error?["name"] as? String == "uuidNotAllowed")
        let sse = try await call(router, "GET", "/v1/events?device=\(device)&characteristic=ffe1")
        #expect(sse.status == 403)
        #expect(sse.error?["code"] as? Int == 8)
        #expect(central.notify.all.isEmpty)
        #expect(gateway.restoration.current.holds.isEmpty)
    }

    /// Values of a characteristic clients may not read do not become events, whoever started them.
    @Test func valuesOfAnUnreadableCharacteristicAreNotPassedOn() {
        let seen = Mutex<[UInt16]>([])
        let guarded = BlocklistedCentral(base: central, blocklist: gateway.blocklist)
        guarded.setEventHandler { event in
            if case .value(let update) = event { seen.withLock { $0.append(update.characteristicHandle) } }
        }
        for (handle, uuid) in [(UInt16(0x0032), "ffe1"), (0x0012, "2a29")] {
            central.handler(.value(ValueUpdate(device: BluetoothAddress(device)!, serviceHandle: 0x0030, serviceUUID: BluetoothUUID("ffe0")!,
                                               characteristicHandle: handle, characteristicUUID: BluetoothUUID(uuid)!, value: [1])))
        }
        #expect(seen.withLock { $0 } == [0x0012])
    }
}
