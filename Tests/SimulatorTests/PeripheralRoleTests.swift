import BLE
import DBus
import Testing
@testable import Simulator

/// The peripheral role as bluetoothd 5.66 serves it: GattManager1 and LEAdvertisingManager1 on
/// each adapter, and another adapter as the remote central that hears the advertisement,
/// connects and reaches the registered application.
@Suite(.serialized) struct PeripheralRoleTests {
    static let hci0Address = "00:1A:7D:DA:71:13"
    static let hci1Address = "00:1A:7D:DA:71:14"
    /// The central's view of hci0, and hci0's view of the central.
    static let served = Sim.devicePath(hci0Address, on: "hci1")
    static let central = Sim.devicePath(hci1Address, on: "hci0")

    static func configuration(instances: Int = 5) -> SimulatorConfiguration {
        var hci0 = SimulatorConfiguration.Adapter.numbered(0)
        hci0.advertisingInstances = instances
        var hci1 = SimulatorConfiguration.Adapter.numbered(1)
        hci1.connectTimeoutMs = 300
        return SimulatorConfiguration(adapters: [hci0, hci1], devices: [])
    }

    /// The object with `uuid` under the central's device for hci0.
    static func object(_ sim: Sim, _ interface: String, _ uuid: String) async throws -> String {
        let want = BluetoothUUID(uuid)!.uuidString
        let found = try await sim.managedObjects().first { path, interfaces in
            path.rawValue.hasPrefix(served + "/") && interfaces[interface]?["UUID"]?.string == want
        }
        guard let found else { throw BusError(name: "test.NotFound", message: uuid) }
        return found.key.rawValue
    }

    @Test("RegisterApplication reads the tree, sets each Handle asked as 0 before it answers; bluetoothd's errors")
    func registrationAndHandles() async throws {
        let sim = try await Sim.start(Self.configuration())
        defer { sim.close() }
        let app = try TestApplication(sim)
        try await app.register()
        // The Handle calls came before the reply: they are recorded already.
        #expect(app.handle(TestApplication.servicePath) == 0x000A)
        #expect(app.handle(TestApplication.valuePath) == 0x000C)  // the value handle, after the declaration
        #expect(app.handle(TestApplication.descriptorPath) == 0x000E)  // after the CCCD bluetoothd adds
        #expect(app.handle(TestApplication.refusedPath) == 0x0010)
        #expect(app.calls("Set").first?.body.first == .string(Interface.service))
        await expectError("org.bluez.Error.AlreadyExists") { try await app.register() }
        await expectError("org.bluez.Error.DoesNotExist") {
            try await sim.call("/org/bluez/hci0", Interface.gattManager, "UnregisterApplication", [.objectPath(ObjectPath("/nothing")!)],
                               from: app.connection)
        }
        // The same tree on hci1 gets its own database; an unregistered one can come back.
        try await app.register(on: "hci1")
        try await sim.call("/org/bluez/hci0", Interface.gattManager, "UnregisterApplication", [.objectPath(TestApplication.appPath)],
                           from: app.connection)
        try await app.register()

        // A characteristic of no service is refused, and nothing of it stays.
        let other = try TestApplication(sim)
        other.tree.withLock { $0 = [$0[1]] }
        await expectError("org.bluez.Error.Failed", "No valid service object found") { try await other.register() }
        other.tree.withLock { $0 = [] }
        await expectError("org.bluez.Error.Failed", "No object received") { try await other.register() }
        // The GATT service is bluetoothd's own: gatt_db takes no second one.
        other.tree.withLock { $0 = [(TestApplication.servicePath, [(Interface.service, [("UUID", .string("1801")), ("Primary", .bool(true))])])] }
        await expectError("org.bluez.Error.Failed", "Failed to create entry in database") { try await other.register() }
        #expect(other.calls("Set").isEmpty)
    }

    @Test("a requested handle is kept; a taken range fails as gatt_db does")
    func requestedHandles() async throws {
        let sim = try await Sim.start(Self.configuration())
        defer { sim.close() }
        let first = try TestApplication(sim)
        first.tree.withLock { $0[0].1[0].1[2].1 = .uint16(0x0040) }
        try await first.register()
        // What it asked for is not told again; the others are.
        #expect(first.calls("Set", TestApplication.servicePath).isEmpty)
        #expect(first.handle(TestApplication.valuePath) == 0x0042)
        let second = try TestApplication(sim)
        second.tree.withLock { $0[0].1[0].1[2].1 = .uint16(0x0041) }
        await expectError("org.bluez.Error.Failed", "Failed to create entry in database") { try await second.register() }
        second.tree.withLock { $0[0].1[0].1[2].1 = .uint16(0) }
        try await second.register()
        #expect(second.handle(TestApplication.servicePath) == 0x0047)  // after the highest handle in use
    }

