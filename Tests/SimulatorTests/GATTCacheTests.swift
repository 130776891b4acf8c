import BLE
import DBus
import Testing
@testable import Simulator

/// bluetoothd's exported GATT objects are its cache: `SetServices` changes the peripheral (a
/// firmware update), and the objects follow only when bluetoothd discovers again (Service
/// Changed, another Database Hash at a connection, or a device removed and found again).
@Suite(.serialized) struct GATTCacheTests {
    /// The heart-rate device's next firmware: the same Generic Attribute service (so the same
    /// Database Hash), 180D with only 2A38 (at the old 2A37's handles), 180F pinned where it was,
    /// and FEED/BEEF where 180A was.
    static func firmware(hash: String = String(repeating: "5a", count: 16)) -> String {
        """
        [ { "uuid": "1801", "characteristics": [ { "uuid": "2A05", "flags": ["indicate"] },
              { "uuid": "2B29", "flags": ["read", "write"], "value": "00" },
              { "uuid": "2B2A", "flags": ["read"], "value": "\(hash)" }, { "uuid": "2B3A", "flags": ["read"], "value": "00" } ] },
          { "uuid": "180D", "characteristics": [ { "uuid": "2A38", "flags": ["read"], "value": "02" } ] },
          { "uuid": "180F", "handle": 28, "characteristics": [ { "uuid": "2A19", "flags": ["read", "notify"], "value": "64" } ] },
          { "uuid": "FEED", "characteristics": [ { "uuid": "BEEF", "flags": ["read"], "text": "v2" } ] } ]
        """
    }

    static let hr = Sim.devicePath(Sim.hr)

    private func setServices(_ sim: Sim, _ json: String = firmware(), serviceChanged: Bool) async throws {
        _ = try await sim.control("SetServices", [.string(Sim.hr), .string(json), .bool(serviceChanged)])
    }

    /// The heart-rate device connected, its objects all exported (they come after the Connect reply).
    private func connectedHR() async throws -> Sim {
        let sim = try await Sim.connected([Sim.hr])
        try await sim.signal { $0.changes(Self.hr, Interface.device, "ServicesResolved", .bool(true)) }
        return sim
    }

    /// How many objects were added or removed since `mark`.
    private func treeChanges(_ sim: Sim, after mark: Int) -> Int {
        sim.signals(after: mark) { ["InterfacesAdded", "InterfacesRemoved"].contains($0.member) }.count
    }

    private func uuid(_ sim: Sim, _ path: String, _ interface: String = Interface.characteristic) async throws -> String? {
        try await sim.managedObjects()[ObjectPath(path)!]?[interface]?["UUID"]?.string
    }

