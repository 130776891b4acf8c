import BLE
import DBus
import Testing
@testable import Simulator

@Suite(.serialized) struct ConnectionTests {
    @Test("Connected=true comes before the Connect reply, then the GATT objects, then ServicesResolved=true")
    func connectOrdering() async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        try await sim.discover([Sim.hr])
        let hr = Sim.devicePath(Sim.hr)
        let mark = sim.mark
        try await sim.connect(Sim.hr)
        // Signals are handled on the connection's thread before the reply wakes this task.
        #expect(!sim.signals(after: mark) { $0.changes(hr, Interface.device, "Connected", .bool(true)) }.isEmpty)
        try await sim.signal(after: mark) { $0.changes(hr, Interface.device, "ServicesResolved", .bool(true)) }
        let all = sim.signals(after: mark) { _ in true }
        let resolvedAt = all.firstIndex { $0.changes(hr, Interface.device, "ServicesResolved", .bool(true)) }!
        let added = all.enumerated().filter { $0.element.member == "InterfacesAdded" }
        #expect(added.count == 19)  // the heart-rate device: 4 services, 12 characteristics, 3 CCCDs
        #expect(added.allSatisfy { $0.offset < resolvedAt })

        // Paths carry unique 4-digit handles, in GATT server order; UUIDs are lowercase 128-bit.
        let objects = try await sim.managedObjects().filter { $0.key.rawValue.hasPrefix(hr + "/") }
        let handles = objects.keys.map { Int($0.lastElement.suffix(4), radix: 16)! }
        #expect(Set(handles).count == handles.count)
        #expect(objects[ObjectPath(hr + "/service0014")!]?[Interface.service]?["UUID"] == .string("0000180d-0000-1000-8000-00805f9b34fb"))
        let measurement = try #require(objects[ObjectPath(hr + "/service0014/char0015")!]?[Interface.characteristic])
        #expect(measurement["UUID"] == .string("00002a37-0000-1000-8000-00805f9b34fb"))
        #expect(measurement["Service"] == .objectPath(ObjectPath(hr + "/service0014")!))
        #expect(measurement["Flags"]?.strings == ["notify"])
        #expect(measurement["Notifying"] == .bool(false))
        #expect(measurement["NotifyAcquired"] == .bool(false))
        #expect(measurement["MTU"] == .uint16(247))
        #expect(measurement["Handle"] == nil)
        let cccd = try #require(objects[ObjectPath(hr + "/service0014/char0015/desc0017")!]?[Interface.descriptor])
        #expect(cccd["UUID"] == .string("00002902-0000-1000-8000-00805f9b34fb"))
        #expect(cccd["Characteristic"] == .objectPath(ObjectPath(hr + "/service0014/char0015")!))
        #expect(objects[ObjectPath(hr + "/service001c/char001d")!]?[Interface.characteristic]?["UUID"]
                == .string("00002a19-0000-1000-8000-00805f9b34fb"))
        // After resolution UUIDs lists the primary services.
        let uuids = try await sim.property(hr, Interface.device, "UUIDs").strings ?? []
        #expect(uuids.contains("0000180a-0000-1000-8000-00805f9b34fb"))
        // Connecting again is a success, as for a connected LE device in 5.66.
        try await sim.connect(Sim.hr)
    }

    @Test("Disconnect: ServicesResolved=false, the reply, Connected=false; the GATT objects stay")
    func disconnectKeepsObjects() async throws {
        let sim = try await Sim.connected([Sim.hr])
        defer { sim.close() }
        let hr = Sim.devicePath(Sim.hr)
        let battery = try await sim.characteristic(Sim.hr, "2A19")
        let mark = sim.mark
        try await sim.call(hr, Interface.device, "Disconnect")
        #expect(!sim.signals(after: mark) { $0.changes(hr, Interface.device, "ServicesResolved", .bool(false)) }.isEmpty)
        try await sim.signal(after: mark) { $0.changes(hr, Interface.device, "Connected", .bool(false)) }
        #expect(try await sim.managedObjects()[ObjectPath(battery)!] != nil)
        #expect(try await sim.managedObjects()[ObjectPath(battery)!]?[Interface.characteristic]?["MTU"] == nil)
        await expectError("org.bluez.Error.Failed", "Not connected") { _ = try await sim.read(battery) }
        await expectError("org.bluez.Error.Failed", "Not connected") { try await sim.write(battery, [1]) }
        // Disconnecting a disconnected device succeeds.
        try await sim.call(hr, Interface.device, "Disconnect")
        // Reconnecting exports nothing new but resolves services again.
        let again = sim.mark
        try await sim.connect(Sim.hr)
        try await sim.signal(after: again) { $0.changes(hr, Interface.device, "ServicesResolved", .bool(true)) }
        #expect(sim.signals(after: again) { $0.member == "InterfacesAdded" }.isEmpty)
        #expect(try await sim.read(battery).count == 1)
    }

    @Test func pairSetsPairedAndBondedOnce() async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        try await sim.discover([Sim.hr])
        let hr = Sim.devicePath(Sim.hr)
        let mark = sim.mark
        try await sim.call(hr, Interface.device, "Pair")
        #expect(!sim.signals(after: mark) { $0.changes(hr, Interface.device, "Paired", .bool(true)) }.isEmpty)
        #expect(try await sim.property(hr, Interface.device, "Bonded") == .bool(true))
        #expect(try await sim.property(hr, Interface.device, "Connected") == .bool(true))
        await expectError("org.bluez.Error.AlreadyExists", "Already Exists") { try await sim.call(hr, Interface.device, "Pair") }
        await expectError("org.bluez.Error.DoesNotExist", "Does Not Exist") { try await sim.call(hr, Interface.device, "CancelPairing") }
        try await sim.client.setProperty("org.bluez", ObjectPath(hr)!, Interface.device, "Trusted", .bool(true))
        #expect(try await sim.property(hr, Interface.device, "Trusted") == .bool(true))
    }

    @Test func justWorksPairingHappensByItselfForAnEncryptedRead() async throws {
        let sim = try await Sim.connected([Sim.secure])
        defer { sim.close() }
        let device = Sim.devicePath(Sim.secure)
        let jw = try await sim.characteristic(Sim.secure, "12345678-1234-5678-1234-56789abc0001")
        let mark = sim.mark
        #expect(try await sim.read(jw) == Array("secret-jw".utf8))
        #expect(!sim.signals(after: mark) { $0.changes(device, Interface.device, "Paired", .bool(true)) }.isEmpty)
        // bluetoothd shows the ATT property, not the permission.
        #expect(try await sim.property(jw, Interface.characteristic, "Flags").strings == ["read"])
    }

    @Test("an authenticated read fails with ATT 0x0e and drops the link, as on real bluetoothd")
    func mitmReadDropsTheLink() async throws {
        let sim = try await Sim.connected([Sim.secure])
        defer { sim.close() }
        let device = Sim.devicePath(Sim.secure)
        let mitm = try await sim.characteristic(Sim.secure, "12345678-1234-5678-1234-56789abc0002")
        let mark = sim.mark
        await expectError("org.bluez.Error.Failed", "Operation failed with ATT error: 0x0e") { _ = try await sim.read(mitm) }
        try await sim.signal(after: mark) { $0.changes(device, Interface.device, "Connected", .bool(false)) }
    }

    @Test func aNonConnectableDeviceHangsThenAbortsByLocal() async throws {
        var configuration = SimulatorConfiguration.builtIn
        configuration.adapter.connectTimeoutMs = 300
        let sim = try await Sim.start(configuration)
        defer { sim.close() }
        try await sim.call(Sim.adapter, Interface.adapter, "StartDiscovery")
        try await sim.signal { $0.adds(Sim.devicePath(Sim.beacon)) }
        let start = ContinuousClock.now
        await expectError("org.bluez.Error.Failed", "le-connection-abort-by-local") { try await sim.connect(Sim.beacon) }
        #expect(ContinuousClock.now - start >= .milliseconds(290))
    }

    @Test func disconnectCancelsAPendingConnect() async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        try await sim.discover([Sim.hr])
        try await sim.setFault(Sim.hr, #"{"connectDelayMs": 2000}"#)
        let hr = Sim.devicePath(Sim.hr)
        let connect = Task { try await sim.connect(Sim.hr) }
        try await Task.sleep(for: .milliseconds(100))
        await expectError("org.bluez.Error.Failed", "Operation already in progress") { try await sim.connect(Sim.hr) }
        try await sim.call(hr, Interface.device, "Disconnect")
        await expectError("org.bluez.Error.Failed", "br-connection-canceled") { try await connect.value }
    }
}
