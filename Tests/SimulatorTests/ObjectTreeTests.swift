import BLE
import DBus
import Testing
@testable import Simulator

@Suite(.serialized) struct ObjectTreeTests {
    @Test func managedObjectsBeforeDiscoveryHoldBluezAndTheAdapter() async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        let objects = try await sim.managedObjects()
        #expect(Set(objects.keys.map(\.rawValue)) == ["/org/bluez", "/org/bluez/hci0"])
        let bluez = try #require(objects[ObjectPath("/org/bluez")!])
        #expect(Set(bluez.keys) == [Interface.agentManager, Interface.profileManager, Interface.introspectable, Interface.properties])
        let adapter = try #require(objects[ObjectPath(Sim.adapter)!]?[Interface.adapter])
        #expect(adapter["Powered"] == .bool(true))
        #expect(adapter["Discovering"] == .bool(false))
        #expect(adapter["Roles"]?.strings == ["central", "peripheral"])
        #expect(adapter["Address"] == .string("00:1A:7D:DA:71:13"))
        for name in ["AddressType", "Name", "Alias", "Class", "Discoverable", "Pairable", "UUIDs", "Modalias"] {
            #expect(adapter[name] != nil, "Adapter1.\(name)")
        }
    }

    @Test func theAdapterIsAnnouncedWithInterfacesAdded() async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        try await sim.signal { $0.adds(Sim.adapter) && $0.path?.rawValue == "/" }
    }

    @Test func unknownObjectsAndMethodsAnswerLikeLibdbus() async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        await expectError("org.freedesktop.DBus.Error.UnknownObject") {
            try await sim.call("/org/bluez/hci0/dev_00_11_22_33_44_55", Interface.device, "Connect")
        }
        await expectError("org.freedesktop.DBus.Error.UnknownMethod") {
            try await sim.call(Sim.adapter, Interface.adapter, "Frobnicate")
        }
        await expectError("org.freedesktop.DBus.Error.UnknownMethod") {
            try await sim.call(Sim.adapter, "org.bluez.AdvertisementMonitorManager1", "RegisterMonitor", [.objectPath(ObjectPath("/x")!)])
        }
        // gdbus matches name and signature: a wrong signature is an unknown method, not a crash.
        await expectError("org.freedesktop.DBus.Error.UnknownMethod",
                          "Method \"SetDiscoveryFilter\" with signature \"s\" on interface \"org.bluez.Adapter1\" doesn't exist") {
            try await sim.call(Sim.adapter, Interface.adapter, "SetDiscoveryFilter", [.string("le")])
        }
        // Still alive and answering.
        #expect(try await sim.property(Sim.adapter, Interface.adapter, "Powered") == .bool(true))
    }

    @Test func propertiesGetGetAllSetWithGdbusErrors() async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        let all = try await sim.client.getAllProperties("org.bluez", ObjectPath(Sim.adapter)!, Interface.adapter)
        #expect(all["Name"] == .string("gattway-sim"))
        await expectError("org.freedesktop.DBus.Error.InvalidArgs", "No such property 'Nope'") {
            _ = try await sim.property(Sim.adapter, Interface.adapter, "Nope")
        }
        await expectError("org.freedesktop.DBus.Error.InvalidArgs", "No such interface 'org.bluez.Device1'") {
            _ = try await sim.property(Sim.adapter, Interface.device, "Address")
        }
        await expectError("org.freedesktop.DBus.Error.PropertyReadOnly", "Property 'Address' is not writable") {
            try await sim.client.setProperty("org.bluez", ObjectPath(Sim.adapter)!, Interface.adapter, "Address", .string("x"))
        }
        await expectError("org.freedesktop.DBus.Error.InvalidSignature", "Invalid signature for 'Alias'") {
            try await sim.client.setProperty("org.bluez", ObjectPath(Sim.adapter)!, Interface.adapter, "Alias", .bool(true))
        }
        let mark = sim.mark
        try await sim.client.setProperty("org.bluez", ObjectPath(Sim.adapter)!, Interface.adapter, "Alias", .string("lab"))
        try await sim.signal(after: mark) { $0.changes(Sim.adapter, Interface.adapter, "Alias", .string("lab")) }
        #expect(try await sim.property(Sim.adapter, Interface.adapter, "Alias") == .string("lab"))
    }

    @Test func introspectionListsInterfacesAndChildren() async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        let root = try await sim.call("/", Interface.introspectable, "Introspect").first?.string ?? ""
        #expect(root.contains("<interface name=\"org.freedesktop.DBus.ObjectManager\">"))
        #expect(root.contains("<node name=\"org\"/>"))
        let adapter = try await sim.call(Sim.adapter, Interface.introspectable, "Introspect").first?.string ?? ""
        #expect(adapter.contains("<method name=\"SetDiscoveryFilter\"><arg type=\"a{sv}\" direction=\"in\"/></method>"))
        #expect(adapter.contains("<property name=\"Powered\" type=\"b\" access=\"readwrite\">"))
        let org = try await sim.call("/org", Interface.introspectable, "Introspect").first?.string ?? ""
        #expect(org.contains("<node name=\"bluez\"/>"))
    }

    @Test func agentAndProfileRegistrationsAreAccepted() async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        let agent = Value.objectPath(ObjectPath("/test/agent")!)
        try await sim.call("/org/bluez", Interface.agentManager, "RegisterAgent", [agent, .string("NoInputNoOutput")])
        try await sim.call("/org/bluez", Interface.agentManager, "RequestDefaultAgent", [agent])
        await expectError("org.bluez.Error.AlreadyExists") {
            try await sim.call("/org/bluez", Interface.agentManager, "RegisterAgent", [agent, .string("NoInputNoOutput")])
        }
        try await sim.call("/org/bluez", Interface.profileManager, "RegisterProfile",
                           [.objectPath(ObjectPath("/test/profile")!), .string("0000180d-0000-1000-8000-00805f9b34fb"),
                            .stringVariantDictionary([])])
    }

    @Test func poweringOffStopsDiscoveryAndDropsLinks() async throws {
        let sim = try await Sim.connected([Sim.hr])
        defer { sim.close() }
        try await sim.call(Sim.adapter, Interface.adapter, "StartDiscovery")
        let mark = sim.mark
        try await sim.client.setProperty("org.bluez", ObjectPath(Sim.adapter)!, Interface.adapter, "Powered", .bool(false))
        try await sim.signal(after: mark) { $0.changes(Sim.adapter, Interface.adapter, "Discovering", .bool(false)) }
        try await sim.signal(after: mark) { $0.changes(Sim.devicePath(Sim.hr), Interface.device, "Connected", .bool(false)) }
        try await sim.signal(after: mark) { $0.changes(Sim.adapter, Interface.adapter, "Powered", .bool(false)) }
        await expectError("org.bluez.Error.NotReady", "Resource Not Ready") {
            try await sim.call(Sim.adapter, Interface.adapter, "StartDiscovery")
        }
        try await sim.client.setProperty("org.bluez", ObjectPath(Sim.adapter)!, Interface.adapter, "Powered", .bool(true))
        try await sim.call(Sim.adapter, Interface.adapter, "StartDiscovery")
    }
}
