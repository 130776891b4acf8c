import BLE
import FoundationEssentials
import HTTPServer
import Synchronization
import Testing
import Threading
@testable import GatewayCore
import GatewayTesting
@testable import HTTPAPI

/// A central whose one device connects and disconnects, counting reads, connects and
/// disconnects; `notify` sends a value event as the device would.
final class LinkCentral: Central {
    struct Counts: Equatable { var reads = 0, connects = 0, disconnects = 0 }
    let id = BluetoothAddress("F0:00:00:00:00:01")!
    let counts = Mutex(Counts())
    let connected = Mutex(false)
    let value = Mutex<[UInt8]>([100])
    let handler = HandlerSlot<CentralEvent>()
    let notify = NotifyCalls()

    static let battery = GATTCharacteristic(handle: 0x001d, uuid: BluetoothUUID("2a19")!, serviceHandle: 0x001b,
                                            properties: [.read, .notify], flags: ["read", "notify"], isNotifying: false,
                                            descriptors: [GATTDescriptor(handle: 0x001f, uuid: BluetoothUUID("2902")!)])
    let tree = [GATTService(handle: 0x001b, uuid: BluetoothUUID("180f")!, isPrimary: true, characteristics: [LinkCentral.battery])]

    func notify(_ bytes: [UInt8]) {
        value.withLock { $0 = bytes }
        handler(.value(ValueUpdate(device: id, serviceHandle: 0x001b, serviceUUID: BluetoothUUID("180f")!,
                                   characteristicHandle: 0x001d, characteristicUUID: BluetoothUUID("2a19")!, value: bytes)))
    }

    func setEventHandler(_ handler: @escaping @Sendable (CentralEvent) -> Void) { self.handler.set(handler) }
    func status() async -> ManagerStatus { ManagerStatus(state: .poweredOn, adapter: "hci0") }
    func adapters() async throws(BLEError) -> [AdapterInfo] { [] }
    func startScan(_ options: ScanOptions) async throws(BLEError) -> ScanStatus { await scanStatus() }
    func stopScan() async throws(BLEError) -> ScanStatus { await scanStatus() }
    func scanStatus() async -> ScanStatus { ScanStatus(scanning: false, options: nil, startedAt: nil, stopsAt: nil, discovered: 0) }
    func peripherals() async -> [PeripheralInfo] { [info] }
    func peripheral(_ id: BluetoothAddress) async throws(BLEError) -> PeripheralInfo {
        guard id == self.id else { throw BLEError(.unknownDevice, "no device \(id)") }
        return info
    }
    private var info: PeripheralInfo {
        PeripheralInfo(id: id, addressType: "public", name: "Sim Heart Rate", rssi: -55, lastSeen: nil,
                       state: connected.withLock { $0 } ? .connected : .disconnected, paired: false, advertisement: AdvertisementData())
    }
    func connect(_ id: BluetoothAddress, timeout: Duration, autoReconnect: Bool) async throws(BLEError) -> PeripheralInfo {
        _ = try await peripheral(id)
        counts.withLock { $0.connects += 1 }
        connected.withLock { $0 = true }
        handler(.connection(id: id, state: .connected, error: nil))
        return info
    }
    func disconnect(_ id: BluetoothAddress) async throws(BLEError) -> PeripheralInfo {
        counts.withLock { $0.disconnects += 1 }
        connected.withLock { $0 = false }
        handler(.connection(id: id, state: .disconnected, error: nil))
        return info
    }
    func services(_ id: BluetoothAddress) async throws(BLEError) -> [GATTService] {
        _ = try await peripheral(id)
        guard connected.withLock({ $0 }) else { throw BLEError(.notConnected, "\(id) is not connected; connect it first") }
        return tree
    }
    func characteristic(_ id: BluetoothAddress, _ ref: CharacteristicRef) async throws(BLEError) -> GATTCharacteristic {
        try ref.pick(in: try await services(id))
    }
    /// A read signals the value before it answers, as BlueZ does.
    func readValue(_ id: BluetoothAddress, _ ref: CharacteristicRef, offset: Int) async throws(BLEError) -> AttributeValue {
        let c = try await characteristic(id, ref)
        counts.withLock { $0.reads += 1 }
        let bytes = value.withLock { $0 }
        notify(bytes)
        return AttributeValue(handle: c.handle, uuid: c.uuid, value: Array(bytes.dropFirst(offset)))
    }
    func writeValue(_ id: BluetoothAddress, _ ref: CharacteristicRef, _ value: [UInt8], type: WriteType,
                    fragment: Bool) async throws(BLEError) -> WriteOutcome {
        throw BLEError(att: .writeNotPermitted, "not writable")
    }
    func readDescriptor(_ id: BluetoothAddress, _ ref: DescriptorRef, offset: Int) async throws(BLEError) -> AttributeValue {
        let d = try ref.pick(in: try await services(id))
        counts.withLock { $0.reads += 1 }
        return AttributeValue(handle: d.handle, uuid: d.uuid, value: [1, 0])
    }
    func writeDescriptor(_ id: BluetoothAddress, _ ref: DescriptorRef, _ value: [UInt8]) async throws(BLEError) -> WriteOutcome {
        throw BLEError(att: .writeNotPermitted, "not writable")
    }
    func setNotifyValue(_ enabled: Bool, _ id: BluetoothAddress, characteristic: UInt16) async throws(BLEError) -> Bool {
        try await notify.call(enabled, id, characteristic: characteristic)
    }
    func keepNotifying(_ id: BluetoothAddress, characteristic: UInt16) async {
        _ = try? await setNotifyValue(true, id, characteristic: characteristic)
    }
    func pair(_ id: BluetoothAddress, answer: PairingAnswer?, timeout: Duration) async throws(BLEError) -> PeripheralInfo {
        throw BLEError(.operationNotSupported, "LinkCentral cannot pair")
    }
    func answerPairing(_ id: BluetoothAddress, _ answer: PairingAnswer) async throws(BLEError) {
        throw BLEError(.invalidParameters, "no pairing request of \(id) is waiting for an answer")
    }
    func pairingRequest(_ id: BluetoothAddress) async -> PairingRequest? { nil }
    func removeBond(_ id: BluetoothAddress) async throws(BLEError) { throw BLEError(.operationNotSupported, "LinkCentral keeps no bonds") }
    func setTrusted(_ trusted: Bool, _ id: BluetoothAddress) async throws(BLEError) -> PeripheralInfo {
        throw BLEError(.operationNotSupported, "LinkCentral trusts no one")
    }
    func refreshGATT(_ id: BluetoothAddress, dropBond: Bool) async throws(BLEError) -> [GATTService] {
        throw BLEError(.operationNotSupported, "LinkCentral has no cache")
    }
}

