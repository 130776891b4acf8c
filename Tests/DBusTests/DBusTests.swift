import Testing
import Glibc
@testable import DBus

/// A private dbus-daemon and two connections on it: `server` echoes every method call's body
/// back (or fails, or stays silent, as the member says); `client` talks to it.
final class Fixture: Sendable {
    let bus: PrivateBus
    let server: Connection
    let client: Connection

    init() throws {
        bus = try PrivateBus()
        server = try Connection(address: bus.address)
        client = try Connection(address: bus.address)
        let server = self.server
        server.setMethodCallHandler { call in
            switch call.member {
            case "Echo": try? server.send(call.reply(call.body))
            case "Fail": try? server.send(call.errorReply(BusError(name: "org.bluez.Error.Failed", message: "le-connection-abort-by-local")))
            default: break  // "Silent": never answers
            }
        }
    }

    func echo(_ body: [Value]) async throws -> [Value] {
        try await client.call(.methodCall(destination: server.uniqueName, path: ObjectPath(trusted: "/test"),
                                          interface: "io.gattway.Test", member: "Echo", body)).body
    }

    deinit {
        client.close()
        server.close()
        bus.stop()
    }
}

private let uuidsProps: Value = .stringVariantDictionary([
    ("UUIDs", .strings(["0000180d-0000-1000-8000-00805f9b34fb"])),
    ("RSSI", .int16(-60)),
    ("Connected", .bool(true)),
    ("ManufacturerData", .dictionary(key: Signature("q")!, value: Signature("v")!,
                                     [.init(.uint16(0x004C), .variant(.bytes([0x02, 0x15, 0xFF])))])),
    ("ServiceData", .dictionary(key: Signature("s")!, value: Signature("v")!,
                                [.init(.string("0000feaa-0000-1000-8000-00805f9b34fb"), .variant(.bytes([])))])),
])

/// The BlueZ signatures and every basic type; each must come back unchanged.
private let roundTrips: [(String, Value)] = [
    ("y", .byte(0xFF)), ("b", .bool(true)), ("b false", .bool(false)), ("n", .int16(-32768)), ("q", .uint16(65535)),
    ("i", .int32(-1)), ("u", .uint32(4_000_000_000)), ("x", .int64(.min)), ("t", .uint64(.max)), ("d", .double(-1.5)),
    ("s unicode", .string("Hé❤️ sensor")), ("s empty", .string("")), ("o", .objectPath(ObjectPath("/org/bluez/hci0")!)),
    ("g", .signature(Signature("a{sv}")!)),
    ("ay", .bytes([0, 1, 2, 255])), ("ay empty", .bytes([])),
    ("as empty", .strings([])), ("ao", .objectPaths([ObjectPath("/a")!, ObjectPath("/a/b")!])),
    ("a{sv}", uuidsProps),
    ("a{sv} empty", .emptyDictionary(key: "s", value: "v")),
    ("a{qv}", .dictionary(key: Signature("q")!, value: Signature("v")!, [.init(.uint16(0xFFFF), .variant(.bytes([0x52, 0x42])))])),
    ("a{oa{sa{sv}}}", .dictionary(key: Signature("o")!, value: Signature("a{sa{sv}}")!, [
        .init(.objectPath(ObjectPath("/org/bluez/hci0/dev_F0_00_00_00_00_01")!),
              .dictionary(key: Signature("s")!, value: Signature("a{sv}")!, [.init(.string("org.bluez.Device1"), uuidsProps)])),
    ])),
    ("(sv) nested variant", .structure([.string("x"), .variant(.variant(.int32(7)))])),
    ("aay", .array(element: Signature("ay")!, [.bytes([1]), .bytes([])])),
]

@Suite(.serialized) struct ConnectionTests {
    @Test("values round-trip through a real bus", arguments: roundTrips.map(\.0))
    func roundTrip(name: String) async throws {
        let fixture = try Fixture()
        let value = roundTrips.first { $0.0 == name }!.1
        let back = try await fixture.echo([value])
        #expect(back == [value])
        #expect(back.first?.signature == value.signature)
    }

