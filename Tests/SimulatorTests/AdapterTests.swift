import BLE
import DBus
import Testing
@testable import Simulator

/// Several adapters, as BlueZ serves them: one Device1 per adapter that hears a device, each
/// with its own RSSI, link and bond; a connection limit per controller; adapters unplugged,
/// plugged in and powered off one at a time.
@Suite(.serialized) struct AdapterTests {
    static let near = "F0:00:00:00:01:01"  // loud at hci0, faint at hci1
    static let west = "F0:00:00:00:01:02"  // heard by hci0 only
    static let both = "F0:00:00:00:01:03"  // the same everywhere
    static let hci1 = "/org/bluez/hci1"

    /// hci0 and hci1 (hci0 holding `limit` links), three devices advertising every 50 ms with a
    /// readable battery level.
    static func configuration(limit: Int = 7) -> SimulatorConfiguration {
        func device(_ address: String, _ rssi: [String: Int]?) -> SimulatorConfiguration.Device {
            SimulatorConfiguration.Device(
                address: BluetoothAddress(address)!, name: "Sim " + address.suffix(2), rssi: -50, rssiByAdapter: rssi, rssiJitter: 0,
                advertisingIntervalMs: 50,
                services: [SimulatorConfiguration.Service(uuid: BluetoothUUID("180F")!, characteristics: [
                    SimulatorConfiguration.Characteristic(uuid: BluetoothUUID("2A19")!, flags: ["read", "notify"], value: [100]),
                ])])
        }
        var hci0 = SimulatorConfiguration.Adapter.numbered(0)
        hci0.maxConnections = limit
        var hci1 = SimulatorConfiguration.Adapter.numbered(1)
        hci1.connectTimeoutMs = 300
        return SimulatorConfiguration(adapters: [hci0, hci1], devices: [
            device(near, ["hci0": -40, "hci1": -90]), device(west, ["hci0": -60]), device(both, nil),
        ])
    }

    static func rssi(_ message: Message) -> Int? {
        message.body.count > 1 ? message.body[1].stringDictionary?["RSSI"]?.unwrapped.integer : nil
    }

    @Test func bothAdaptersAreListedAndAnnounced() async throws {
        let sim = try await Sim.start(Self.configuration())
        defer { sim.close() }
        let objects = try await sim.managedObjects()
        #expect(objects[ObjectPath(Sim.adapter)!]?[Interface.adapter]?["Address"] == .string("00:1A:7D:DA:71:13"))
        #expect(objects[ObjectPath(Self.hci1)!]?[Interface.adapter]?["Address"] == .string("00:1A:7D:DA:71:14"))
        #expect(objects[ObjectPath(Self.hci1)!]?[Interface.adapter]?["Powered"] == .bool(true))
        try await sim.signal { $0.adds(Sim.adapter) }
        try await sim.signal { $0.adds(Self.hci1) }
    }

