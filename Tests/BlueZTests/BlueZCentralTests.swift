import BLE
import DBus
import Simulator
import Testing
@testable import BlueZ

private func uuid(_ text: String) -> BluetoothUUID { BluetoothUUID(text)! }

private func isValue(_ id: BluetoothAddress, _ characteristic: String) -> EventLog.Match {
    { event in
        if case .value(let v) = event { v.device == id && v.characteristicUUID == uuid(characteristic) } else { false }
    }
}

/// The BlueZ central against the simulator, in-process, through the `Central` protocol.
@Suite(.serialized) struct BlueZCentralTests {
    @Test func startsPoweredOnWithTheAdapter() async throws {
        let rig = try await CentralRig.start()
        defer { rig.close() }
        let status = await rig.central.status()
        #expect(status.state == .poweredOn)
        #expect(status.adapter == "hci0")
        #expect(try await rig.central.adapters().map(\.selected) == [true])
    }

    @Test func scanFiltersWhatJoinsTheList() async throws {
        let rig = try await CentralRig.start()
        defer { rig.close() }
        // To know that the serial module advertised during the scan: BlueZ's own signal for it.
        let (advertised, seen) = AsyncStream.makeStream(of: Void.self)
        let serialPath = ObjectPath("/org/bluez/hci0/dev_F0_00_00_00_00_02")!
        try await rig.client.subscribe(MatchRule(sender: "org.bluez", pathNamespace: serialPath)) { _ in seen.yield() }
        var options = ScanOptions()
        options.namePrefix = "Sim Heart"
        _ = try await rig.central.startScan(options)
        var signals = advertised.makeAsyncIterator()
        _ = await signals.next()
        _ = try await rig.events.wait { if case .advertisement(let p) = $0 { p.id == CentralRig.hr } else { false } }
        #expect(await rig.central.peripherals().map(\.id) == [CentralRig.hr])
        #expect(await rig.central.scanStatus().discovered == 1)
        #expect(rig.events.count { if case .advertisement(let p) = $0 { p.id != CentralRig.hr } else { false } } == 0)
        let stopped = try await rig.central.stopScan()
        #expect(!stopped.scanning)
    }

    /// Without duplicates a device is discovered once; each later change of its advertised data
    /// is still passed on (as `advertisementChanged`), for the sensor decoders.
    @Test func advertisedDataChangesArePassedOnWithoutDuplicates() async throws {
        let rig = try await CentralRig.start()
        defer { rig.close() }
        let eddystone = BluetoothAddress("F0:00:00:00:00:05")!
        _ = try await rig.central.startScan(ScanOptions())
        _ = try await rig.events.wait { if case .advertisement(let p) = $0 { p.id == eddystone } else { false } }
        try await rig.control("SetServiceData", [.string(eddystone.description), .string("feaa"), .bytes([0x10, 0xEE, 0x00, 0x41])])
        let changed = try await rig.events.wait {
            if case .advertisementChanged(let p) = $0 { p.id == eddystone } else { false }
        }
        guard case .advertisementChanged(let info) = changed else { return }
        #expect(info.advertisement.serviceData[BluetoothUUID("feaa")!] == [0x10, 0xEE, 0x00, 0x41])
        #expect(rig.events.count { if case .advertisement(let p) = $0 { p.id == eddystone } else { false } } == 1)
    }

    /// The watch reports every advertisement BlueZ signals of its devices (a Bluetooth proxy's
    /// clients want the steady stream), also of a device whose data never changes: BlueZ signals
    /// its RSSI at each one, a discovery filter being set.
    @Test func theWatchReportsEveryAdvertisement() async throws {
        let rig = try await CentralRig.start()
        defer { rig.close() }
        let secure = BluetoothAddress("F0:00:00:00:00:03")!  // a name and a service UUID, no data
        _ = try await rig.central.startWatch(WatchOptions(devices: [secure]))
        let isSecure: EventLog.Match = { if case .advertisementChanged(let p) = $0 { p.id == secure } else { false } }
        _ = try await rig.events.wait(what: "a first advertisement", isSecure)
        for n in 2...3 {  // it advertises every second
            _ = try await rig.events.wait(since: rig.events.all.count, timeout: .seconds(3), what: "advertisement \(n)", isSecure)
        }
        #expect(rig.events.count { if case .advertisementChanged(let p) = $0 { p.id != secure } else { false } } == 0)
    }

