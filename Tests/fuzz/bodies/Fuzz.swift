import BLE
import CDBus
import FoundationEssentials
import FuzzSupport
import HTTPServer
import Synchronization
@testable import BlueZ
@testable import DBus
@testable import GatewayCore
@testable import HTTPAPI

// The JSON a client sends, as the gateway reads it: `POST /v1/scan`, `PUT /v1/watch`,
// `POST …/connect` and `PUT …/characteristics/{char}/value` through the real router, and WebSocket commands through
// a real session, over a central that checks what reaches it. Input: a byte choosing the body,
// (for a write, the `{char}` text,) then the body.
//
// Properties:
// - every answer is a JSON object: 200 with its result, or the documented error body whose
//   status is the error's in the table (HTTPStatus), never a trap;
// - a scan the gateway passes on and the central accepts (`validate`, as BlueZ's does) builds
//   a SetDiscoveryFilter call libdbus takes, and reads back unchanged from the shape
//   `GET /v1/scan` reports it in; so does a watch (alone, and beside a scan), from the shape
//   `GET /v1/watch` reports;
// - a connect's timeout is within (0, 300] s; a written value reads back from its format;
// - a WebSocket reply is `ack`, `result` or `error`, carries the command's id when it had one,
//   and a socket that ends leaves no notification held.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var input = FuzzInput(data, size)
    switch input.choice(5) {
    case 0: post("/v1/scan", input.rest())
    case 4: post("/v1/watch", input.rest(), method: "PUT")
    case 1: post("/v1/devices/\(Probe.device)/connect", input.rest())
    case 2:
        // A `/` would make it another route; the path's own decoding has its target in `names`.
        let char = input.string().filter { $0 != "/" }
        post("/v1/devices/\(Probe.device)/characteristics/\(char)/value", input.rest(), method: "PUT")
    default: webSocket(input.rest())
    }
    return 0
}

let probe = Probe()
let gateway = Gateway(central: probe, version: "fuzz")
let router = API(gateway: gateway).router()

func post(_ path: String, _ body: [UInt8], method: String = "POST") {
    probe.calls.withLock { $0 = [] }
    let response = blocking { await router.handle(Request(method: method, path: path, body: body)) }
    let answer = try? JSONDecoder().decode(Answer.self, from: Data(response.body))
    require(answer != nil, "\(method) \(path): the answer is not a JSON object: \(String(decoding: response.body, as: UTF8.self))")
    if let error = answer?.error {
        // The router's own answer to a path that names no route (an empty `{char}`) is 404.
        let noRoute = response.status == 404 && error.name == "operationNotSupported"
        require(noRoute || response.status == error.status, "\(response.status) for \(error.domain) \(error.code) \(error.name)")
    } else {
        require(response.status == 200 && !probe.calls.withLock { $0 }.isEmpty, "\(response.status) without an error, the central not called")
    }
}

/// What every answer is: a JSON object, with `error` when it is one.
struct Answer: Decodable {
    struct Error: Decodable {
        var domain: String
        var code: Int
        var name: String
        var message: String

        /// The status the table gives this error; nil for a code that does not exist.
        var status: Int? {
            let code: BLEError.Code? = domain == BLEError.Domain.att.rawValue
                ? UInt8(exactly: code).map { .att(ATTErrorCode(rawValue: $0)) }
                : CBErrorCode(rawValue: code).map { .cb($0) }
            return code.map { code in
                var error = BLEError(.unknown, message)
                error.code = code
                return HTTPStatus.of(error)
            }
        }
    }
    var error: Error?
}

struct Reply: Decodable {
    var op: String
    var id: String?
    var error: Answer.Error?
}