    @Test func errorRepliesKeepNameAndText() async throws {
        let fixture = try Fixture()
        let error = await #expect(throws: BusError.self) {
            _ = try await fixture.client.call(.methodCall(destination: fixture.server.uniqueName, path: .root,
                                                          interface: "io.gattway.Test", member: "Fail"))
        }
        #expect(error?.name == "org.bluez.Error.Failed")
        #expect(error?.message == "le-connection-abort-by-local")
    }

    @Test func callsTimeOut() async throws {
        let fixture = try Fixture()
        let start = ContinuousClock.now
        let error = await #expect(throws: BusError.self) {
            _ = try await fixture.client.call(.methodCall(destination: fixture.server.uniqueName, path: .root,
                                                          interface: "io.gattway.Test", member: "Silent"), timeout: .milliseconds(300))
        }
        #expect(error?.name == "org.freedesktop.DBus.Error.NoReply")
        #expect(ContinuousClock.now - start < .seconds(5))
    }

    @Test func manyConcurrentCalls() async throws {
        let fixture = try Fixture()
        let results = try await withThrowingTaskGroup(of: Int.self) { group in
            for i in 0..<200 { group.addTask { try await fixture.echo([.int32(Int32(i))]).first?.integer ?? -1 } }
            return try await group.reduce(into: Set<Int>()) { $0.insert($1) }
        }
        #expect(results == Set(0..<200))
    }

    @Test func signalsReachOnlyMatchingSubscribers() async throws {
        let fixture = try Fixture()
        let (stream, continuation) = AsyncStream.makeStream(of: Message.self)
        try await fixture.client.subscribe(MatchRule(interface: "io.gattway.Test", member: "Changed")) { continuation.yield($0) }
        try fixture.server.send(.signal(path: ObjectPath("/x")!, interface: "io.gattway.Test", member: "Other", [.int32(1)]))
        try fixture.server.send(.signal(path: ObjectPath("/x")!, interface: "io.gattway.Test", member: "Changed", [.int32(2)]))
        var iterator = stream.makeAsyncIterator()
        let first = await iterator.next()
        #expect(first?.member == "Changed")
        #expect(first?.body == [.int32(2)])
        #expect(first?.sender == fixture.server.uniqueName)
    }

    @Test func invalidInputIsRefusedNotFatal() async throws {
        let fixture = try Fixture()
        #expect(ObjectPath("/org/bluez/hci0/dev_AA:BB") == nil)
        #expect(ObjectPath("relative") == nil)
        #expect(ObjectPath("/trailing/") == nil)
        #expect(ObjectPath("/a\u{0}b") == nil)
        await #expect(throws: BusError.self) {
            _ = try await fixture.client.call(.methodCall(destination: fixture.server.uniqueName, path: .root,
                                                          interface: "io.gattway.Test", member: "Bad-Member"))
        }
        await #expect(throws: BusError.self) {
            _ = try await fixture.echo([.array(element: Signature("s")!, [.string("a"), .int32(1)])])
        }
        await #expect(throws: BusError.self) {
            _ = try await fixture.echo([.string("nul\u{0}inside")])
        }
        // The connection still works afterwards.
        #expect(try await fixture.echo([.int32(5)]) == [.int32(5)])
    }

    @Test func unknownDestinationIsAnError() async throws {
        let fixture = try Fixture()
        let error = await #expect(throws: BusError.self) {
            _ = try await fixture.client.call(.methodCall(destination: "org.bluez", path: .root,
                                                          interface: "org.freedesktop.DBus.ObjectManager", member: "GetManagedObjects"))
        }
        #expect(error?.name == "org.freedesktop.DBus.Error.ServiceUnknown")
    }

    @Test func closedConnectionFailsCalls() async throws {
        let fixture = try Fixture()
        fixture.client.close()
        await #expect(throws: BusError.self) { _ = try await fixture.echo([]) }
    }
}