    @Test("each adapter hears a device at its own RSSI; one out of range does not hear it, until it moves")
    func rssiAndRangePerAdapter() async throws {
        let sim = try await Sim.start(Self.configuration())
        defer { sim.close() }
        let filter: [Value] = [.stringVariantDictionary([("Transport", .string("le"))])]
        for adapter in [Sim.adapter, Self.hci1] {
            try await sim.call(adapter, Interface.adapter, "SetDiscoveryFilter", filter)
            try await sim.call(adapter, Interface.adapter, "StartDiscovery")
        }
        let nearOn0 = try await sim.signal { $0.adds(Sim.devicePath(Self.near)) }
        let nearOn1 = try await sim.signal { $0.adds(Sim.devicePath(Self.near, on: "hci1")) }
        #expect(Connection.interfaces(nearOn0.body[1])[Interface.device]?["RSSI"] == .int16(-40))
        #expect(Connection.interfaces(nearOn1.body[1])[Interface.device]?["RSSI"] == .int16(-90))
        #expect(Connection.interfaces(nearOn1.body[1])[Interface.device]?["Adapter"] == .objectPath(ObjectPath(Self.hci1)!))
        try await sim.signal { $0.adds(Sim.devicePath(Self.west)) }
        // hci1 hears every advertisement (a filter is set): three more of `both` there, and
        // `west`, advertising as often, would have been heard by now if it were in range.
        let path = Sim.devicePath(Self.both, on: "hci1")
        for _ in 0..<3 { try await sim.signal(after: sim.mark) { $0.changes(path, Interface.device, "RSSI") } }
        #expect(sim.signals(after: 0) { $0.adds(Sim.devicePath(Self.west, on: "hci1")) }.isEmpty)
        #expect(try await sim.managedObjects()[ObjectPath(Sim.devicePath(Self.west, on: "hci1"))!] == nil)

        // It comes nearer hci1; `near` goes out of hci0's range.
        // The mark before the call: the first advertisement heard may come before its reply.
        let moved = sim.mark
        _ = try await sim.control("SetRSSI", [.string(Self.west), .string("hci1"), .int16(-70)])
        let westOn1 = try await sim.signal(after: moved) { $0.adds(Sim.devicePath(Self.west, on: "hci1")) }
        #expect(Connection.interfaces(westOn1.body[1])[Interface.device]?["RSSI"] == .int16(-70))
        _ = try await sim.control("SetRSSI", [.string(Self.near), .string("hci0"), .int16(127)])
        let gone = sim.mark
        let nearOn1Path = Sim.devicePath(Self.near, on: "hci1")
        for _ in 0..<3 { try await sim.signal(after: sim.mark) { $0.changes(nearOn1Path, Interface.device, "RSSI") } }
        #expect(sim.signals(after: gone) { $0.changes(Sim.devicePath(Self.near), Interface.device, "RSSI") }.isEmpty)

        await expectError("io.gattway.Simulator1.Error.UnknownAdapter", "no simulated adapter \"hci7\" (adapters: hci0, hci1)") {
            _ = try await sim.control("SetRSSI", [.string(Self.near), .string("hci7"), .int16(-50)])
        }
        await expectError("io.gattway.Simulator1.Error.InvalidArguments") {
            _ = try await sim.control("SetRSSI", [.string(Self.near), .string("hci1"), .int16(30)])
        }
    }

    @Test("a device connected through hci0 stops advertising: hci1 hears it no more and cannot connect it")
    func connectedThroughOneAdapterIsNotConnectableThroughTheOther() async throws {
        let sim = try await Sim.start(Self.configuration())
        defer { sim.close() }
        try await sim.discover([Self.both])
        try await sim.discover([Self.both], on: "hci1")
        try await sim.connect(Self.both)
        let on1 = Sim.devicePath(Self.both, on: "hci1")
        #expect(try await sim.property(on1, Interface.device, "Connected") == .bool(false))
        #expect(try await sim.managedObjects().keys.contains { $0.rawValue.hasPrefix(on1 + "/") } == false)

        // hci1 scans: it hears the others, not the connected one.
        try await sim.call(Self.hci1, Interface.adapter, "SetDiscoveryFilter", [.stringVariantDictionary([("Transport", .string("le"))])])
        let scan = sim.mark
        try await sim.call(Self.hci1, Interface.adapter, "StartDiscovery")
        let nearOn1 = Sim.devicePath(Self.near, on: "hci1")
        for _ in 0..<3 { try await sim.signal(after: sim.mark) { $0.adds(nearOn1) || $0.changes(nearOn1, Interface.device, "RSSI") } }
        #expect(sim.signals(after: scan) { $0.changes(on1, Interface.device, "RSSI") }.isEmpty)
        try await sim.call(Self.hci1, Interface.adapter, "StopDiscovery")

        // Its connection request finds nobody: the kernel's LE connection timeout (300 ms here).
        let start = ContinuousClock.now
        await expectError("org.bluez.Error.Failed", "le-connection-abort-by-local") { try await sim.connect(Self.both, on: "hci1") }
        #expect(ContinuousClock.now - start >= .milliseconds(290))
        #expect(try await sim.property(Sim.devicePath(Self.both), Interface.device, "Connected") == .bool(true))

        // Free again, it takes hci1's connection.
        try await sim.call(Sim.devicePath(Self.both), Interface.device, "Disconnect")
        try await sim.connect(Self.both, on: "hci1")
        #expect(try await sim.property(on1, Interface.device, "Connected") == .bool(true))
        let battery = try await sim.managedObjects().first { path, interfaces in
            path.rawValue.hasPrefix(on1 + "/") && interfaces[Interface.characteristic]?["UUID"] == .string("00002a19-0000-1000-8000-00805f9b34fb")
        }
        #expect(try await sim.read(try #require(battery?.key.rawValue)) == [100])
    }

