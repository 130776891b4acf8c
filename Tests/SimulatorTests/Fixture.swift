import BLE
import DBus
import Synchronization
import Testing
@testable import Simulator

/// A private bus with the simulator on it, and a client connection that records every signal
/// the simulator sends (subscribed before anything happens, as a BlueZ client should).
final class Sim: Sendable {
    let bus: PrivateBus
    let server: Connection
    let client: Connection
    let simulator: Simulator
    private let recorded = Mutex<[Message]>([])
    private let closed = Mutex(false)

    static let hr = "F0:00:00:00:00:01"
    static let serial = "F0:00:00:00:00:02"
    static let secure = "F0:00:00:00:00:03"
    static let beacon = "F0:00:00:00:00:04"
    static let eddystone = "F0:00:00:00:00:05"
    static let lock = "F0:00:00:00:00:0E"
    static let nus = "F0:00:00:00:00:0F"
    static let mchp = "F0:00:00:00:00:10"
    static let hm10 = "F0:00:00:00:00:11"
    static let adapter = "/org/bluez/hci0"

    private init(_ configuration: SimulatorConfiguration) throws {
        bus = try PrivateBus()
        server = try Connection(address: bus.address)
        client = try Connection(address: bus.address)
        simulator = Simulator(connection: server, configuration: configuration)
    }

    static func start(_ configuration: SimulatorConfiguration = .builtIn) async throws -> Sim {
        let sim = try Sim(configuration)
        try await sim.client.subscribe(MatchRule(sender: "org.bluez")) { [weak sim] message in
            sim?.recorded.withLock { $0.append(message) }
        }
        try await sim.simulator.start()
        return sim
    }

    /// A simulator with `addresses` discovered and connected.
    static func connected(_ addresses: [String], _ configuration: SimulatorConfiguration = .builtIn) async throws -> Sim {
        let sim = try await start(configuration)
        try await sim.discover(addresses)
        for address in addresses { try await sim.connect(address) }
        return sim
    }

    /// Stops everything once (PrivateBus.stop must not signal a reaped pid twice).
    func close() {
        guard !closed.withLock({ c in defer { c = true }; return c }) else { return }
        simulator.stop()
        client.close()
        server.close()
        bus.stop()
    }

    deinit { close() }

    // MARK: calls

    @discardableResult
    func call(_ path: String, _ interface: String, _ member: String, _ body: [Value] = [], from connection: Connection? = nil,
              timeout: Duration = .seconds(10)) async throws -> [Value] {
        try await (connection ?? client).call(.methodCall(destination: "org.bluez", path: ObjectPath(path)!, interface: interface,
                                                          member: member, body), timeout: timeout).body
    }

    func property(_ path: String, _ interface: String, _ name: String) async throws -> Value {
        try await client.getProperty("org.bluez", ObjectPath(path)!, interface, name)
    }

    func control(_ member: String, _ body: [Value]) async throws -> [Value] {
        try await call("/io/gattway/simulator", "io.gattway.Simulator1", member, body)
    }

