import BLE
import Glibc
import Sensors
import Testing
@testable import GatewayCore
import GatewayTesting

/// The peripheral role over a fake stack: definitions checked whole, reads and writes of
/// centrals answered from stored values or by the client that claimed the characteristic, with
/// its deadline, and what the state file keeps.
@Suite struct PeripheralRoleTests {
    let stack = FakePeripheralManager()
    let gateway: Gateway
    let session: CommandSession
    static let greeting = #"{"uuid": "5a1e0001-0000-4000-8000-00805f9b34fb", "characteristics": [{"uuid": "5a1e0002-0000-4000-8000-00805f9b34fb", "properties": ["read", "write", "notify"], "value": "hello", "format": "utf8", "descriptors": [{"uuid": "2901", "value": "Greeting", "format": "utf8"}]}]}"#
    let central = BluetoothAddress("00:AA:01:02:00:03")!

    init() {
        gateway = Gateway(central: FakeCentral(), version: "test", peripheral: stack)
        session = CommandSession(gateway: gateway, client: StreamClient(id: 1, transport: .sink(EventSink { _, _, _ in })))
    }

    var role: PeripheralRole { gateway.peripheral! }

    func define(_ json: String = greeting) async throws -> RegisteredService {
        try await role.addService(try JSON.decode(ServiceDefinition.self, from: Array(json.utf8)))
    }

    func send(_ command: String) async throws -> [String: Any] {
        try JSONSerializationLite.object(await session.handle(Array(command.utf8)))
    }

    func read(_ offset: Int = 0, descriptor: Int? = nil) async -> PeripheralResponse {
        await stack.request(PeripheralRequest(attribute: LocalAttribute(service: 1, characteristic: 0, descriptor: descriptor), kind: .read,
                                              central: central, offset: offset, mtu: 23))
    }

    func write(_ bytes: [UInt8], offset: Int = 0, withResponse: Bool = true) async -> PeripheralResponse {
        await stack.request(PeripheralRequest(attribute: LocalAttribute(service: 1, characteristic: 0), kind: .write(bytes, withResponse: withResponse),
                                              central: central, offset: offset, mtu: 23))
    }

    @Test func aDefinedServiceAnswersReadsWithItsValueAndStoresWrites() async throws {
        let service = try await define()
        #expect(service.id == 1 && service.service.characteristics[0].permissions == [.readable, .writeable])
        #expect(await read() == .value(Array("hello".utf8)))
        #expect(await read(3) == .value(Array("lo".utf8)))
        #expect(await read(6) == .error(.invalidOffset))
        #expect(await read(descriptor: 0) == .value(Array("Greeting".utf8)))
        #expect(await write(Array("p!".utf8), offset: 3) == .done)
        #expect(role.value(LocalAttribute(service: 1, characteristic: 0)) == Array("help!".utf8))
        #expect(await write([UInt8](repeating: 1, count: 600)) == .error(.invalidAttributeValueLength))
    }

    @Test func aValueSetIsSentToSubscribersOnlyWhenTheCharacteristicNotifies() async throws {
        _ = try await define()
        let attribute = LocalAttribute(service: 1, characteristic: 0)
        #expect(try await role.setValue([1], for: "5a1e0002-0000-4000-8000-00805f9b34fb").sent == false)
        stack.subscribed.withLock { _ = $0.insert(attribute) }
        #expect(try await role.setValue([2], for: "5a1e0002-0000-4000-8000-00805f9b34fb").sent == true)
        #expect(stack.updates.map(\.1) == [[1], [2]])
        #expect(await read() == .value([2]))
    }