func webSocket(_ text: [UInt8]) {
    let client = StreamClient(id: 1, transport: .stream(SSETransport(body: StreamBody(capacityBytes: 1 << 16))))
    let session = CommandSession(gateway: gateway, client: client)
    let reply = blocking { await session.handle(text) }
    let decoded = try? JSONDecoder().decode(Reply.self, from: Data(reply))
    require(decoded.map { ["ack", "result", "error"].contains($0.op) && ($0.op == "error") == ($0.error != nil) } == true,
            "reply \(String(decoding: reply, as: UTF8.self))")
    if let command = try? JSON.decode(CommandSession.Command.self, from: text) {
        require(decoded?.id == command.id, "reply to \(command.id ?? "no id") has id \(decoded?.id ?? "none")")
    }
    blocking { await session.end() }
    require(gateway.holds.count(Probe.key) == 0, "a notification is still held after its socket ended")
}

/// A central with one connected device and one characteristic (0x0012, 2a37, read, write both
/// ways, notify), which states what the gateway may hand a real one.
final class Probe: Central {
    static let device = BluetoothAddress("F0:00:00:00:00:01")!
    static let key = NotificationHolds.Key(device: device, characteristic: 0x0012)
    static let services = [
        GATTService(handle: 0x0010, uuid: BluetoothUUID(uint16: 0x180D), isPrimary: true, characteristics: [
            GATTCharacteristic(handle: 0x0012, uuid: BluetoothUUID(uint16: 0x2A37), serviceHandle: 0x0010,
                               properties: [.read, .write, .writeWithoutResponse, .notify], flags: [], isNotifying: false,
                               descriptors: [GATTDescriptor(handle: 0x0014, uuid: BluetoothUUID(uint16: 0x2902))]),
        ]),
    ]
    /// The methods called for the current input.
    let calls = Mutex<[String]>([])

    private func called(_ name: String) { calls.withLock { $0.append(name) } }

    func setEventHandler(_ handler: @escaping @Sendable (CentralEvent) -> Void) {}
    func status() async -> ManagerStatus { ManagerStatus(state: .poweredOn, adapter: "hci0") }
    func adapters() async throws(BLEError) -> [AdapterInfo] { [] }

    func startScan(_ options: ScanOptions) async throws(BLEError) -> ScanStatus {
        called("startScan")
        try options.validate()
        discoveryFilter(scan: options, watch: nil)
        let reported = JSON.encode(ScanRequest(options))
        let again = try? JSON.decode(ScanRequest.self, from: reported).options()
        require(again == options, "\(options) reads back from \(String(decoding: reported, as: UTF8.self)) as \(String(describing: again))")
        return ScanStatus(scanning: true, options: options, startedAt: nil, stopsAt: nil, discovered: 0)
    }
    func startWatch(_ options: WatchOptions) async throws(BLEError) -> WatchStatus {
        called("startWatch")
        try options.validate()
        discoveryFilter(scan: nil, watch: options)
        discoveryFilter(scan: ScanOptions(rssi: -70), watch: options)
        let reported = JSON.encode(WatchRequest(options))
        let again = try? JSON.decode(WatchRequest.self, from: reported).options()
        require(again == options, "\(options) reads back from \(String(decoding: reported, as: UTF8.self)) as \(String(describing: again))")
        return WatchStatus(watching: true, options: options, since: nil, discovering: true, devices: 0)
    }

    /// The SetDiscoveryFilter call the scanner would make libdbus takes.
    private func discoveryFilter(scan: ScanOptions?, watch: WatchOptions?) {
        let call = Message.methodCall(destination: BlueZ.service, path: adapter, interface: BlueZ.adapterInterface,
                                      member: "SetDiscoveryFilter", [.stringVariantDictionary(Discovery.filter(scan: scan, watch: watch))])
        do { dbus_message_unref(try Marshal.build(call)) } catch {
            require(false, "the discovery filter for \(String(describing: scan)) and \(String(describing: watch)) is refused: \(error)")
        }
    }

    func stopScan() async throws(BLEError) -> ScanStatus { ScanStatus(scanning: false, options: nil, startedAt: nil, stopsAt: nil, discovered: 0) }
    func scanStatus() async -> ScanStatus { ScanStatus(scanning: false, options: nil, startedAt: nil, stopsAt: nil, discovered: 0) }
    func peripherals() async -> [PeripheralInfo] { [] }

