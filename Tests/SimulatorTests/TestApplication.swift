import BLE
import DBus
import Synchronization
import Testing
@testable import Simulator

/// A peripheral-role client on a bus connection of its own, as gattway's BlueZ side exports
/// one: a GATT application at /test/app (one service: a readable, writable, notifying
/// characteristic with a user description, and one whose reads the application refuses) and an
/// advertisement at /test/adv. It records every call bluetoothd makes. Each object has a Handle
/// of 0 (any), which bluetoothd sets to the one it gives.
final class TestApplication: Sendable {
    static let service = "5a1e0001-0000-4000-8000-00805f9b34fb"
    static let value = "5a1e0002-0000-4000-8000-00805f9b34fb"
    static let refused = "5a1e0003-0000-4000-8000-00805f9b34fb"
    static let appPath = ObjectPath("/test/app")!
    static let advertisementPath = ObjectPath("/test/adv")!
    static let servicePath = ObjectPath("/test/app/service0")!
    static let valuePath = ObjectPath("/test/app/service0/char0")!
    static let refusedPath = ObjectPath("/test/app/service0/char1")!
    static let descriptorPath = ObjectPath("/test/app/service0/char0/desc0")!

    let connection: Connection
    private let sim: Sim
    private let recorded = Mutex<[Message]>([])
    /// The objects GetManagedObjects answers (a test may replace them).
    let tree: Mutex<[(ObjectPath, [(String, [(String, Value)])])]>
    let advertisement: Mutex<[(String, Value)]>
    /// What an advertisement at any other path says: a beacon.
    let beacon: Mutex<[(String, Value)]> = Mutex([
        ("Type", .string("broadcast")),
        ("ManufacturerData", .dictionary(key: Types.q, value: Types.v, [.init(.uint16(0x004C), .variant(.bytes([3])))])),
    ])

    /// The error the refused characteristic's reads get.
    private let refusal: BusError

    init(_ sim: Sim, refusal: BusError = BusError(name: "org.bluez.Error.NotPermitted", message: "no")) throws {
        self.sim = sim
        self.refusal = refusal
        connection = try Connection(address: sim.bus.address)
        tree = Mutex([
            (Self.servicePath, [(Interface.service, [("UUID", .string(Self.service)), ("Primary", .bool(true)), ("Handle", .uint16(0))])]),
            (Self.valuePath, [(Interface.characteristic, [("UUID", .string(Self.value)), ("Service", .objectPath(Self.servicePath)),
                                                          ("Flags", .strings(["read", "write", "write-without-response", "notify"])),
                                                          ("Handle", .uint16(0))])]),
            (Self.refusedPath, [(Interface.characteristic, [("UUID", .string(Self.refused)), ("Service", .objectPath(Self.servicePath)),
                                                            ("Flags", .strings(["read"])), ("Handle", .uint16(0))])]),
            (Self.descriptorPath, [(Interface.descriptor, [("UUID", .string("2901")), ("Characteristic", .objectPath(Self.valuePath)),
                                                           ("Flags", .strings(["read"])), ("Handle", .uint16(0))])]),
        ])
        advertisement = Mutex([("Type", .string("peripheral")), ("LocalName", .string("sim-periph")), ("Discoverable", .bool(true)),
                               ("ServiceUUIDs", .strings([Self.service])),
                               ("ManufacturerData", .dictionary(key: Types.q, value: Types.v, [.init(.uint16(0xFFFF), .variant(.bytes([1, 2])))]))])
        connection.setMethodCallHandler { [weak self] call in self?.received(call) }
    }

    deinit { connection.close() }

    private func received(_ call: Message) {
        recorded.withLock { $0.append(call) }
        let answer: Message
        switch (call.member, call.path) {
        case ("GetManagedObjects", _):
            let objects = tree.withLock { $0 }
            answer = call.reply([.dictionary(key: Types.o, value: Types.asasv, objects.map { path, interfaces in
                .init(.objectPath(path), .dictionary(key: Types.s, value: Types.asv, interfaces.map { .init(.string($0.0), .stringVariantDictionary($0.1)) }))
            })])
        case ("GetAll", let path):
            let properties = path == Self.advertisementPath ? advertisement.withLock { $0 } : beacon.withLock { $0 }
            answer = call.reply([.stringVariantDictionary(properties)])
        case ("ReadValue", .some(Self.valuePath)): answer = call.reply([.bytes(Array("hello".utf8))])
        case ("ReadValue", .some(Self.descriptorPath)): answer = call.reply([.bytes(Array("greeting".utf8))])
        case ("ReadValue", .some(Self.refusedPath)):
            answer = call.errorReply(refusal)
        default: answer = call.reply()
        }
        if !call.noReplyExpected { try? connection.send(answer) }
    }

    func register(on adapter: String = "hci0") async throws {
        try await sim.call("/org/bluez/" + adapter, Interface.gattManager, "RegisterApplication",
                           [.objectPath(Self.appPath), .emptyDictionary(key: "s", value: "v")], from: connection)
    }

    func advertise(on adapter: String = "hci0", path: ObjectPath = advertisementPath) async throws {
        try await sim.call("/org/bluez/" + adapter, Interface.advertisingManager, "RegisterAdvertisement",
                           [.objectPath(path), .emptyDictionary(key: "s", value: "v")], from: connection)
    }

    /// The application's characteristic changes its value (a notification to subscribers).
    func changeValue(_ bytes: [UInt8]) throws {
        try connection.send(.signal(path: Self.valuePath, interface: Interface.properties, member: "PropertiesChanged",
                                    [.string(Interface.characteristic), .stringVariantDictionary([("Value", .bytes(bytes))]), .strings([])]))
    }

    func calls(_ member: String, _ path: ObjectPath? = nil) -> [Message] {
        recorded.withLock { $0.filter { $0.member == member && (path == nil || $0.path == path) } }
    }

    /// The first call of `member` (on `path`), waiting up to `timeout` for it.
    @discardableResult
    func call(_ member: String, _ path: ObjectPath? = nil, count: Int = 1, timeout: Duration = .seconds(5),
              _ sourceLocation: SourceLocation = #_sourceLocation) async throws -> Message {
        let deadline = ContinuousClock.now + timeout
        while true {
            let found = calls(member, path)
            if found.count >= count { return found[count - 1] }
            guard ContinuousClock.now < deadline else {
                Issue.record("the application got no \(member) within \(timeout)", sourceLocation: sourceLocation)
                throw BusError.timedOut(member)
            }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    /// The Handle bluetoothd set on `path`.
    func handle(_ path: ObjectPath) -> UInt16? {
        guard let set = calls("Set", path).last, case .uint16(let h) = set.body[2].unwrapped else { return nil }
        return h
    }
}
