import Testing
import Synchronization
@testable import DBus

/// An application exported by one connection, used by another through the bus (as bluetoothd
/// uses a GATT application).
final class ExportRig: Sendable {
    let bus: PrivateBus
    let server: Connection
    let client: Connection
    let objects: ExportedObjects
    let root = ObjectPath(trusted: "/io/gattway/app/hci0")
    let service = ObjectPath(trusted: "/io/gattway/app/hci0/service1")
    let characteristic = ObjectPath(trusted: "/io/gattway/app/hci0/service1/char0")

    init() throws {
        bus = try PrivateBus()
        server = try Connection(address: bus.address)
        client = try Connection(address: bus.address)
        let server = self.server
        objects = ExportedObjects(root: ObjectPath(trusted: "/io/gattway/app")) { try? server.send($0) }
        let objects = self.objects
        server.setMethodCallHandler { call in
            if !objects.handle(call) { try? server.send(call.errorReply(BusError(name: "org.freedesktop.DBus.Error.UnknownObject", message: "not ours"))) }
        }
        objects.add(service, ["org.bluez.GattService1": ["UUID": .string("180d"), "Primary": .bool(true), "Handle": .uint16(0)]])
        objects.add(characteristic, ["org.bluez.GattCharacteristic1": [
            "UUID": .string("2a37"), "Service": .objectPath(service), "Flags": .strings(["read", "notify"]), "Handle": .uint16(0),
        ]])
    }

    func call(_ path: ObjectPath, _ interface: String, _ member: String, _ body: [Value] = []) async throws(BusError) -> [Value] {
        try await client.call(.methodCall(destination: server.uniqueName, path: path, interface: interface, member: member, body),
                              timeout: .seconds(5)).body
    }

    deinit {
        client.close()
        server.close()
        bus.stop()
    }
}

@Suite struct ExportedObjectsTests {
    @Test func managedObjectsListTheObjectsBelowThePathAsked() async throws {
        let rig = try ExportRig()
        let all = try await rig.client.managedObjects(of: rig.server.uniqueName, at: rig.root)
        #expect(Set(all.keys) == [rig.service, rig.characteristic])
        #expect(all[rig.characteristic]?["org.bluez.GattCharacteristic1"]?["Flags"] == .strings(["read", "notify"]))
        #expect(all[rig.service]?["org.bluez.GattService1"]?["Primary"] == .bool(true))
        let belowService = try await rig.client.managedObjects(of: rig.server.uniqueName, at: rig.service)
        #expect(Array(belowService.keys) == [rig.characteristic])
    }