    @Test("Service Changed while connected: the changed services go, the new ones come, UUIDs follow")
    func serviceChangedWhileConnected() async throws {
        let sim = try await connectedHR()
        defer { sim.close() }
        let hr = Self.hr
        let battery = hr + "/service001c/char001d"
        try await sim.call(battery, Interface.characteristic, "StartNotify")
        let mark = sim.mark
        try await setServices(sim, serviceChanged: true)
        let removed = sim.signals(after: mark) { $0.member == "InterfacesRemoved" }.compactMap { $0.body.first?.objectPath?.rawValue }
        let added = sim.signals(after: mark) { $0.member == "InterfacesAdded" }.compactMap { $0.body.first?.objectPath?.rawValue }
        // 180D (4 objects under 0014, then the service) and 180A (0020, 4 characteristics); children first.
        #expect(Set(removed) == [hr + "/service0014/char0015/desc0017", hr + "/service0014/char0015", hr + "/service0014/char0018",
                                 hr + "/service0014/char001a", hr + "/service0014", hr + "/service0020/char0021",
                                 hr + "/service0020/char0023", hr + "/service0020/char0025", hr + "/service0020/char0027",
                                 hr + "/service0020"])
        #expect(removed.firstIndex(of: hr + "/service0014/char0015")! < removed.firstIndex(of: hr + "/service0014")!)
        #expect(added == [hr + "/service0014", hr + "/service0014/char0015", hr + "/service0020", hr + "/service0020/char0021"])
        let all = sim.signals(after: mark) { ["InterfacesAdded", "InterfacesRemoved"].contains($0.member) }
        #expect(all.lastIndex { $0.member == "InterfacesRemoved" }! < all.firstIndex { $0.member == "InterfacesAdded" }!)
        try await sim.signal(after: mark) { $0.changes(hr, Interface.device, "UUIDs") }
        let uuids = try await sim.property(hr, Interface.device, "UUIDs").strings ?? []
        #expect(uuids.contains(BluetoothUUID("FEED")!.uuidString) && !uuids.contains(BluetoothUUID("180A")!.uuidString))

        #expect(try await uuid(sim, hr + "/service0014/char0015") == BluetoothUUID("2A38")!.uuidString)
        #expect(try await sim.read(hr + "/service0014/char0015") == [0x02])
        #expect(try await sim.read(hr + "/service0020/char0021") == Array("v2".utf8))
        // The battery service did not change: kept, with its notify session.
        #expect(!removed.contains(battery))
        let before = sim.mark
        _ = try await sim.control("SetValue", [.string(Sim.hr), .string("2a19"), .bytes([42]), .bool(true)])
        try await sim.signal(after: before) { $0.changes(battery, Interface.characteristic, "Value", .bytes([42])) }
    }

    @Test("no Service Changed: the objects stay stale; a gone handle answers ATT 0x01, a reused one the new attribute")
    func withoutServiceChangedTheCacheIsStale() async throws {
        let sim = try await connectedHR()
        defer { sim.close() }
        let hr = Self.hr
        let mark = sim.mark
        try await setServices(sim, serviceChanged: false)
        #expect(treeChanges(sim, after: mark) == 0)
        #expect(try await uuid(sim, hr + "/service0014/char0015") == BluetoothUUID("2A37")!.uuidString)
        // The cached 2A37's value handle now holds the new 2A38's value.
        #expect(try await sim.read(hr + "/service0014/char0015") == [0x02])
        // The old 2A38 and 2A39, and 180A's characteristics, point at handles the peripheral no longer has.
        await expectError("org.bluez.Error.Failed", "Operation failed with ATT error: 0x01") {
            _ = try await sim.read(hr + "/service0014/char0018")
        }
        await expectError("org.bluez.Error.Failed", "Operation failed with ATT error: 0x01") {
            try await sim.write(hr + "/service0014/char001a", [0x01])
        }
        // 180A's first characteristic's value handle (0x0022) is FEED/BEEF's value now.
        #expect(try await sim.read(hr + "/service0020/char0021") == Array("v2".utf8))

        // The Database Hash did not change: reconnecting keeps the stale cache.
        try await sim.call(hr, Interface.device, "Disconnect")
        let again = sim.mark
        try await sim.connect(Sim.hr)
        try await sim.signal(after: again) { $0.changes(hr, Interface.device, "ServicesResolved", .bool(true)) }
        #expect(treeChanges(sim, after: again) == 0)

        // Removed and found again, the device is discovered from scratch.
        try await sim.call(Sim.adapter, Interface.adapter, "RemoveDevice", [.objectPath(ObjectPath(hr)!)])
        try await sim.discover([Sim.hr])
        let fresh = sim.mark
        try await sim.connect(Sim.hr)
        try await sim.signal(after: fresh) { $0.changes(hr, Interface.device, "ServicesResolved", .bool(true)) }
        #expect(try await uuid(sim, hr + "/service0014/char0015") == BluetoothUUID("2A38")!.uuidString)
        #expect(try await uuid(sim, hr + "/service0020/char0021") == BluetoothUUID("BEEF")!.uuidString)
        #expect(try await sim.managedObjects()[ObjectPath(hr + "/service0014/char0018")!] == nil)
    }

    /// At a connection bluetoothd reads the Database Hash: a new one makes it discover again,
    /// before ServicesResolved.
    @Test func anotherDatabaseHashIsDiscoveredAtTheNextConnection() async throws {
        let sim = try await connectedHR()
        defer { sim.close() }
        let hr = Self.hr
        try await setServices(sim, Self.firmware(hash: String(repeating: "a5", count: 16)), serviceChanged: false)
        try await sim.call(hr, Interface.device, "Disconnect")
        let mark = sim.mark
        try await sim.connect(Sim.hr)
        try await sim.signal(after: mark) { $0.changes(hr, Interface.device, "ServicesResolved", .bool(true)) }
        let all = sim.signals(after: mark) { _ in true }
        let resolved = all.firstIndex { $0.changes(hr, Interface.device, "ServicesResolved", .bool(true)) }!
        #expect(all.firstIndex { $0.removes(hr + "/service0014") }! < resolved)
        #expect(all.firstIndex { $0.adds(hr + "/service0020/char0021") }! < resolved)
        #expect(try await uuid(sim, hr + "/service0020/char0021") == BluetoothUUID("BEEF")!.uuidString)
    }

    /// A bonded bluetoothd that was away is told at the next connection (a server keeps a bonded
    /// client's Service Changed); an unbonded one is not.
    @Test func aBondedCentralHearsServiceChangedAtTheNextConnection() async throws {
        let sim = try await connectedHR()
        defer { sim.close() }
        let hr = Self.hr
        try await sim.call(hr, Interface.device, "Pair")
        try await sim.call(hr, Interface.device, "Disconnect")
        let mark = sim.mark
        try await setServices(sim, serviceChanged: true)
        #expect(treeChanges(sim, after: mark) == 0)
        try await sim.connect(Sim.hr)
        try await sim.signal(after: mark) { $0.changes(hr, Interface.device, "ServicesResolved", .bool(true)) }
        #expect(!sim.signals(after: mark) { $0.adds(hr + "/service0020/char0021") }.isEmpty)
    }

    @Test func setServicesRefusesBadInput() async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        await expectError("io.gattway.Simulator1.Error.InvalidArguments") {
            try await setServices(sim, #"[{"uuid": "180D", "characteristics": [{"uuid": "2A37", "flags": ["notfiy"]}]}]"#, serviceChanged: true)
        }
        await expectError("io.gattway.Simulator1.Error.InvalidArguments", "services: services[1].handle: 10 overlaps the previous service (next free handle is 11)") {
            try await setServices(sim, #"[{"uuid": "180D"}, {"uuid": "180F", "handle": 10}]"#, serviceChanged: true)
        }
        await expectError("io.gattway.Simulator1.Error.UnknownDevice") {
            _ = try await sim.control("SetServices", [.string("00:00:00:00:00:00"), .string("[]"), .bool(true)])
        }
    }

    /// The generators of the old firmware stop: the heart rate no longer changes.
    @Test func theOldFirmwaresGeneratorsStop() async throws {
        let sim = try await connectedHR()
        defer { sim.close() }
        let measurement = try await sim.characteristic(Sim.hr, "2A37")
        try await sim.call(measurement, Interface.characteristic, "StartNotify")
        try await sim.signal { $0.changes(measurement, Interface.characteristic, "Value") }
        try await setServices(sim, serviceChanged: false)
        try await Task.sleep(for: .milliseconds(100))
        let mark = sim.mark
        try await Task.sleep(for: .milliseconds(1500))
        #expect(sim.signals(after: mark) { $0.changes(measurement, Interface.characteristic, "Value") }.isEmpty)
    }
}