    @Test("past its connection limit an adapter refuses at once as BlueZ reports it; another adapter still connects")
    func connectionLimitPerAdapter() async throws {
        let sim = try await Sim.start(Self.configuration(limit: 1))
        defer { sim.close() }
        try await sim.discover([Self.near, Self.both])
        try await sim.discover([Self.both], on: "hci1")
        try await sim.connect(Self.near)
        let mark = sim.mark
        let start = ContinuousClock.now
        await expectError("org.bluez.Error.Failed", "le-connection-concurrent-connection-limit") { try await sim.connect(Self.both) }
        #expect(ContinuousClock.now - start < .milliseconds(250))
        #expect(sim.signals(after: mark) { $0.changes(Sim.devicePath(Self.both), Interface.device, "Connected") }.isEmpty)
        try await sim.connect(Self.both, on: "hci1")
        // A slot freed is a slot to use.
        try await sim.call(Sim.devicePath(Self.near), Interface.device, "Disconnect")
        try await sim.call(Sim.devicePath(Self.both, on: "hci1"), Interface.device, "Disconnect")
        try await sim.connect(Self.both)
    }

    @Test("a dongle pulled out: its objects go, its links with them; plugged in, it comes back with no devices")
    func removeAndAddAnAdapter() async throws {
        let sim = try await Sim.start(Self.configuration())
        defer { sim.close() }
        try await sim.discover([Self.both])
        try await sim.discover([Self.near, Self.both], on: "hci1")
        try await sim.connect(Self.near, on: "hci1")
        try await sim.connect(Self.both)
        let near1 = Sim.devicePath(Self.near, on: "hci1")
        let battery = try #require(try await sim.managedObjects().keys.first {
            $0.rawValue.hasPrefix(near1 + "/") && $0.rawValue.contains("/char")
        }?.rawValue)
        try await sim.setFault(Self.near, #"{"responseDelayMs": 5000}"#)
        let read = Task { try await sim.read(battery) }
        try await sim.called("ReadValue", battery)
        let on1 = try await sim.managedObjects().keys.filter { $0.rawValue.hasPrefix(Self.hci1) }

        let mark = sim.mark
        _ = try await sim.control("RemoveAdapter", [.string("hci1")])
        await expectError("org.bluez.Error.Failed", "Operation failed") { _ = try await read.value }
        let removed = try await sim.signal(after: mark) { $0.removes(Self.hci1) }
        let gone = sim.signals(after: mark) { $0.member == "InterfacesRemoved" }.compactMap { $0.body.first?.objectPath }
        #expect(Set(gone) == Set(on1))
        #expect(gone.last == removed.body.first?.objectPath, "the adapter goes last")
        #expect(gone.firstIndex(of: ObjectPath(near1)!)! > gone.firstIndex(of: ObjectPath(battery)!)!, "children first")
        let changed = sim.signals(after: mark) { $0.member == "PropertiesChanged" && $0.path?.rawValue.hasPrefix(Self.hci1) == true }
        #expect(changed.isEmpty, "the objects go without property changes")
        #expect(try await sim.property(Sim.devicePath(Self.both), Interface.device, "Connected") == .bool(true))
        await expectError("org.freedesktop.DBus.Error.UnknownObject") { try await sim.connect(Self.near, on: "hci1") }
        await expectError("io.gattway.Simulator1.Error.NotPresent") {
            _ = try await sim.control("SetAdapterPowered", [.string("hci1"), .bool(true)])
        }
        await expectError("io.gattway.Simulator1.Error.NotPresent") { _ = try await sim.control("RemoveAdapter", [.string("hci1")]) }
        // Unplugged, its link is gone: hci0 can have the device.
        try await sim.discover([Self.near])
        try await sim.connect(Self.near)

        let back = sim.mark
        _ = try await sim.control("AddAdapter", [.string("hci1")])
        let added = try await sim.signal(after: back) { $0.adds(Self.hci1) }
        #expect(Connection.interfaces(added.body[1])[Interface.adapter]?["Powered"] == .bool(false))
        try await sim.signal(after: back) { $0.changes(Self.hci1, Interface.adapter, "Powered", .bool(true)) }
        #expect(try await sim.managedObjects().keys.filter { $0.rawValue.hasPrefix(Self.hci1) } == [ObjectPath(Self.hci1)!])
        await expectError("io.gattway.Simulator1.Error.AlreadyPresent") { _ = try await sim.control("AddAdapter", [.string("hci1")]) }
        try await sim.call(Sim.devicePath(Self.both), Interface.device, "Disconnect")
        try await sim.discover([Self.both], on: "hci1")
    }

    @Test("bonds are per adapter, and kept in bluetoothd's storage while the adapter is unplugged")
    func bondsPerAdapter() async throws {
        let sim = try await Sim.start(Self.configuration())
        defer { sim.close() }
        try await sim.discover([Self.both])
        try await sim.discover([Self.both], on: "hci1")
        let both0 = Sim.devicePath(Self.both), both1 = Sim.devicePath(Self.both, on: "hci1")
        try await sim.call(both1, Interface.device, "Pair")
        #expect(try await sim.property(both1, Interface.device, "Paired") == .bool(true))
        #expect(try await sim.property(both0, Interface.device, "Paired") == .bool(false))

        // Unplugged while a Connect waits on it: the attempt ends with the adapter.
        try await sim.call(both1, Interface.device, "Disconnect")
        try await sim.setFault(Self.both, #"{"connectDelayMs": 5000}"#)
        let connecting = Task { try await sim.connect(Self.both, on: "hci1") }
        try await sim.called("Connect", both1)
        _ = try await sim.control("RemoveAdapter", [.string("hci1")])
        await expectError("org.bluez.Error.Failed", "le-connection-abort-by-local") { try await connecting.value }

        let back = sim.mark
        _ = try await sim.control("AddAdapter", [.string("hci1")])
        let added = try await sim.signal(after: back) { $0.adds(both1) }
        #expect(Connection.interfaces(added.body[1])[Interface.device]?["Paired"] == .bool(true))
        #expect(Connection.interfaces(added.body[1])[Interface.device]?["RSSI"] == nil)
    }

    @Test("powering one adapter off drops its links only; the stale link it kept ends with it")
    func poweringOneAdapterOff() async throws {
        let sim = try await Sim.start(Self.configuration())
        defer { sim.close() }
        try await sim.discover([Self.near])
        try await sim.discover([Self.both], on: "hci1")
        try await sim.connect(Self.near)
        try await sim.connect(Self.both, on: "hci1")
        let both1 = Sim.devicePath(Self.both, on: "hci1")

        // The stale link lives in hci1's kernel: hci1 cannot connect, hci0 can.
        let stale = sim.mark
        try await sim.setFault(Self.both, #"{"staleLink": true}"#)
        try await sim.signal(after: stale) { $0.changes(both1, Interface.device, "Connected", .bool(false)) }
        await expectError("org.bluez.Error.Failed", "Input/output error") { try await sim.connect(Self.both, on: "hci1") }
        try await sim.discover([Self.both])
        try await sim.connect(Self.both)
        try await sim.call(Sim.devicePath(Self.both), Interface.device, "Disconnect")
        await expectError("org.bluez.Error.Failed", "Input/output error") { try await sim.connect(Self.both, on: "hci1") }

        let mark = sim.mark
        _ = try await sim.control("SetAdapterPowered", [.string("hci1"), .bool(false)])
        try await sim.signal(after: mark) { $0.changes(Self.hci1, Interface.adapter, "Powered", .bool(false)) }
        #expect(try await sim.property(Sim.adapter, Interface.adapter, "Powered") == .bool(true))
        #expect(try await sim.property(Sim.devicePath(Self.near), Interface.device, "Connected") == .bool(true))
        let onHci0 = sim.signals(after: mark) { $0.path?.rawValue.hasPrefix(Sim.adapter + "/") == true }
        #expect(onHci0.isEmpty, "nothing changes on hci0")
        _ = try await sim.control("SetAdapterPowered", [.string("hci1"), .bool(true)])
        try await sim.connect(Self.both, on: "hci1")
        #expect(try await sim.property(both1, Interface.device, "Connected") == .bool(true))

        // The old call powers hci0.
        _ = try await sim.control("SetPowered", [.bool(false)])
        #expect(try await sim.property(Sim.devicePath(Self.near), Interface.device, "Connected") == .bool(false))
        #expect(try await sim.property(both1, Interface.device, "Connected") == .bool(true))
    }
}