@Suite struct PollingRouteTests {
    let central = LinkCentral()
    let gateway: Gateway
    let value = "/v1/devices/F0:00:00:00:00:01/characteristics/2a19/value"

    init() {
        gateway = Gateway(central: central, version: "test", idleDisconnect: .milliseconds(100))
    }

    var router: Router { gateway.router() }
    var reads: Int { central.counts.withLock { $0.reads } }

    @Test func withoutMaxAgeEveryRequestReads() async throws {
        central.connected.withLock { $0 = true }
        for _ in 0..<2 {
            let reply = try await call(router, "GET", value)
            #expect(reply.status == 200)
            #expect(reply.json["source"] as? String == "read")
            #expect(reply.json["age"] as? Int == 0)
        }
        #expect(reads == 2)
        #expect(try await call(router, "GET", value + "?maxAge=0").json["source"] as? String == "read")
        #expect(reads == 3)
    }

    /// The read's own value event is that read's: the next answer says `cache`, not `notification`.
    @Test func aYoungReadAnswersFromTheCache() async throws {
        central.connected.withLock { $0 = true }
        #expect(try await call(router, "GET", value + "?maxAge=60").json["source"] as? String == "read")
        let again = try await call(router, "GET", "/v1/devices/F0:00:00:00:00:01/services/180f/characteristics/0x001d/value?maxAge=60")
        #expect(again.status == 200)
        #expect(again.json["source"] as? String == "cache")
        #expect(again.json["value"] as? String == "64")
        #expect(reads == 1)
    }

    @Test func aNotificationReplacesTheValue() async throws {
        central.connected.withLock { $0 = true }
        _ = try await call(router, "GET", value + "?maxAge=60")
        central.notify([42])
        let reply = try await call(router, "GET", value + "?maxAge=60&format=base64")
        #expect(reply.json["source"] as? String == "notification")
        #expect(reply.json["value"] as? String == "Kg==")
        #expect(reads == 1)
    }

    /// While disconnected, the tree last seen names the attribute; a value too old is then a
    /// read, which needs the link.
    @Test func aDisconnectedDeviceAnswersFromTheCacheOnly() async throws {
        #expect(try await call(router, "GET", value + "?maxAge=60").status == 409)
        central.connected.withLock { $0 = true }
        _ = try await call(router, "GET", value + "?maxAge=60")
        central.connected.withLock { $0 = false }
        let cached = try await call(router, "GET", value + "?maxAge=60")
        #expect(cached.status == 200)
        #expect(cached.json["source"] as? String == "cache")
        #expect(try await call(router, "GET", value + "?maxAge=0").error?["name"] as? String == "notConnected")
    }