    @Test("SupportedInstances counts the free instances; past them NotPermitted; a bad advertisement is refused")
    func advertisementInstances() async throws {
        let sim = try await Sim.start(Self.configuration(instances: 2))
        defer { sim.close() }
        let app = try TestApplication(sim)
        #expect(try await sim.property("/org/bluez/hci0", Interface.advertisingManager, "SupportedInstances") == .byte(2))
        try await app.advertise()
        try await app.advertise(path: ObjectPath("/test/adv2")!)
        #expect(try await sim.property("/org/bluez/hci0", Interface.advertisingManager, "ActiveInstances") == .byte(2))
        #expect(try await sim.property("/org/bluez/hci0", Interface.advertisingManager, "SupportedInstances") == .byte(0))
        // The two take turns: hci1 hears both, as one device (hci0's address), connectable. The
        // beacon is not discoverable (no Flags): a discovery lists it with a filter set.
        try await sim.call("/org/bluez/hci1", Interface.adapter, "SetDiscoveryFilter", [.stringVariantDictionary([("Transport", .string("le"))])])
        try await sim.call("/org/bluez/hci1", Interface.adapter, "StartDiscovery")
        let deadline = ContinuousClock.now + .seconds(5)
        var data = try await sim.property(Self.served, Interface.device, "ManufacturerData")
        while data.unwrapped.dictionaryEntries?.count != 2 && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
            data = try await sim.property(Self.served, Interface.device, "ManufacturerData")
        }
        #expect(data.unwrapped.dictionaryEntries?.map(\.key) == [.uint16(0x004C), .uint16(0xFFFF)], "\(data)")
        try await sim.call("/org/bluez/hci1", Interface.adapter, "StopDiscovery")
        try await sim.connect(Self.hci0Address, on: "hci1")
        await expectError("org.bluez.Error.NotPermitted", "Maximum advertisements reached") {
            try await app.advertise(path: ObjectPath("/test/adv3")!)
        }
        await expectError("org.bluez.Error.AlreadyExists") { try await app.advertise() }
        try await sim.call("/org/bluez/hci0", Interface.advertisingManager, "UnregisterAdvertisement",
                           [.objectPath(TestApplication.advertisementPath)], from: app.connection)
        for bad: [(String, Value)] in [[("Type", .string("sideways"))], [("Type", .string("broadcast")), ("Discoverable", .bool(true))],
                                       [("MinInterval", .uint32(200)), ("MaxInterval", .uint32(100))], [("LocalName", .uint16(1))]] {
            app.advertisement.withLock { $0 = bad }
            await expectError("org.bluez.Error.Failed", "Failed to parse advertisement.") { try await app.advertise() }
        }
        #expect(try await sim.property("/org/bluez/hci0", Interface.advertisingManager, "ActiveInstances") == .byte(1))
    }

    @Test("another adapter hears the advertisement, connects, reads, writes and subscribes through the application")
    func aCentralOnAnotherAdapter() async throws {
        let sim = try await Sim.start(Self.configuration())
        defer { sim.close() }
        let app = try TestApplication(sim)
        try await app.register()
        try await app.advertise()
        let heard = sim.mark
        try await sim.discover([Self.hci0Address], on: "hci1")
        let added = try await sim.signal(after: heard) { $0.adds(Self.served) }
        let device = Connection.interfaces(added.body[1])[Interface.device]
        #expect(device?["Name"] == .string("sim-periph"))
        #expect(device?["UUIDs"] == .strings([BluetoothUUID(TestApplication.service)!.uuidString]))
        #expect(device?["RSSI"] != nil)
        #expect(device?["ManufacturerData"]?.dictionaryEntries?.first?.key == .uint16(0xFFFF))
        // hci0 does not hear itself.
        #expect(try await sim.managedObjects()[ObjectPath(Sim.devicePath(Self.hci0Address))!] == nil)

        try await sim.connect(Self.hci0Address, on: "hci1")
        #expect(try await sim.property(Self.central, Interface.device, "Connected") == .bool(true))
        let value = try await Self.object(sim, Interface.characteristic, TestApplication.value)
        #expect(value == Self.served + "/service000a/char000b")
        #expect(try await sim.read(value) == Array("hello".utf8))
        let read = try await app.call("ReadValue", TestApplication.valuePath)
        let options = read.body[0].stringDictionary
        #expect(options?["device"]?.unwrapped == .objectPath(ObjectPath(Self.central)!))
        #expect(options?["link"]?.unwrapped == .string("LE"))
        #expect(options?["mtu"]?.unwrapped == .uint16(247))
        #expect(options?["offset"] == nil)
        let description = try await Self.object(sim, Interface.descriptor, "2901")
        #expect(try await sim.read(description) == Array("greeting".utf8))

        // The application's NotPermitted is the ATT error the central's bluetoothd reports.
        let refused = try await Self.object(sim, Interface.characteristic, TestApplication.refused)
        await expectError("org.bluez.Error.NotPermitted", "Read not permitted") { _ = try await sim.read(refused) }

        try await sim.write(value, [1, 2], type: "request")
        let write = try await app.call("WriteValue", TestApplication.valuePath)
        #expect(write.body[0] == .bytes([1, 2]))
        #expect(write.body[1].stringDictionary?["type"]?.unwrapped == .string("request"))
        try await sim.write(value, [3], type: "command")
        let command = try await app.call("WriteValue", TestApplication.valuePath, count: 2)
        #expect(command.body[1].stringDictionary?["type"]?.unwrapped == .string("command"))

        try await sim.call(value, Interface.characteristic, "StartNotify")
        try await app.call("StartNotify", TestApplication.valuePath)
        let before = sim.mark
        try app.changeValue([0x21])
        try app.changeValue([0x22])
        try await sim.signal(after: before) { $0.changes(value, Interface.characteristic, "Value", .bytes([0x21])) }
        try await sim.signal(after: before) { $0.changes(value, Interface.characteristic, "Value", .bytes([0x22])) }
        // A notification carries what fits the MTU (247 - 3).
        try app.changeValue(Array(repeating: 7, count: 300))
        try await sim.signal(after: before) { $0.changes(value, Interface.characteristic, "Value", .bytes(Array(repeating: 7, count: 244))) }

        // The served side ends it: the central's link goes, the application hears StopNotify.
        let ending = sim.mark
        try await sim.call(Self.central, Interface.device, "Disconnect")
        try await sim.signal(after: ending) { $0.changes(Self.served, Interface.device, "Connected", .bool(false)) }
        try await sim.signal(after: ending) { $0.changes(Self.central, Interface.device, "Connected", .bool(false)) }
        try await app.call("StopNotify", TestApplication.valuePath)
    }

    @Test("the application's owner leaving unregisters it; a removed adapter releases its advertisements")
    func ownerLeavesAndAdapterGoes() async throws {
        let sim = try await Sim.start(Self.configuration())
        defer { sim.close() }
        let app = try TestApplication(sim)
        try await app.register()
        try await app.advertise()
        #expect(try await sim.property("/org/bluez/hci0", Interface.advertisingManager, "ActiveInstances") == .byte(1))
        let left = sim.mark
        app.connection.close()
        try await sim.signal(after: left) { $0.changes("/org/bluez/hci0", Interface.advertisingManager, "ActiveInstances", .byte(0)) }
        let again = try TestApplication(sim)
        try await again.register()
        #expect(again.handle(TestApplication.servicePath) == 0x000A)  // the first application's handles are free again

        try await again.advertise()
        _ = try await sim.control("RemoveAdapter", [.string("hci0")])
        try await again.call("Release", TestApplication.advertisementPath)
    }

    @Test("bluetoothd restarting forgets the registrations: the client registers again, as after a real restart")
    func restartForgetsRegistrations() async throws {
        let sim = try await Sim.start(Self.configuration())
        defer { sim.close() }
        let app = try TestApplication(sim)
        try await app.register()
        try await app.advertise()
        let mark = sim.mark
        _ = try await sim.control("Restart", [.uint32(50)])
        try await sim.signal(after: mark) { $0.adds(Sim.adapter) }
        #expect(try await sim.property("/org/bluez/hci0", Interface.advertisingManager, "ActiveInstances") == .byte(0))
        try await app.register()
        try await app.advertise()
        try await sim.discover([Self.hci0Address], on: "hci1")
        try await sim.connect(Self.hci0Address, on: "hci1")
        #expect(try await sim.read(Self.object(sim, Interface.characteristic, TestApplication.value)) == Array("hello".utf8))
    }

    @Test("powered off, the serving adapter drops its centrals and is not heard; its registrations stay for when it is on")
    func servingAdapterPoweredOff() async throws {
        let sim = try await Sim.start(Self.configuration())
        defer { sim.close() }
        let app = try TestApplication(sim)
        try await app.register()
        try await app.advertise()
        try await sim.discover([Self.hci0Address], on: "hci1")
        try await sim.connect(Self.hci0Address, on: "hci1")
        let off = sim.mark
        _ = try await sim.control("SetAdapterPowered", [.string("hci0"), .bool(false)])
        try await sim.signal(after: off) { $0.changes(Self.served, Interface.device, "Connected", .bool(false)) }
        try await sim.signal(after: off) { $0.changes(Self.central, Interface.device, "Connected", .bool(false)) }
        #expect(try await sim.property("/org/bluez/hci0", Interface.advertisingManager, "ActiveInstances") == .byte(1))
        await expectError("org.bluez.Error.Failed", "le-connection-abort-by-local") { try await sim.connect(Self.hci0Address, on: "hci1") }
        _ = try await sim.control("SetAdapterPowered", [.string("hci0"), .bool(true)])
        try await sim.connect(Self.hci0Address, on: "hci1")
        let value = try await Self.object(sim, Interface.characteristic, TestApplication.value)
        #expect(try await sim.read(value) == Array("hello".utf8))
        #expect(app.calls("Release").isEmpty)
    }

    @Test("the application's Failed is ATT 0x80, or the application error its message names, as bluetoothd maps it",
          arguments: [("no", "0x80"), ("0x85", "0x85"), ("0x9f", "0x9f"), ("0x70", "0x0e"), ("", "0x0e")])
    func applicationErrors(message: String, code: String) async throws {
        let sim = try await Sim.start(Self.configuration())
        defer { sim.close() }
        let app = try TestApplication(sim, refusal: BusError(name: "org.bluez.Error.Failed", message: message))
        try await app.register()
        try await app.advertise()
        try await sim.discover([Self.hci0Address], on: "hci1")
        try await sim.connect(Self.hci0Address, on: "hci1")
        let refused = try await Self.object(sim, Interface.characteristic, TestApplication.refused)
        await expectError("org.bluez.Error.Failed", "Operation failed with ATT error: " + code) { _ = try await sim.read(refused) }
        // Its flags do not allow writes: bluetoothd refuses without asking the application.
        await expectError("org.bluez.Error.NotPermitted", "Write not permitted") { try await sim.write(refused, [1], type: "request") }
        #expect(app.calls("WriteValue").isEmpty)
    }

    @Test("the control interface's remote central acts as a phone on hci1, without a BlueZ client of its own")
    func controlCentral() async throws {
        let sim = try await Sim.start(Self.configuration())
        defer { sim.close() }
        let app = try TestApplication(sim)
        try await app.register()
        let hci1: Value = .string("hci1"), hci0 = Value.string(Self.hci0Address), uuid = Value.string(TestApplication.value)
        // Not advertising: nothing to hear.
        await expectError("io.gattway.Simulator1.Error.NotHeard") { _ = try await sim.control("CentralConnect", [hci1, hci0]) }
        try await app.advertise()
        _ = try await sim.control("CentralConnect", [hci1, hci0])
        #expect(try await sim.property(Self.served, Interface.device, "Connected") == .bool(true))
        #expect(try await sim.control("CentralRead", [hci1, hci0, uuid]).first == .bytes(Array("hello".utf8)))
        _ = try await sim.control("CentralWrite", [hci1, hci0, uuid, .bytes([9]), .bool(true)])
        #expect(try await app.call("WriteValue", TestApplication.valuePath).body[1].stringDictionary?["type"]?.unwrapped == .string("request"))
        _ = try await sim.control("CentralSubscribe", [hci1, hci0, uuid, .bool(true)])
        try await app.call("StartNotify", TestApplication.valuePath)
        try app.changeValue([1])
        try app.changeValue([2])
        var got: [Value] = []
        while got.count < 2 {
            got += try await sim.control("CentralNotifications", [hci1, hci0, uuid]).first?.array ?? []
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(got == [.bytes([1]), .bytes([2])])
        await expectError("io.gattway.Simulator1.Error.InvalidArguments") {
            _ = try await sim.control("CentralRead", [hci1, hci0, .string("2a19")])
        }
        _ = try await sim.control("CentralDisconnect", [hci1, hci0])
        #expect(try await sim.property(Self.central, Interface.device, "Connected") == .bool(false))
        try await app.call("StopNotify", TestApplication.valuePath)
        await expectError("io.gattway.Simulator1.Error.NotConnected") { _ = try await sim.control("CentralRead", [hci1, hci0, uuid]) }
    }
}