    @Test func connectResolvesTheGATTTree() async throws {
        let rig = try await CentralRig.connected([CentralRig.hr])
        defer { rig.close() }
        let info = try await rig.central.peripheral(CentralRig.hr)
        #expect(info.state == .connected)
        #expect(info.mtu != nil)
        let services = try await rig.central.services(CentralRig.hr)
        #expect(services.map(\.uuid).contains(uuid("180d")))
        #expect(services.map(\.handle) == services.map(\.handle).sorted())
        let measurement = try await rig.central.characteristic(CentralRig.hr, CharacteristicRef(.uuid(uuid("2a37"))))
        #expect(measurement.properties == [.notify])
        #expect(measurement.descriptors.map(\.uuid) == [uuid("2902")])
        _ = try await rig.events.wait { if case .connection(let id, .connected, nil) = $0 { id == CentralRig.hr } else { false } }
    }

    @Test func readsWritesAndChecksProperties() async throws {
        let rig = try await CentralRig.connected([CentralRig.hr])
        defer { rig.close() }
        let battery = try await rig.central.readValue(CentralRig.hr, CharacteristicRef(.uuid(uuid("2a19"))), offset: 0)
        #expect(battery.uuid == uuid("2a19"))
        #expect(battery.value.count == 1)
        let written = try await rig.central.writeValue(CentralRig.hr, CharacteristicRef(.uuid(uuid("2a39"))), [0x01],
                                                       type: .withResponse, fragment: false)
        #expect(written.writes == 1)
        #expect(written.written == 1)
        // The peer refuses other values with its application error.
        let rejected = await #expect(throws: BLEError.self) {
            _ = try await rig.central.writeValue(CentralRig.hr, CharacteristicRef(.uuid(uuid("2a39"))), [0x02],
                                                 type: .withResponse, fragment: false)
        }
        #expect(rejected?.code == .att(ATTErrorCode(rawValue: 0x80)))
        // Checked before anything goes to BlueZ.
        let notReadable = await #expect(throws: BLEError.self) {
            _ = try await rig.central.readValue(CentralRig.hr, CharacteristicRef(.uuid(uuid("2a37"))), offset: 0)
        }
        #expect(notReadable?.code == .att(.readNotPermitted))
        let missing = await #expect(throws: BLEError.self) {
            _ = try await rig.central.readValue(CentralRig.hr, .handle(0x7777), offset: 0)
        }
        #expect(missing?.code == .cb(.invalidHandle))
    }

    @Test func longWritesWithoutResponseAreFragmentedAndCounted() async throws {
        let rig = try await CentralRig.connected([CentralRig.serial])
        defer { rig.close() }
        let serial = CharacteristicRef(.uuid(uuid("ffe1")))
        let mtu = try #require(try await rig.central.peripheral(CentralRig.serial).mtu)
        let value = [UInt8](repeating: 0x41, count: 2 * (mtu - 3) + 1)
        try await rig.control("ResetCounters", [])
        let outcome = try await rig.central.writeValue(CentralRig.serial, serial, value, type: .withoutResponse, fragment: true)
        #expect(outcome.writes == 3)
        #expect(outcome.written == value.count)
        let calls = try await rig.control("CallCount", [.string("WriteValue"), .string("")])
        #expect(calls.first?.integer == 3)
        let refused = await #expect(throws: BLEError.self) {
            _ = try await rig.central.writeValue(CentralRig.serial, serial, value, type: .withoutResponse, fragment: false)
        }
        #expect(refused?.code == .att(.invalidAttributeValueLength))
    }

    @Test func notificationsArriveInOrderWithTheirCharacteristic() async throws {
        let rig = try await CentralRig.connected([CentralRig.serial])
        defer { rig.close() }
        #expect(try await rig.central.setNotifyValue(true, CentralRig.serial, characteristic: try await rig.central
            .characteristic(CentralRig.serial, CharacteristicRef(.uuid(uuid("ffe1")))).handle))
        let before = rig.events.recorded
        for i in 0..<20 { try await rig.notify(CentralRig.serial, "ffe1", [UInt8(i)]) }
        _ = try await rig.events.wait(since: before) {
            if case .value(let v) = $0 { v.value == [19] } else { false }
        }
        let values = rig.events.all.dropFirst(before).compactMap { event -> [UInt8]? in
            if case .value(let v) = event, v.characteristicUUID == uuid("ffe1") { v.value } else { nil }
        }
        #expect(values == (0..<20).map { [UInt8($0)] })
    }

    @Test func aLostLinkIsReportedAsTheDeviceDisconnecting() async throws {
        let rig = try await CentralRig.connected([CentralRig.hr])
        defer { rig.close() }
        try await rig.control("DropLink", [.string(CentralRig.hr.description)])
        let lost = try await rig.events.wait {
            if case .connection(let id, .disconnected, _) = $0 { id == CentralRig.hr } else { false }
        }
        guard case .connection(_, _, let error) = lost else { return }
        #expect(error?.code == .cb(.peripheralDisconnected))
        let read = await #expect(throws: BLEError.self) {
            _ = try await rig.central.readValue(CentralRig.hr, CharacteristicRef(.uuid(uuid("2a19"))), offset: 0)
        }
        #expect(read?.code == .cb(.notConnected))
        // An explicit disconnect is no error.
        _ = try await rig.central.connect(CentralRig.hr, timeout: .seconds(20), autoReconnect: false)
        let since = rig.events.recorded
        _ = try await rig.central.disconnect(CentralRig.hr)
        let ours = try await rig.events.wait(since: since) {
            if case .connection(let id, .disconnected, _) = $0 { id == CentralRig.hr } else { false }
        }
        #expect(ours == .connection(id: CentralRig.hr, state: .disconnected, error: nil))
    }

    @Test func bluetoothdLeavingTheBusIsReported() async throws {
        let rig = try await CentralRig.connected([CentralRig.hr])
        defer { rig.close() }
        let since = rig.events.recorded
        rig.simulator.stop()
        rig.server.close()
        _ = try await rig.events.wait(since: since) { if case .state(let s) = $0 { s.state == .unsupported } else { false } }
        let status = await rig.central.status()
        #expect(status.state == .unsupported)
        #expect(status.reason?.contains("bluetoothd") == true)
        #expect(await rig.central.peripherals().isEmpty)
        let read = await #expect(throws: BLEError.self) {
            _ = try await rig.central.readValue(CentralRig.hr, CharacteristicRef(.uuid(uuid("2a19"))), offset: 0)
        }
        #expect(read?.code == .cb(.unknownDevice))
    }

    /// A peripheral with ~2 000 GATT objects: a notification is found by lookup, not by looking
    /// through the tree (counted: objects the tree's scans visit, device entries built).
    @Test func perNotificationWorkDoesNotDependOnTheTreeSize() async throws {
        let address = BluetoothAddress("F0:00:00:00:00:42")!
        let services = (0..<100).map { s in
            SimulatorConfiguration.Service(uuid: uuid(String(format4(0xA000 + s))), characteristics: (0..<10).map { c in
                SimulatorConfiguration.Characteristic(uuid: uuid(String(format4(0xB000 + s * 10 + c))), flags: ["read", "notify"], value: [0])
            })
        }
        let big = SimulatorConfiguration(devices: [SimulatorConfiguration.Device(address: address, name: "Big", services: services)])
        let rig = try await CentralRig.connected([address], big)
        defer { rig.close() }
        let objects = rig.central.link.tree.subtree(under: try rig.central.link.index.devicePath(address)).count
        #expect(objects >= 2_000)  // 100 services, 1 000 characteristics, their 1 000 CCCDs
        let target = String(format4(0xB000 + 999))
        let handle = try await rig.central.characteristic(address, CharacteristicRef(.uuid(uuid(target)))).handle
        #expect(try await rig.central.setNotifyValue(true, address, characteristic: handle))
        try await rig.notify(address, target, [0xFF])  // the first after a change may build the entry
        _ = try await rig.events.wait(isValue(address, target))
        let visits = rig.central.link.tree.visits.load(ordering: .relaxed)
        let builds = rig.central.link.index.builds.load(ordering: .relaxed)
        let before = rig.events.recorded
        for i in 0..<200 { try await rig.notify(address, target, [UInt8(i)]) }
        _ = try await rig.events.wait(since: before) { if case .value(let v) = $0 { v.value == [199] } else { false } }
        #expect(rig.events.count(isValue(address, target)) == 201)
        #expect(rig.central.link.tree.visits.load(ordering: .relaxed) == visits, "notifications made the tree scan its objects")
        #expect(rig.central.link.index.builds.load(ordering: .relaxed) == builds, "notifications rebuilt the device's GATT entry")
    }
}

/// Four hex digits.
private func format4(_ n: Int) -> String {
    let hex = String(n, radix: 16)
    return String(repeating: "0", count: max(0, 4 - hex.count)) + hex
}