    /// Waits until the simulator has taken `count` calls of `member` on `path` (one waiting in
    /// it has no other sign).
    func called(_ member: String, _ path: String, count: Int = 1) async throws {
        while try await control("CallCount", [.string(member), .string(path)]).first?.integer != count {
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    func setFault(_ address: String, _ json: String) async throws {
        _ = try await control("SetFault", [.string(address), .string(json)])
    }

    // MARK: signals

    /// How many signals have arrived so far; pass it to `signal(after:)` to look only at later ones.
    var mark: Int { recorded.withLock { $0.count } }

    var signals: [Message] { recorded.withLock { $0 } }

    /// The first signal after `mark` that matches, waiting up to `timeout` for it.
    @discardableResult
    func signal(after mark: Int = 0, timeout: Duration = .seconds(5), _ sourceLocation: SourceLocation = #_sourceLocation,
                where predicate: (Message) -> Bool) async throws -> Message {
        let deadline = ContinuousClock.now + timeout
        while true {
            if let found = recorded.withLock({ $0.dropFirst(mark).first(where: predicate) }) { return found }
            guard ContinuousClock.now < deadline else {
                Issue.record("no matching signal within \(timeout)", sourceLocation: sourceLocation)
                throw BusError.timedOut("signal")
            }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    /// Signals after `mark` that match, now.
    func signals(after mark: Int, where predicate: (Message) -> Bool) -> [Message] {
        recorded.withLock { Array($0.dropFirst(mark).filter(predicate)) }
    }

    // MARK: BlueZ steps

    static func devicePath(_ address: String, on adapter: String = "hci0") -> String {
        "/org/bluez/\(adapter)/dev_" + address.replacingColons()
    }

    /// Discovery on `adapter` until the devices are exported there, then stop.
    func discover(_ addresses: [String] = [Sim.hr, Sim.serial, Sim.secure], on adapter: String = "hci0") async throws {
        let start = mark
        let adapterPath = "/org/bluez/" + adapter
        try await call(adapterPath, Interface.adapter, "StartDiscovery")
        for address in addresses {
            let path = Sim.devicePath(address, on: adapter)
            if try await managedObjects()[ObjectPath(path)!] == nil {
                try await signal(after: start) { $0.member == "InterfacesAdded" && $0.body.first?.objectPath?.rawValue == path }
            }
        }
        try await call(adapterPath, Interface.adapter, "StopDiscovery")
    }

    func connect(_ address: String, on adapter: String = "hci0", from connection: Connection? = nil) async throws {
        try await call(Sim.devicePath(address, on: adapter), Interface.device, "Connect", from: connection)
    }

    func managedObjects() async throws -> [ObjectPath: [String: [String: Value]]] {
        try await client.managedObjects(of: "org.bluez")
    }

    /// The object path of the (first) characteristic with `uuid` on a connected device.
    func characteristic(_ address: String, _ uuid: String) async throws -> String {
        try await object(address, Interface.characteristic, uuid)
    }

    func descriptor(_ address: String, _ uuid: String) async throws -> String {
        try await object(address, Interface.descriptor, uuid)
    }

    private func object(_ address: String, _ interface: String, _ uuid: String) async throws -> String {
        let want = BluetoothUUID(uuid)!.uuidString
        let prefix = Sim.devicePath(address) + "/"
        let found = try await managedObjects().filter { path, interfaces in
            path.rawValue.hasPrefix(prefix) && interfaces[interface]?["UUID"]?.string == want
        }.keys.sorted().first
        guard let found else { throw BusError(name: "test.NotFound", message: "\(uuid) on \(address)") }
        return found.rawValue
    }

    func read(_ path: String, offset: UInt16? = nil, from connection: Connection? = nil) async throws -> [UInt8] {
        let options: [(String, Value)] = offset.map { [("offset", .uint16($0))] } ?? []
        let interface = path.contains("/desc") ? Interface.descriptor : Interface.characteristic
        return try await call(path, interface, "ReadValue", [.stringVariantDictionary(options)], from: connection).first?.bytes ?? []
    }

    func write(_ path: String, _ bytes: [UInt8], type: String? = nil, offset: UInt16? = nil) async throws {
        var options: [(String, Value)] = []
        if let type { options.append(("type", .string(type))) }
        if let offset { options.append(("offset", .uint16(offset))) }
        let interface = path.contains("/desc") ? Interface.descriptor : Interface.characteristic
        try await call(path, interface, "WriteValue", [.bytes(bytes), .stringVariantDictionary(options)])
    }
}

extension String {
    func replacingColons() -> String { String(map { $0 == ":" ? "_" : $0 }) }
}

extension Message {
    /// A PropertiesChanged from `path` for `interface` that carries `name` (with `value`, if given).
    func changes(_ path: String, _ interface: String, _ name: String, _ value: Value? = nil) -> Bool {
        guard member == "PropertiesChanged", self.path?.rawValue == path, body.first?.string == interface,
              let changed = body[1].stringDictionary?[name] else { return false }
        return value == nil || changed.unwrapped == value
    }

    /// A PropertiesChanged from `path` that invalidates `name`.
    func invalidates(_ path: String, _ name: String) -> Bool {
        member == "PropertiesChanged" && self.path?.rawValue == path && (body[2].strings ?? []).contains(name)
    }

    func adds(_ path: String) -> Bool { member == "InterfacesAdded" && body.first?.objectPath?.rawValue == path }
    func removes(_ path: String) -> Bool { member == "InterfacesRemoved" && body.first?.objectPath?.rawValue == path }
}

/// Runs `body` and checks that it fails with the D-Bus error `name` (and `message`, if given).
func expectError(_ name: String, _ message: String? = nil, sourceLocation: SourceLocation = #_sourceLocation,
                 _ body: () async throws -> Void) async {
    do {
        try await body()
        Issue.record("expected \(name) \(message ?? ""), got success", sourceLocation: sourceLocation)
    } catch let error as BusError {
        #expect(error.name == name, sourceLocation: sourceLocation)
        if let message { #expect(error.message == message, sourceLocation: sourceLocation) }
    } catch {
        Issue.record("expected \(name), got \(error)", sourceLocation: sourceLocation)
    }
}