@Suite struct NameTests {
    @Test func objectPathRelations() {
        let dev = ObjectPath("/org/bluez/hci0/dev_F0_00_00_00_00_01")!
        #expect(dev.parent == ObjectPath("/org/bluez/hci0"))
        #expect(dev.isDescendant(of: ObjectPath("/org/bluez/hci0")!))
        #expect(!ObjectPath("/org/bluez/hci01")!.isDescendant(of: ObjectPath("/org/bluez/hci0")!))
        #expect(dev.lastElement == "dev_F0_00_00_00_00_01")
        #expect(ObjectPath.root.child("org") == ObjectPath("/org"))
    }

    /// Found by Tests/fuzz/names: the root was its own child "", and "a/b" made a grandchild.
    @Test func childIsOneElement() {
        #expect(ObjectPath.root.child("") == nil)
        #expect(ObjectPath.root.child("a/b") == nil)
        #expect(ObjectPath("/org")!.child("bluez/hci0") == nil)
        #expect(ObjectPath("/org")!.child("") == nil)
        #expect(ObjectPath("/org")!.child("bluez")?.rawValue == "/org/bluez")
    }

    @Test func matchRulesRenderAndMatch() throws {
        let rule = MatchRule(sender: "org.bluez", pathNamespace: ObjectPath("/org/bluez")!,
                             interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged")
        #expect(try rule.ruleString() == "type='signal',sender='org.bluez',path_namespace='/org/bluez',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged'")
        var m = Message.signal(path: ObjectPath("/org/bluez/hci0")!, interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged")
        #expect(rule.matches(m))
        m.path = ObjectPath("/org/other")
        #expect(!rule.matches(m))
        #expect(throws: BusError.self) { try MatchRule(arg0: "it's").ruleString() }
    }
}

@Suite struct DescriptorTests {
    private func openDescriptors() -> Int {
        (try? FileManagerLite.count("/proc/self/fd")) ?? 0
    }

    @Test func descriptorsInSignalsAreClosed() async throws {
        let fixture = try Fixture()
        let (stream, continuation) = AsyncStream.makeStream(of: Message.self)
        try await fixture.client.subscribe(MatchRule(interface: "io.gattway.Test", member: "WithFD")) { continuation.yield($0) }
        // A descriptor of the test's own (not stdin, which CI may have closed or redirected).
        var ends: [Int32] = [-1, -1]
        try #require(pipe(&ends) == 0)
        defer { close(ends[0]); close(ends[1]) }
        let sent = ends[0]
        let before = openDescriptors()
        // Bounded: a signal that never arrives fails the test instead of hanging the run.
        let received = try await within(.seconds(30), "500 signals with a descriptor") {
            var iterator = stream.makeAsyncIterator()
            var received = 0
            for _ in 0..<500 {
                try fixture.server.send(.signal(path: ObjectPath("/x")!, interface: "io.gattway.Test", member: "WithFD", [.unixFD(sent)]))
                guard let got = await iterator.next() else { break }
                if got.signature == "h" { received += 1 }
            }
            return received
        }
        #expect(received == 500)
        // Each received descriptor was a duplicate; none may be left open. Other suites run
        // alongside and open a few of their own: 500 leaked would show, a few dozen is noise.
        #expect(openDescriptors() - before < 100)
    }

    private struct TimedOut: Error, CustomStringConvertible {
        let what: String
        var description: String { "timed out waiting for \(what)" }
    }

    private func within<T: Sendable>(_ limit: Duration, _ what: String, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await body() }
            group.addTask { try await Task.sleep(for: limit); return nil }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let value = first else { throw TimedOut(what: what) }
            return value
        }
    }
}

/// Counts directory entries without Foundation.
enum FileManagerLite {
    static func count(_ path: String) throws -> Int {
        guard let dir = opendir(path) else { return 0 }
        defer { closedir(dir) }
        var n = 0
        while readdir(dir) != nil { n += 1 }
        return n
    }
}
