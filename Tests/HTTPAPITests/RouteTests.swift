import BLE
import FoundationEssentials
import HTTPServer
import Synchronization
import Testing
import Threading
@testable import GatewayCore
import GatewayTesting
@testable import HTTPAPI

struct Reply {
    let status: Int
    let json: [String: Any]
    let response: Response
}

func call(_ router: Router, _ method: String, _ path: String, body: String = "") async throws -> Reply {
    let parts = path.split(separator: "?", maxSplits: 1).map(String.init)
    let query = (parts.count > 1 ? parts[1] : "").split(separator: "&").map { item -> (name: String, value: String) in
        let kv = item.split(separator: "=", maxSplits: 1).map(String.init)
        return (name: kv[0], value: kv.count > 1 ? kv[1] : "")
    }
    let response = await router.handle(Request(method: method, path: parts[0], queryItems: query, body: Array(body.utf8)))
    let object = try JSONSerializationLite.object(response.body)
    return Reply(status: response.status, json: object, response: response)
}

/// Enough JSON reading for assertions, via Codable.

extension Reply {
    var error: [String: Any]? { json["error"] as? [String: Any] }
}

@Suite struct GatewayRouteTests {
    let central = FakeCentral()
    var router: Router { Gateway(central: central, version: "test").router() }

    @Test func stateReportsNameAndAppleCode() async throws {
        let reply = try await call(router, "GET", "/v1/state")
        #expect(reply.status == 200)
        #expect(reply.json["state"] as? String == "poweredOn")
        #expect(reply.json["code"] as? Int == 5)
        #expect(reply.response.header("content-type") == "application/json")
    }

    @Test func devicesUseCoreBluetoothKeys() async throws {
        let reply = try await call(router, "GET", "/v1/devices/f0-00-00-00-00-01")
        #expect(reply.status == 200)
        #expect(reply.json["id"] as? String == "F0:00:00:00:00:01")
        #expect(reply.json["state"] as? String == "connected")
        #expect(reply.json["mtu"] as? Int == 185)
        #expect(reply.json["lastSeen"] as? String == "2027-01-15T08:00:00.000Z")
        let adv = try #require(reply.json["advertisement"] as? [String: Any])
        #expect(adv["localName"] as? String == "Sim Heart Rate")
        #expect(adv["serviceUUIDs"] as? [String] == ["0000180d-0000-1000-8000-00805f9b34fb"])
        #expect((adv["manufacturerData"] as? [String: String])?["65535"] == "4852")
        #expect((adv["serviceData"] as? [String: String])?["0000feaa-0000-1000-8000-00805f9b34fb"] == "10")
        #expect(adv["txPowerLevel"] as? Int == 4)
    }

    @Test func scanBodyBecomesOptions() async throws {
        let reply = try await call(router, "POST", "/v1/scan", body: """
            {"services": ["180D", "0xfeaa"], "namePrefix": "Sim", "rssi": -80, "timeout": 5, "allowDuplicates": true,
             "manufacturerData": [{"companyIdentifier": 76, "dataPrefix": "0215", "mask": "ffff"}],
             "serviceData": [{"service": "feaa", "dataPrefix": "10"}]}
            """)
        #expect(reply.status == 200)
        let options = try #require(central.lastScan.withLock { $0 })
        #expect(options.services == [BluetoothUUID("180d")!, BluetoothUUID("feaa")!])
        #expect(options.namePrefix == "Sim")
        #expect(options.rssi == -80)
        #expect(options.timeout == 5)
        #expect(options.allowDuplicates)
        #expect(options.manufacturerData == [ManufacturerDataFilter(companyIdentifier: 76, dataPrefix: [2, 0x15], mask: [0xFF, 0xFF])])
        #expect(options.serviceData == [ServiceDataFilter(service: BluetoothUUID("feaa")!, dataPrefix: [0x10])])
        let filters = try #require(reply.json["filters"] as? [String: Any])
        #expect(filters["services"] as? [String] == ["0000180d-0000-1000-8000-00805f9b34fb", "0000feaa-0000-1000-8000-00805f9b34fb"])
    }

