import BLE
import DBus
import Testing
@testable import Simulator

@Suite(.serialized) struct DiscoveryTests {
    @Test func discoveryAddsDevicesThenReportsRSSIWhileDiscovering() async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        let hr = Sim.devicePath(Sim.hr)
        try await sim.call(Sim.adapter, Interface.adapter, "SetDiscoveryFilter",
                           [.stringVariantDictionary([("Transport", .string("le")), ("DuplicateData", .bool(false))])])
        try await sim.call(Sim.adapter, Interface.adapter, "StartDiscovery")
        try await sim.signal { $0.changes(Sim.adapter, Interface.adapter, "Discovering", .bool(true)) }
        let added = try await sim.signal { $0.adds(hr) }
        let props = Connection.interfaces(added.body[1])[Interface.device] ?? [:]
        #expect(props["Address"] == .string(Sim.hr))
        #expect(props["Alias"] == .string("Sim Heart Rate"))
        #expect(props["Name"] == .string("Sim Heart Rate"))
        #expect(props["Adapter"] == .objectPath(ObjectPath(Sim.adapter)!))
        #expect(props["Connected"] == .bool(false))
        #expect(props["ServicesResolved"] == .bool(false))
        #expect(props["TxPower"] == .int16(4))
        #expect(props["UUIDs"]?.strings == ["0000180d-0000-1000-8000-00805f9b34fb", "0000180f-0000-1000-8000-00805f9b34fb"])
        let rssi = try #require(props["RSSI"]?.integer)
        #expect((-59...(-51)).contains(rssi))
        let data = try #require(props["ManufacturerData"]?.dictionaryEntries?.first)
        #expect(data.key == .uint16(0xFFFF))
        #expect(data.value.bytes?.prefix(2) == [0x48, 0x52])
        // Added devices carry the standard interfaces too, as gdbus lists them.
        #expect(Connection.interfaces(added.body[1]).keys.contains(Interface.properties))

        // Every advertisement while discovering: RSSI, and the manufacturer data counter moves.
        let mark = sim.mark
        let first = try await sim.signal(after: mark, timeout: .seconds(3)) { $0.changes(hr, Interface.device, "RSSI") }
        #expect(first.body[1].stringDictionary?["ManufacturerData"] != nil)
        try await sim.signal(after: sim.mark, timeout: .seconds(3)) { $0.changes(hr, Interface.device, "RSSI") }