    @Test func getAndGetAllAnswerAndUnknownOnesAreErrors() async throws {
        let rig = try ExportRig()
        let uuid = try await rig.client.getProperty(rig.server.uniqueName, rig.service, "org.bluez.GattService1", "UUID")
        #expect(uuid == .string("180d"))
        let all = try await rig.client.getAllProperties(rig.server.uniqueName, rig.characteristic, "org.bluez.GattCharacteristic1")
        #expect(all["Service"] == .objectPath(rig.service))
        await #expect(throws: BusError.self) {
            _ = try await rig.client.getProperty(rig.server.uniqueName, rig.service, "org.bluez.GattService1", "Nope")
        }
        do {
            _ = try await rig.call(ObjectPath(trusted: "/io/gattway/app/hci0/service9"), "org.bluez.GattService1", "Frob")
            Issue.record("a call on a missing object was answered")
        } catch {
            #expect(error.name == "org.freedesktop.DBus.Error.UnknownObject")
        }
    }

    @Test func setIsRefusedWithoutAHandlerAndStoredAndSignalledWithOne() async throws {
        let rig = try ExportRig()
        do {
            try await rig.client.setProperty(rig.server.uniqueName, rig.service, "org.bluez.GattService1", "Handle", .uint16(9))
            Issue.record("a read-only property was set")
        } catch {
            #expect(error.name == "org.freedesktop.DBus.Error.PropertyReadOnly")
        }
        let seen = Mutex<[(ObjectPath, String, Value)]>([])
        rig.objects.setPropertyHandler { path, _, name, value in
            seen.withLock { $0.append((path, name, value)) }
            return name == "Handle" ? nil : BusError(name: "org.bluez.Error.NotPermitted", message: "no")
        }
        let changed = AsyncStream<Message>.makeStream()
        try await rig.client.subscribe(MatchRule(sender: rig.server.uniqueName, interface: Connection.propertiesInterface,
                                                 member: "PropertiesChanged")) { changed.continuation.yield($0) }
        try await rig.client.setProperty(rig.server.uniqueName, rig.service, "org.bluez.GattService1", "Handle", .uint16(9))
        #expect(rig.objects.properties(rig.service, "org.bluez.GattService1")?["Handle"] == .uint16(9))
        #expect(seen.withLock { $0.map(\.1) } == ["Handle"])
        var signals = changed.stream.makeAsyncIterator()
        let signal = await signals.next()
        #expect(signal?.path == rig.service)
        #expect(signal?.body.first == .string("org.bluez.GattService1"))
        #expect(signal?.body[1].stringDictionary?["Handle"]?.unwrapped == .uint16(9))
        await #expect(throws: BusError.self) {
            try await rig.client.setProperty(rig.server.uniqueName, rig.service, "org.bluez.GattService1", "UUID", .string("x"))
        }
    }

    @Test func otherMethodsGoToTheHandlerWhichMayAnswerLater() async throws {
        let rig = try ExportRig()
        rig.objects.setMethodHandler { call in
            Task {
                try? await Task.sleep(for: .milliseconds(50))
                if call.member == "ReadValue" {
                    rig.objects.answer(call, call.reply([.bytes([1, 2, 3])]))
                } else {
                    rig.objects.answer(call, call.errorReply(BusError(name: "org.bluez.Error.NotPermitted", message: "Write not permitted")))
                }
            }
        }
        let read = try await rig.call(rig.characteristic, "org.bluez.GattCharacteristic1", "ReadValue", [.emptyDictionary(key: "s", value: "v")])
        #expect(read == [.bytes([1, 2, 3])])
        do {
            _ = try await rig.call(rig.characteristic, "org.bluez.GattCharacteristic1", "WriteValue",
                                   [.bytes([1]), .emptyDictionary(key: "s", value: "v")])
            Issue.record("the error reply was lost")
        } catch {
            #expect(error.name == "org.bluez.Error.NotPermitted")
        }
    }

    @Test func updateSignalsOnlyKnownObjectsAndIntrospectionNamesChildren() async throws {
        let rig = try ExportRig()
        #expect(rig.objects.update(rig.characteristic, "org.bluez.GattCharacteristic1", ["Value": .bytes([7])]))
        #expect(!rig.objects.update(rig.characteristic, "org.bluez.GattService1", ["Value": .bytes([7])]))
        #expect(rig.objects.properties(rig.characteristic, "org.bluez.GattCharacteristic1")?["Value"] == .bytes([7]))
        let xml = try await rig.call(rig.root, ExportedObjects.introspectableInterface, "Introspect").first?.string ?? ""
        #expect(xml.contains("<node name=\"service1\"/>"))
        #expect(!xml.contains("char0"))
        rig.objects.remove(under: rig.service)
        let all = try await rig.client.managedObjects(of: rig.server.uniqueName, at: rig.root)
        #expect(all.isEmpty)
    }

    @Test func announcedObjectsAreSignalledFromTheRoot() async throws {
        let rig = try ExportRig()
        let signals = AsyncStream<Message>.makeStream()
        try await rig.client.subscribe(MatchRule(sender: rig.server.uniqueName, interface: Connection.objectManagerInterface)) {
            signals.continuation.yield($0)
        }
        let descriptor = rig.characteristic.child("desc0")!
        rig.objects.add(descriptor, ["org.bluez.GattDescriptor1": ["UUID": .string("2901")]], announce: true)
        rig.objects.remove(under: rig.characteristic, announce: true)
        var received = signals.stream.makeAsyncIterator()
        let added = await received.next()
        #expect(added?.path == rig.objects.root && added?.member == "InterfacesAdded")
        #expect(added?.body.first == .objectPath(descriptor))
        #expect(added.map { Connection.interfaces($0.body[1]) }?["org.bluez.GattDescriptor1"]?["UUID"] == .string("2901"))
        let first = await received.next(), second = await received.next()
        #expect([first, second].map { $0?.member } == ["InterfacesRemoved", "InterfacesRemoved"])
        #expect([first, second].map { $0?.body.first } == [.objectPath(descriptor), .objectPath(rig.characteristic)])
        #expect(second?.body.last == .strings(["org.bluez.GattCharacteristic1"]))
    }

    @Test func pathsOutsideTheRootAreNotClaimed() throws {
        let objects = ExportedObjects(root: ObjectPath(trusted: "/io/gattway/app")) { _ in }
        var call = Message.methodCall(destination: ":1.1", path: ObjectPath(trusted: "/io/gattway/agent"),
                                      interface: "org.bluez.Agent1", member: "Release")
        #expect(!objects.handle(call))
        call.path = ObjectPath(trusted: "/io/gattway/application")
        #expect(!objects.handle(call))
    }
}