    @Test func emptyScanBodyMeansNoFilters() async throws {
        let reply = try await call(router, "POST", "/v1/scan")
        #expect(reply.status == 200)
        #expect(central.lastScan.withLock { $0 } == ScanOptions())
    }

    /// Bad input: a clear 4xx in the documented shape.
    @Test("bad requests are 4xx with a CoreBluetooth error", arguments: [
        ("POST", "/v1/scan", "{not json", 400, "not valid JSON"),
        ("POST", "/v1/scan", "[1,2]", 400, "must be a JSON object"),
        ("POST", "/v1/scan", #"{"service": ["180d"]}"#, 400, "unknown field \"service\""),
        ("POST", "/v1/scan", #"{"services": ["xyz"]}"#, 400, "not a Bluetooth UUID"),
        ("POST", "/v1/scan", #"{"services": "180d"}"#, 400, "services"),
        ("POST", "/v1/scan", #"{"timeout": -1}"#, 400, "timeout"),
        ("POST", "/v1/scan", #"{"manufacturerData": [{"companyIdentifier": 70000}]}"#, 400, "companyIdentifier"),
        ("POST", "/v1/scan", #"{"manufacturerData": [{"companyIdentifier": 76, "dataPrefix": "zz"}]}"#, 400, "dataPrefix"),
        ("POST", "/v1/scan", #"{"manufacturerData": [{"companyIdentifier": 76, "mask": "ff"}]}"#, 400, "mask"),
        ("POST", "/v1/scan", #"{"serviceData": [{"service": "feaa", "extra": 1}]}"#, 400, "serviceData[0].extra"),
        ("POST", "/v1/scan", #"{"manufacturerData": [{"companyIdentifier": 76}, {"companyIdentifier": 76, "typo": 1}]}"#, 400,
         #"unknown field "manufacturerData[1].typo"; known fields: companyIdentifier, dataPrefix, mask"#),
        ("GET", "/v1/devices/not-an-address", "", 400, "not a device id"),
        ("GET", "/v1/devices/AA:BB:CC:DD:EE:FF", "", 404, "no device"),
    ])
    func badInput(method: String, path: String, body: String, status: Int, text: String) async throws {
        let reply = try await call(router, method, path, body: body)
        #expect(reply.status == status)
        let error = try #require(reply.error)
        #expect(error["domain"] as? String == "CBErrorDomain")
        #expect((error["message"] as? String)?.contains(text) == true, "\(error["message"] ?? "")")
        #expect(error["code"] as? Int == (status == 404 ? 12 : 1))
        #expect(error["name"] as? String == (status == 404 ? "unknownDevice" : "invalidParameters"))
    }

    @Test func unknownRouteAndWrongMethod() async throws {
        let notFound = try await call(router, "GET", "/v1/nothing")
        #expect(notFound.status == 404)
        #expect(notFound.error?["name"] as? String == "operationNotSupported")
        let wrongMethod = try await call(router, "PUT", "/v1/scan")
        #expect(wrongMethod.status == 405)
        #expect(wrongMethod.response.header("allow")?.contains("POST") == true)
    }
}

@Suite struct HTTPStatusTableTests {
    @Test("each CoreBluetooth code has its status", arguments: [
        (BLEError.Code.cb(.invalidParameters), 400), (.cb(.unknownDevice), 404), (.cb(.connectionTimeout), 504),
        (.cb(.connectionFailed), 502), (.cb(.connectionLimitReached), 503), (.cb(.notConnected), 409),
        (.att(.readNotPermitted), 403), (.att(.writeNotPermitted), 403), (.att(.insufficientAuthentication), 403),
        (.att(.invalidOffset), 400), (.att(.unlikelyError), 502), (.att(ATTErrorCode(rawValue: 0x80)), 502),
    ])
    func statuses(code: BLEError.Code, status: Int) {
        let error: BLEError
        switch code {
        case .cb(let c): error = BLEError(c, "x")
        case .att(let a): error = BLEError(att: a, "x")
        }
        #expect(HTTPStatus.of(error) == status)
    }
}

@Suite struct GATTRouteTests {
    let central = FakeCentral()
    var router: Router { Gateway(central: central, version: "test").router() }
    let dev = "/v1/devices/F0:00:00:00:00:01"

    @Test func servicesFilteredByUUID() async throws {
        let all = try await call(router, "GET", dev + "/services")
        #expect((all.json["services"] as? [[String: Any]])?.count == 3)
        let filtered = try await call(router, "GET", dev + "/services?uuids=ffe0")
        let services = try #require(filtered.json["services"] as? [[String: Any]])
        #expect(services.map { $0["handle"] as? String } == ["0x0030"])
        #expect(services.first?["uuid"] as? String == "0000ffe0-0000-1000-8000-00805f9b34fb")
    }

    /// `?uuids=` is OpenAPI's form-style array: empty means none, and an entry the schema's
    /// `BluetoothUUID` refuses (empty, or with spaces around it) is refused here too.
    @Test("uuids entries are exact", arguments: [
        ("uuids=", 200), ("uuids=ffe0,180a", 200), ("uuids=ffe0&uuids=180a", 200),
        ("uuids=,", 400), ("uuids=ffe0,", 400), ("uuids=%20ffe0", 400), ("uuids=ffe0,,180a", 400), ("uuids=zz", 400),
    ])
    func uuidFilterEntries(query: String, status: Int) async throws {
        let reply = try await call(router, "GET", dev + "/services?" + query)
        #expect(reply.status == status)
        if status == 400 { #expect(reply.error?["name"] as? String == "invalidParameters") }
    }

    @Test("event types are exact", arguments: [("state,connection", true), ("", true), ("state,", false), (" state", false)])
    func eventTypeEntries(types: String, accepted: Bool) {
        #expect(((try? Gateway.selection(types: types, device: nil, characteristic: nil, format: nil, everyPacket: nil)) != nil) == accepted)
    }

    @Test func ambiguousUUIDListsHandles() async throws {
        let reply = try await call(router, "GET", dev + "/services/180a")
        #expect(reply.status == 400)
        let message = try #require(reply.error?["message"] as? String)
        #expect(message.contains("0x0010") && message.contains("0x0020"), "\(message)")
        let char = try await call(router, "GET", dev + "/characteristics/2a29/value")
        #expect(char.status == 400)
        #expect((char.error?["message"] as? String)?.contains("0x0012, 0x0022") == true)
        // A handle, or the service scope, resolves it.
        #expect(try await call(router, "GET", dev + "/services/0x0020/characteristics/2a29/value").status == 200)
        #expect(try await call(router, "GET", dev + "/characteristics/0x0012/value").status == 200)
    }

    @Test func readFormats() async throws {
        let hex = try await call(router, "GET", dev + "/characteristics/ffe1/value")
        #expect(hex.json["value"] as? String == "6869203530")
        #expect(hex.json["format"] as? String == "hex")
        let utf8 = try await call(router, "GET", dev + "/characteristics/ffe1/value?format=utf8")
        #expect(utf8.json["value"] as? String == "hi 50")
        let b64 = try await call(router, "GET", dev + "/characteristics/ffe1/value?format=base64")
        #expect(b64.json["value"] as? String == "aGkgNTA=")
        #expect(try await call(router, "GET", dev + "/characteristics/ffe1/value?format=octal").status == 400)
        #expect(try await call(router, "GET", dev + "/characteristics/ffe1/value?offset=-1").status == 400)
    }

    @Test func writesAndFragmentation() async throws {
        let ok = try await call(router, "PUT", dev + "/characteristics/ffe1/value", body: #"{"value": "hello", "format": "utf8", "withResponse": false}"#)
        #expect(ok.status == 200)
        #expect(central.writes.withLock { $0.last?.1 } == Array("hello".utf8))
        #expect(central.writes.withLock { $0.last?.2 } == .withoutResponse)
        let long = String(repeating: "ab", count: 400)  // 400 bytes > MTU 185 - 3
        let fragmented = try await call(router, "PUT", dev + "/characteristics/ffe1/value", body: "{\"value\": \"\(long)\", \"withResponse\": false}")
        #expect(fragmented.status == 200)
        #expect(fragmented.json["writes"] as? Int == 3)
        let refused = try await call(router, "PUT", dev + "/characteristics/ffe1/value", body: "{\"value\": \"\(long)\", \"withResponse\": false, \"fragment\": false}")
        #expect(refused.status == 400)
        #expect(refused.error?["domain"] as? String == "CBATTErrorDomain")
        #expect(refused.error?["code"] as? Int == 13)
        #expect(try await call(router, "PUT", dev + "/characteristics/ffe1/value", body: #"{"value": "zz"}"#).status == 400)
        #expect(try await call(router, "PUT", dev + "/characteristics/ffe1/value", body: #"{}"#).status == 400)
    }

    @Test func gattTreeHasMaximumWriteLengths() async throws {
        let reply = try await call(router, "GET", dev + "/gatt")
        #expect(reply.json["mtu"] as? Int == 185)
        let lengths = try #require(reply.json["maximumWriteValueLength"] as? [String: Any])
        #expect(lengths["withoutResponse"] as? Int == 182)
        #expect(lengths["withResponse"] as? Int == 512)
        let services = try #require(reply.json["services"] as? [[String: Any]])
        let serial = try #require((services.last?["characteristics"] as? [[String: Any]])?.first)
        #expect(serial["properties"] as? [String] == ["read", "writeWithoutResponse", "write", "notify"])
        #expect((serial["descriptors"] as? [[String: Any]])?.first?["handle"] as? String == "0x0034")
    }

    @Test func badSelectors() async throws {
        let reply = try await call(router, "GET", dev + "/characteristics/nope/value")
        #expect(reply.status == 400)
        let missing = try await call(router, "GET", dev + "/characteristics/0x0099/value")
        #expect(missing.status == 404)
        #expect(missing.error?["name"] as? String == "invalidHandle")
    }
}

/// Request bodies accept exactly the cases of their `CodingKeys`, nested objects included.
@Suite struct StrictDecodingTests {
    struct Probe: StrictDecodable {
        var count: Int?
        var label: String?
        var item: Item?
        var items: [Item]?
        enum CodingKeys: String, CodingKey, CaseIterable { case count, label, item, items }
        static var nested: [CodingKeys: any StrictDecodable.Type] { [.item: Item.self, .items: Item.self] }

        struct Item: StrictDecodable {
            var x: Int
            enum CodingKeys: String, CodingKey, CaseIterable { case x }
        }
    }

    /// The message `JSON.decode` refuses `body` with, or nil when it decodes.
    func refusal<T: StrictDecodable>(_ type: T.Type, _ body: String) -> String? {
        do {
            _ = try JSON.decode(type, from: Array(body.utf8))
            return nil
        } catch {
            return error.message
        }
    }

    @Test func everyCodingKeyIsAccepted() throws {
        let probe = try JSON.decode(Probe.self, from: Array(#"{"count": 1, "label": "a", "item": {"x": 2}, "items": [{"x": 3}, {"x": 4}]}"#.utf8))
        #expect(probe.count == 1 && probe.label == "a" && probe.item?.x == 2 && probe.items?.map(\.x) == [3, 4])
        #expect(refusal(Probe.self, "") == nil)
    }

    @Test func unknownFieldsAreRefusedAtEveryDepth() {
        #expect(refusal(Probe.self, #"{"cuont": 1}"#) == #"unknown field "cuont"; known fields: count, item, items, label"#)
        #expect(refusal(Probe.self, #"{"item": {"x": 1, "y": 2}}"#) == #"unknown field "item.y"; known fields: x"#)
        #expect(refusal(Probe.self, #"{"items": [{"x": 1}, {"x": 2, "typo": 3}]}"#) == #"unknown field "items[1].typo"; known fields: x"#)
        #expect(refusal(Probe.self, #"{"items": [{"x": 1}, 2]}"#) == "items[1] must be a JSON object")
        #expect(refusal(Probe.self, "[]") == "the body must be a JSON object")
    }

    /// The fields each request body documents in openapi.yaml, as the refusal of an unknown one lists them.
    @Test func requestBodiesListTheirFields() {
        func known<T: StrictDecodable>(_ type: T.Type) -> String? {
            refusal(type, #"{"nope": 0}"#)?.split(separator: "known fields: ").last.map(String.init)
        }
        #expect(known(ScanRequest.self) == "active, allowDuplicates, manufacturerData, name, namePrefix, rssi, serviceData, services, timeout")
        #expect(known(ManufacturerDataFilterBody.self) == "companyIdentifier, dataPrefix, mask")
        #expect(known(ServiceDataFilterBody.self) == "dataPrefix, mask, service")
        #expect(known(ConnectRequest.self) == "adapter, autoReconnect, timeout")
        #expect(known(WriteRequest.self) == "format, fragment, value, withResponse")
        #expect(known(CommandSession.Command.self)
                == "characteristic, device, error, everyPacket, format, id, offset, op, request, subscription, types, value, withResponse")
    }
}

/// REST bodies are one line with sorted keys; `?pretty` indents them for people.
@Suite struct ResponseLayoutTests {
    let central = FakeCentral()
    var router: Router { Gateway(central: central, version: "test").router() }
    let dev = "/v1/devices/F0:00:00:00:00:01"

    func text(_ path: String, _ method: String = "GET") async throws -> String {
        String(decoding: try await call(router, method, path).response.body, as: UTF8.self)
    }

    @Test func compactByDefault() async throws {
        #expect(try await text("/v1/state") == #"{"adapter":"hci0","code":5,"state":"poweredOn"}"# + "\n")
        let tree = try await text(dev + "/gatt")
        #expect(tree.hasSuffix("}\n") && !tree.dropLast().contains("\n"), "\(tree)")
        #expect(tree.contains(#""uuid":"0000180a-0000-1000-8000-00805f9b34fb""#), "slashes and keys as sent, no spaces")
    }

    @Test func emptyArraysAreBrackets() async throws {
        #expect(try await text(dev + "/services?uuids=abcd") == #"{"services":[]}"# + "\n")
        #expect(try await text(dev + "/characteristics/0x0012/descriptors") == #"{"descriptors":[]}"# + "\n")
    }

    @Test("?pretty indents", arguments: ["pretty", "pretty=1", "pretty=true", "pretty=yes"])
    func prettyIndents(query: String) async throws {
        let state = try await text("/v1/state?" + query)
        #expect(state.hasPrefix("{\n  \"adapter\" : \"hci0\",\n") && state.hasSuffix("\n}\n"), "\(state)")
        // Errors too, where the request is at hand: a handler's, and the event stream's.
        #expect(try await text("/v1/devices/nope?" + query).hasPrefix("{\n  \"error\" : {\n"))
        #expect(try await text("/v1/events?types=bogus&" + query).hasPrefix("{\n  \"error\" : {\n"))
    }

    @Test("?pretty=0 and ?pretty=false are compact", arguments: ["pretty=0", "pretty=false", "pretty=FALSE"])
    func prettyOff(query: String) async throws {
        #expect(try await text("/v1/state?" + query) == #"{"adapter":"hci0","code":5,"state":"poweredOn"}"# + "\n")
    }

    /// The device list is kept encoded compact; `?pretty` neither uses nor replaces that copy.
    @Test func prettyDeviceListIsNotKept() async throws {
        let router = self.router
        func devices(_ query: String) async throws -> String {
            String(decoding: try await call(router, "GET", "/v1/devices" + query).response.body, as: UTF8.self)
        }
        let compact = try await devices("")
        #expect(!compact.dropLast().contains("\n"))
        let pretty = try await devices("?pretty")
        #expect(pretty.hasPrefix("{\n  \"devices\" : [\n"), "\(pretty)")
        #expect(try await devices("") == compact)
        #expect(try await devices("?pretty") == pretty)
    }
}