    /// Kept values are whole: with an offset, `maxAge` still reads from the device.
    @Test func aReadFromAnOffsetAlwaysReads() async throws {
        central.connected.withLock { $0 = true }
        #expect(try await call(router, "GET", value + "?maxAge=60").json["source"] as? String == "read")
        let partial = try await call(router, "GET", value + "?maxAge=60&offset=1")
        #expect(partial.status == 200)
        #expect(partial.json["source"] as? String == "read")
        #expect(reads == 2)
    }

    @Test func descriptorsAreCachedToo() async throws {
        central.connected.withLock { $0 = true }
        let path = "/v1/devices/F0:00:00:00:00:01/descriptors/0x001f/value?maxAge=60"
        #expect(try await call(router, "GET", path).json["source"] as? String == "read")
        #expect(try await call(router, "GET", path).json["source"] as? String == "cache")
        #expect(reads == 1)
    }

    @Test("bad polling parameters are 400", arguments: [
        "?maxAge=-1", "?maxAge=", "?maxAge=abc", "?maxAge=86401", "?maxAge=nan", "?maxAge=inf",
        "?connect=always", "?connect=",
    ])
    func badParameters(_ query: String) async throws {
        let reply = try await call(router, "GET", value + query)
        #expect(reply.status == 400)
        #expect(reply.error?["name"] as? String == "invalidParameters")
        #expect(central.counts.withLock { $0 } == LinkCentral.Counts())
    }

    @Test func connectAutoOnAnUnknownDeviceIs404() async throws {
        let reply = try await call(router, "GET", "/v1/devices/AA:00:00:00:00:09/characteristics/2a19/value?connect=auto&maxAge=60")
        #expect(reply.status == 404)
        #expect(reply.error?["name"] as? String == "unknownDevice")
    }

    @Test func connectAutoConnectsReadsAndDisconnectsWhenIdle() async throws {
        let reply = try await call(router, "GET", value + "?maxAge=60&connect=auto")
        #expect(reply.status == 200)
        #expect(reply.json["source"] as? String == "read")
        #expect(central.counts.withLock { $0.connects } == 1)
        #expect(gateway.autoConnections.owns(central.id))
        // Connected already: no second connect, and a cached answer.
        #expect(try await call(router, "GET", value + "?maxAge=60&connect=auto").json["source"] as? String == "cache")
        #expect(central.counts.withLock { $0.connects } == 1)
        #expect(await eventually { central.counts.withLock { $0.disconnects } == 1 })
        #expect(!gateway.autoConnections.owns(central.id))
        // The value outlives the link.
        #expect(try await call(router, "GET", value + "?maxAge=60").json["source"] as? String == "cache")
    }

    @Test func aClientsConnectTakesOverAndIsNeverIdleDisconnected() async throws {
        _ = try await call(router, "GET", value + "?connect=auto")
        #expect(gateway.autoConnections.owns(central.id))
        #expect(try await call(router, "POST", "/v1/devices/F0:00:00:00:00:01/connect").status == 200)
        #expect(!gateway.autoConnections.owns(central.id))
        _ = try await call(router, "GET", value + "?connect=auto")
        #expect(!gateway.autoConnections.owns(central.id))
        // Several idle periods pass: nobody disconnects the client's device.
        try await Task.sleep(for: .milliseconds(400))
        #expect(central.counts.withLock { $0.disconnects } == 0)
    }

    @Test func heldNotificationsKeepAnAutoConnectedDevice() async throws {
        _ = try await call(router, "GET", value + "?connect=auto")
        #expect(try await call(router, "POST", "/v1/devices/F0:00:00:00:00:01/characteristics/2a19/notifications").status == 200)
        try await Task.sleep(for: .milliseconds(400))
        #expect(central.counts.withLock { $0.disconnects } == 0)
        #expect(try await call(router, "DELETE", "/v1/devices/F0:00:00:00:00:01/characteristics/2a19/notifications").status == 200)
        #expect(await eventually { central.counts.withLock { $0.disconnects } == 1 })
    }

    @Test func cachedValuesObeyTheBlocklist() async throws {
        let blocked = Gateway(central: central, version: "test",
                              blocklist: try Blocklist(parsing: "2a19 exclude-reads\n", source: "ops.txt"))
        central.connected.withLock { $0 = true }
        central.notify([7])
        let reply = try await call(blocked.router(), "GET", value + "?maxAge=60")
        #expect(reply.status == 403)
        #expect(reply.error?["name"] as? String == "uuidNotAllowed")
    }
}