    @Test func badDefinitionsAreRefusedWithTheirReasonAndNothingIsServed() async throws {
        let cases: [(String, String)] = [
            (#"{"uuid": "1812", "characteristics": [{"uuid": "2a4d", "properties": ["read"]}]}"#, "blocklist"),
            (#"{"uuid": "5a1e0003-0000-4000-8000-00805f9b34fb", "characteristics": []}"#, "at least one characteristic"),
            (#"{"uuid": "5a1e0003-0000-4000-8000-00805f9b34fb", "characteristics": [{"uuid": "2a00", "properties": ["fly"]}]}"#, "unknown property \"fly\""),
            (#"{"uuid": "5a1e0003-0000-4000-8000-00805f9b34fb", "characteristics": [{"uuid": "2a00", "properties": ["read"], "permissions": ["writeable"]}]}"#, "needs a read permission"),
            (#"{"uuid": "5a1e0003-0000-4000-8000-00805f9b34fb", "characteristics": [{"uuid": "2a00", "properties": ["notify"], "descriptors": [{"uuid": "2902"}]}]}"#, "is the stack's"),
            (#"{"uuid": "5a1e0003-0000-4000-8000-00805f9b34fb", "characteristics": [{"uuid": "2a00", "properties": ["read"], "value": "\#(String(repeating: "00", count: 513))"}]}"#, "at most 512"),
            (#"{"uuid": "5a1e0003-0000-4000-8000-00805f9b34fb", "characteristics": [{"uuid": "2a00", "properties": ["read"]}, {"uuid": "2a00", "properties": ["read"]}]}"#, "already a characteristic"),
            (#"{"uuid": "5a1e0003-0000-4000-8000-00805f9b34fb", "characteristics": [{"uuid": "2a00", "properties": ["read"], "colour": 1}]}"#, "unknown field"),
        ]
        for (json, reason) in cases {
            await #expect(throws: BLEError.self) { _ = try await define(json) }
            do { _ = try await define(json) } catch let error as BLEError {
                #expect(error.message.contains(reason), "\(json): \(error.message)")
            }
        }
        _ = try await define()
        do { _ = try await define(); Issue.record("the same service twice") } catch let error as BLEError {
            #expect(error.message.contains("served already"))
        }
        #expect(await stack.services().count == 1)
    }

    @Test func aClaimedReadIsAnsweredByTheClaimingSocket() async throws {
        _ = try await define()
        let ack = try await send(#"{"op": "claim", "id": "1", "characteristic": "5a1e0002-0000-4000-8000-00805f9b34fb", "format": "utf8"}"#)
        #expect(ack["op"] as? String == "ack" && ack["subscription"] as? String == "s1")
        async let answer = read()
        // The first request is r1, sent to the socket as an event; it answers.
        while role.waitingRequests == 0 { try await Task.sleep(for: .milliseconds(5)) }
        let reply = try await send(#"{"op": "respond", "id": "2", "request": "r1", "value": "21.5", "format": "utf8"}"#)
        #expect(reply["op"] as? String == "ack")
        #expect(await answer == .value(Array("21.5".utf8)))
        // Answered once only.
        let again = try await send(#"{"op": "respond", "id": "3", "request": "r1", "value": "01"}"#)
        #expect((again["error"] as? [String: Any])?["name"] as? String == "connectionTimeout")
    }

    @Test func aClaimedWriteCanBeRefusedWithAnATTError() async throws {
        _ = try await define()
        _ = try await send(#"{"op": "claim", "id": "1", "characteristic": "5a1e0002-0000-4000-8000-00805f9b34fb"}"#)
        async let answer = write([9])
        while role.waitingRequests == 0 { try await Task.sleep(for: .milliseconds(5)) }
        #expect(try await send(#"{"op": "respond", "id": "2", "request": "r1", "error": "writeNotPermitted"}"#)["op"] as? String == "ack")
        #expect(await answer == .error(.writeNotPermitted))
        #expect(role.value(LocalAttribute(service: 1, characteristic: 0)) == Array("hello".utf8))
    }

    @Test func aClaimEndsWithItsSocketAndWaitingRequestsFail() async throws {
        _ = try await define()
        _ = try await send(#"{"op": "claim", "id": "1", "characteristic": "5a1e0002-0000-4000-8000-00805f9b34fb"}"#)
        async let answer = read()
        // The request waits (the socket has not answered); the socket closes.
        while role.waitingRequests == 0 { try await Task.sleep(for: .milliseconds(5)) }
        await session.end()
        #expect(await answer == .error(.unlikelyError))
        #expect(await role.snapshot().claimed.isEmpty)
        #expect(await read() == .value(Array("hello".utf8)))  // the stored value again
    }

    @Test func anUnansweredRequestFailsAtTheDeadline() async throws {
        let hub = EventHub()
        let role = PeripheralRole(manager: stack, hub: hub, blocklist: .standard, restoration: Restoration(directory: nil, log: { _ in }),
                                  answerDeadline: .milliseconds(200), log: { _ in })
        _ = try await role.addService(try JSON.decode(ServiceDefinition.self, from: Array(Self.greeting.utf8)))
        let owner = role.newOwner()
        _ = try role.claim("5a1e0002-0000-4000-8000-00805f9b34fb", owner: owner)
        #expect(await read() == .error(.unlikelyError))
        #expect(throws: BLEError.self) { try role.respond("r1", owner: owner, with: .value([1])) }
        // Claimed once per socket; a second claim of it is refused, not stacked.
        #expect(throws: BLEError.self) { _ = try role.claim("5a1e0002-0000-4000-8000-00805f9b34fb", owner: owner) }
    }

    @Test func anAnswerMustFitItsRequest() async throws {
        _ = try await define()
        _ = try await send(#"{"op": "claim", "id": "1", "characteristic": "5a1e0002-0000-4000-8000-00805f9b34fb"}"#)
        async let answer = read()
        while role.waitingRequests == 0 { try await Task.sleep(for: .milliseconds(5)) }
        let bare = try await send(#"{"op": "respond", "id": "2", "request": "r1"}"#)
        #expect((bare["error"] as? [String: Any])?["message"] as? String == "request r1 is a read: answer it with a value (or an error)")
        #expect(try await send(#"{"op": "respond", "id": "3", "request": "r1", "value": "07"}"#)["op"] as? String == "ack")
        #expect(await answer == .value([7]))
    }

    @Test func theStateFileKeepsServicesAndAdvertisementsForTheNextStart() async throws {
        let directory = "/tmp/gattway-peripheral-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        mkdir(directory, 0o700)
        defer { _ = unlink(directory + "/state.json"); rmdir(directory) }
        let first = Gateway(central: FakeCentral(), version: "test", stateDirectory: directory, peripheral: FakePeripheralManager())
        _ = try await first.peripheral!.addService(try JSON.decode(ServiceDefinition.self, from: Array(Self.greeting.utf8)))
        _ = try await first.peripheral!.startAdvertising(try JSON.decode(AdvertisementRequest.self, from: Array(#"{"localName": "demo"}"#.utf8)))
        let stack = FakePeripheralManager()
        let next = Gateway(central: FakeCentral(), version: "test", stateDirectory: directory, peripheral: stack)
        await next.restore()
        #expect(await stack.services().map(\.service.uuid) == [BluetoothUUID("5a1e0001-0000-4000-8000-00805f9b34fb")!])
        #expect(await stack.advertisements().map(\.definition.localName) == ["demo"])
        // Removed: not kept.
        try await next.peripheral!.removeService(id: 1)
        #expect(next.restoration.keptPeripheral.services.isEmpty)
    }

    @Test func readOnlySocketsCannotClaim() async throws {
        _ = try await define()
        let readOnly = CommandSession(gateway: gateway, client: StreamClient(id: 2, transport: .sink(EventSink { _, _, _ in })), readOnly: true)
        let reply = try JSONSerializationLite.object(await readOnly.handle(Array(#"{"op": "claim", "id": "1", "characteristic": "5a1e0002-0000-4000-8000-00805f9b34fb"}"#.utf8)))
        #expect((reply["error"] as? [String: Any])?["name"] as? String == "insufficientAuthorization")
    }

    @Test func presetsMakeFramesTheSensorDecodersRead() throws {
        let beacon = try JSON.decode(AdvertisementRequest.self, from: Array(#"{"iBeacon": {"uuid": "e2c56db5-dffb-48d2-b060-d0f5a71096e0", "major": 1, "minor": 2}}"#.utf8)).definition()
        #expect(beacon.connectable == false)
        let frame = try #require(beacon.manufacturerData[0x004C])
        let reading = Sensors.decode(AdvertisementData(manufacturerData: [0x004C: frame]), address: nil)
        #expect(reading?.format == .ibeacon)
        let url = try JSON.decode(AdvertisementRequest.self, from: Array(#"{"eddystone": {"url": "https://example.com/"}}"#.utf8)).definition()
        #expect(url.serviceData[BluetoothUUID("feaa")!] == [0x10, 0xEC, 0x03] + Array("example".utf8) + [0x00])
        for bad in [#"{"eddystone": {"url": "ftp://x"}}"#, #"{"iBeacon": {"uuid": "x"}}"#, #"{"localName": ""}"#, #"{"minInterval": 5}"#,
                    #"{"manufacturerData": {"apple": "00"}}"#] {
            #expect(throws: BLEError.self, "\(bad)") { _ = try JSON.decode(AdvertisementRequest.self, from: Array(bad.utf8)).definition() }
        }
    }
}