    func peripheral(_ id: BluetoothAddress) async throws(BLEError) -> PeripheralInfo {
        guard id == Self.device else { throw BLEError(.unknownDevice, "no device \(id)") }
        return PeripheralInfo(id: id, addressType: "public", name: nil, rssi: nil, lastSeen: nil, state: .connected, paired: false,
                              advertisement: AdvertisementData(), mtu: 23)
    }
    func connect(_ id: BluetoothAddress, timeout: Duration, autoReconnect: Bool) async throws(BLEError) -> PeripheralInfo {
        called("connect")
        require(timeout > .zero && timeout <= .seconds(300), "connect with a timeout of \(timeout)")
        return try await peripheral(id)
    }
    func disconnect(_ id: BluetoothAddress) async throws(BLEError) -> PeripheralInfo { try await peripheral(id) }
    func services(_ id: BluetoothAddress) async throws(BLEError) -> [GATTService] {
        _ = try await peripheral(id)
        return Self.services
    }
    func characteristic(_ id: BluetoothAddress, _ ref: CharacteristicRef) async throws(BLEError) -> GATTCharacteristic {
        try ref.pick(in: try await services(id))
    }
    func readValue(_ id: BluetoothAddress, _ ref: CharacteristicRef, offset: Int) async throws(BLEError) -> AttributeValue {
        called("readValue")
        let c = try await characteristic(id, ref)
        guard UInt16(exactly: offset) != nil else { throw BLEError(att: .invalidOffset, "offset \(offset)") }
        return AttributeValue(handle: c.handle, uuid: c.uuid, value: [0x06, 0x48])
    }
    func writeValue(_ id: BluetoothAddress, _ ref: CharacteristicRef, _ value: [UInt8], type: WriteType,
                    fragment: Bool) async throws(BLEError) -> WriteOutcome {
        called("writeValue")
        let c = try await characteristic(id, ref)
        let plan = try WritePlan(length: value.count, type: type, mtu: 23, fragment: fragment)
        for format in ValueFormat.allCases where format != .utf8 || String(validating: value, as: UTF8.self) != nil {
            require((try? format.decode(format.encode(value))) == value, "\(value) does not read back from \(format)")
        }
        return WriteOutcome(handle: c.handle, uuid: c.uuid, type: type, written: value.count, writes: plan.writes)
    }
    func readDescriptor(_ id: BluetoothAddress, _ ref: DescriptorRef, offset: Int) async throws(BLEError) -> AttributeValue {
        throw BLEError(.operationNotSupported, "not fuzzed")
    }
    func writeDescriptor(_ id: BluetoothAddress, _ ref: DescriptorRef, _ value: [UInt8]) async throws(BLEError) -> WriteOutcome {
        throw BLEError(.operationNotSupported, "not fuzzed")
    }
    func setNotifyValue(_ enabled: Bool, _ id: BluetoothAddress, characteristic: UInt16) async throws(BLEError) -> Bool {
        called("setNotifyValue")
        return enabled
    }
    func keepNotifying(_ id: BluetoothAddress, characteristic: UInt16) async { called("keepNotifying") }
    func pair(_ id: BluetoothAddress, answer: PairingAnswer?, timeout: Duration) async throws(BLEError) -> PeripheralInfo {
        called("pair")
        return try await peripheral(id)
    }
    func answerPairing(_ id: BluetoothAddress, _ answer: PairingAnswer) async throws(BLEError) { called("answerPairing") }
    func pairingRequest(_ id: BluetoothAddress) async -> PairingRequest? { nil }
    func removeBond(_ id: BluetoothAddress) async throws(BLEError) { called("removeBond") }
    func setTrusted(_ trusted: Bool, _ id: BluetoothAddress) async throws(BLEError) -> PeripheralInfo {
        called("setTrusted")
        return try await peripheral(id)
    }
    func refreshGATT(_ id: BluetoothAddress, dropBond: Bool) async throws(BLEError) -> [GATTService] {
        called("refreshGATT")
        return []
    }
}

let adapter = ObjectPath(trusted: "/org/bluez/hci0")