        await expectError("org.bluez.Error.InProgress", "Operation already in progress") {
            try await sim.call(Sim.adapter, Interface.adapter, "StartDiscovery")
        }
        let stop = sim.mark
        try await sim.call(Sim.adapter, Interface.adapter, "StopDiscovery")
        try await sim.signal(after: stop) { $0.changes(Sim.adapter, Interface.adapter, "Discovering", .bool(false)) }
        // bluetoothd forgets RSSI and TX power, drops the beacons, keeps connectable devices.
        try await sim.signal(after: stop) { $0.invalidates(hr, "RSSI") && $0.invalidates(hr, "TxPower") }
        try await sim.signal(after: stop) { $0.removes(Sim.devicePath(Sim.beacon)) }
        #expect(try await sim.managedObjects()[ObjectPath(hr)!] != nil)
        await expectError("org.bluez.Error.Failed", "No discovery started") {
            try await sim.call(Sim.adapter, Interface.adapter, "StopDiscovery")
        }
        // Back to discovering: a known device is reported again by a PropertiesChanged.
        let again = sim.mark
        try await sim.call(Sim.adapter, Interface.adapter, "StartDiscovery")
        try await sim.signal(after: again, timeout: .seconds(1)) { $0.changes(hr, Interface.device, "RSSI") }
    }

    @Test func aBeaconWithoutNameShowsItsAddressAsAlias() async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        try await sim.call(Sim.adapter, Interface.adapter, "StartDiscovery")
        let added = try await sim.signal { $0.adds(Sim.devicePath(Sim.beacon)) }
        let props = Connection.interfaces(added.body[1])[Interface.device] ?? [:]
        #expect(props["Name"] == nil)
        #expect(props["Alias"] == .string("F0-00-00-00-00-04"))
        let data = try #require(props["ManufacturerData"]?.dictionaryEntries?.first)
        #expect(data.key == .uint16(0x004C))
        #expect(data.value.bytes?.prefix(2) == [0x02, 0x15])
        #expect(data.value.bytes?.count == 23)
        let eddystone = try await sim.signal { $0.adds(Sim.devicePath(Sim.eddystone)) }
        let service = Connection.interfaces(eddystone.body[1])[Interface.device]?["ServiceData"]?.dictionaryEntries?.first
        #expect(service?.key == .string("0000feaa-0000-1000-8000-00805f9b34fb"))
        #expect(service?.value.bytes?.first == 0x10)
    }

    /// `SetServiceData`: the next advertisement carries the new bytes, reported as a change of
    /// ServiceData, as bluetoothd reports a sensor's new payload.
    @Test func setServiceDataChangesTheNextAdvertisement() async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        try await sim.call(Sim.adapter, Interface.adapter, "StartDiscovery")
        try await sim.signal { $0.adds(Sim.devicePath(Sim.eddystone)) }
        let mark = sim.mark
        _ = try await sim.control("SetServiceData", [.string(Sim.eddystone), .string("feaa"), .bytes([0x10, 0xEE, 0x00, 0x41])])
        let changed = try await sim.signal(after: mark) { $0.changes(Sim.devicePath(Sim.eddystone), Interface.device, "ServiceData") }
        let entry = changed.body[1].stringDictionary?["ServiceData"]?.unwrapped.dictionaryEntries?.first
        #expect(entry?.key == .string("0000feaa-0000-1000-8000-00805f9b34fb"))
        #expect(entry?.value.bytes == [0x10, 0xEE, 0x00, 0x41])
        await expectError("io.gattway.Simulator1.Error.InvalidArguments") {
            _ = try await sim.control("SetServiceData", [.string(Sim.eddystone), .string("nope"), .bytes([])])
        }
    }

    @Test("a UUID filter only lets matching devices in; filters of clients are merged")
    func uuidFilter() async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        try await sim.call(Sim.adapter, Interface.adapter, "SetDiscoveryFilter",
                           [.stringVariantDictionary([("UUIDs", .strings(["ffe0"])), ("Transport", .string("le"))])])
        try await sim.call(Sim.adapter, Interface.adapter, "StartDiscovery")
        try await sim.signal { $0.adds(Sim.devicePath(Sim.serial)) }
        try await Task.sleep(for: .milliseconds(1200))
        #expect(sim.signals(after: 0) { $0.adds(Sim.devicePath(Sim.hr)) }.isEmpty)

        // A second client without a filter: everything is found.
        let other = try Connection(address: sim.bus.address)
        defer { other.close() }
        try await sim.call(Sim.adapter, Interface.adapter, "StartDiscovery", from: other)
        try await sim.signal { $0.adds(Sim.devicePath(Sim.hr)) }
    }

    @Test func anRSSIFilterHidesFarDevices() async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        try await sim.call(Sim.adapter, Interface.adapter, "SetDiscoveryFilter", [.stringVariantDictionary([("RSSI", .int16(-60))])])
        try await sim.call(Sim.adapter, Interface.adapter, "StartDiscovery")
        try await sim.signal { $0.adds(Sim.devicePath(Sim.hr)) }
        try await Task.sleep(for: .milliseconds(1200))
        #expect(sim.signals(after: 0) { $0.adds(Sim.devicePath(Sim.beacon)) }.isEmpty)
    }

    @Test("SetDiscoveryFilter refuses what bluetoothd refuses", arguments: [
        ("unknown key", [("Colour", Value.variant(.string("blue")))]),
        ("wrong type", [("RSSI", .variant(.int32(-60)))]),
        ("RSSI out of range", [("RSSI", .variant(.int16(-200)))]),
        ("RSSI with Pathloss", [("RSSI", .variant(.int16(-60))), ("Pathloss", .variant(.uint16(10)))]),
        ("bad transport", [("Transport", .variant(.string("radio")))]),
        ("bad UUID", [("UUIDs", .variant(.strings(["not-a-uuid"])))]),
    ] as [(String, [(String, Value)])])
    func invalidFilters(name: String, entries: [(String, Value)]) async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        let dictionary = Value.dictionary(key: Signature("s")!, value: Signature("v")!, entries.map { .init(.string($0.0), $0.1) })
        await expectError("org.bluez.Error.InvalidArguments", "Invalid arguments in method call") {
            try await sim.call(Sim.adapter, Interface.adapter, "SetDiscoveryFilter", [dictionary])
        }
    }

    @Test func getDiscoveryFiltersListsTheKeys() async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        let keys = try await sim.call(Sim.adapter, Interface.adapter, "GetDiscoveryFilters").first?.strings
        #expect(keys == ["UUIDs", "RSSI", "Pathloss", "Transport", "DuplicateData", "Discoverable", "Pattern"])
    }

    @Test func discoveryStopsWhenItsClientLeavesTheBus() async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        let other = try Connection(address: sim.bus.address)
        try await sim.call(Sim.adapter, Interface.adapter, "StartDiscovery", from: other)
        try await sim.signal { $0.changes(Sim.adapter, Interface.adapter, "Discovering", .bool(true)) }
        // The recording client's StopDiscovery is refused: discovery is per client.
        await expectError("org.bluez.Error.Failed", "No discovery started") {
            try await sim.call(Sim.adapter, Interface.adapter, "StopDiscovery")
        }
        let mark = sim.mark
        other.close()
        try await sim.signal(after: mark) { $0.changes(Sim.adapter, Interface.adapter, "Discovering", .bool(false)) }
    }

    @Test func removeDeviceWithdrawsItAndUnknownOnesDoNotExist() async throws {
        let sim = try await Sim.connected([Sim.hr])
        defer { sim.close() }
        let hr = Sim.devicePath(Sim.hr)
        let mark = sim.mark
        try await sim.call(Sim.adapter, Interface.adapter, "RemoveDevice", [.objectPath(ObjectPath(hr)!)])
        try await sim.signal(after: mark) { $0.changes(hr, Interface.device, "Connected", .bool(false)) }
        try await sim.signal(after: mark) { $0.removes(hr + "/service000a") }
        try await sim.signal(after: mark) { $0.removes(hr) }
        #expect(try await sim.managedObjects().keys.allSatisfy { !$0.rawValue.hasPrefix(hr) })
        await expectError("org.bluez.Error.DoesNotExist", "Does Not Exist") {
            try await sim.call(Sim.adapter, Interface.adapter, "RemoveDevice", [.objectPath(ObjectPath(hr)!)])
        }
    }

    @Test func temporaryDevicesDisappearAfterTheTimeout() async throws {
        var configuration = SimulatorConfiguration.builtIn
        configuration.adapter.temporaryTimeoutSec = 1
        let sim = try await Sim.start(configuration)
        defer { sim.close() }
        try await sim.discover([Sim.hr, Sim.serial])
        try await sim.connect(Sim.serial)  // connected once: no longer temporary
        try await sim.signal(timeout: .seconds(3)) { $0.removes(Sim.devicePath(Sim.hr)) }
        #expect(try await sim.managedObjects()[ObjectPath(Sim.devicePath(Sim.serial))!] != nil)
    }

    /// A device with addressRotationMs takes a new random address: bluetoothd hears a new
    /// device (a random static address, AddressType random), and drops the old address once it
    /// has not heard it for TemporaryTimeout.
    @Test func aRotatingAddressIsANewDeviceAndTheOldOneTimesOut() async throws {
        var configuration = SimulatorConfiguration(devices: [SimulatorConfiguration.Device(
            address: BluetoothAddress("F1:00:00:00:00:01")!, name: "Phone", advertisingIntervalMs: 100, addressRotationMs: 600)])
        configuration.adapter.temporaryTimeoutSec = 1
        let sim = try await Sim.start(configuration)
        defer { sim.close() }
        let first = Sim.devicePath("F1:00:00:00:00:01")
        let mark = sim.mark
        _ = try await sim.call(Sim.adapter, Interface.adapter, "StartDiscovery")
        try await sim.signal(after: mark) { $0.adds(first) }
        let added = try await sim.signal(after: mark, timeout: .seconds(3)) {
            $0.member == "InterfacesAdded" && $0.body.first?.objectPath?.rawValue.hasPrefix("/org/bluez/hci0/dev_") == true
                && $0.body.first?.objectPath?.rawValue != first
        }
        let second = try #require(added.body.first?.objectPath)
        let device = try #require(added.body[1].dictionaryEntries?.first { $0.key.string == Interface.device }?.value)
        let props = try #require(device.stringDictionary)
        #expect(props["AddressType"]?.string == "random")
        #expect(props["Name"]?.string == "Phone")
        let address = try #require(props["Address"]?.string.flatMap { BluetoothAddress($0) })
        #expect(address.bytes[0] & 0xC0 == 0xC0, "a random static address")
        // The old address, no longer heard, goes after its TemporaryTimeout; meanwhile the
        // device went on to more addresses, each a new device.
        try await sim.signal(after: mark, timeout: .seconds(3)) { $0.removes(first) }
        let addresses = Set(sim.signals(after: mark) { $0.member == "InterfacesAdded" }.compactMap { $0.body.first?.objectPath })
        #expect(addresses.count >= 3 && addresses.contains(second))
    }

    @Test func aDeviceThatKeepsAdvertisingIsNotRemovedDuringDiscovery() async throws {
        var configuration = SimulatorConfiguration.builtIn
        configuration.adapter.temporaryTimeoutSec = 1
        configuration.devices[0].advertisingIntervalMs = 200
        let sim = try await Sim.start(configuration)
        defer { sim.close() }
        let hr = Sim.devicePath(Sim.hr)
        let mark = sim.mark
        _ = try await sim.call(Sim.adapter, Interface.adapter, "StartDiscovery")
        try await sim.signal(after: mark) { $0.adds(hr) }
        // Three TemporaryTimeouts long, bluetoothd keeps hearing it: no removal (BlueZ restarts
        // the timer at every report).
        try await Task.sleep(for: .milliseconds(3000))
        #expect(sim.signals(after: mark) { $0.removes(hr) }.isEmpty)
        _ = try await sim.call(Sim.adapter, Interface.adapter, "StopDiscovery")
        try await sim.signal(after: mark, timeout: .seconds(3)) { $0.removes(hr) }
    }
}
