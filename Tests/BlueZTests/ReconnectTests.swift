import BLE
import DBus
import Simulator
import Testing
@testable import BlueZ

private let serialCharacteristic = CharacteristicRef(.uuid(BluetoothUUID("ffe1")!))

private func connection(_ id: BluetoothAddress, _ state: PeripheralState) -> EventLog.Match {
    { if case .connection(id, state, _) = $0 { true } else { false } }
}

private func reconnecting(_ id: BluetoothAddress) -> EventLog.Match {
    { if case .reconnecting(id, _, _, _) = $0 { true } else { false } }
}

private func value(_ bytes: [UInt8]) -> EventLog.Match {
    { if case .value(let v) = $0 { v.value == bytes } else { false } }
}

/// Keeping devices connected (`autoReconnect`), against the simulator's faults.
@Suite(.serialized) struct ReconnectTests {
    /// Subscribes to the serial module's notifications and checks one arrives.
    private func subscribe(_ rig: CentralRig) async throws {
        let handle = try await rig.central.characteristic(CentralRig.serial, serialCharacteristic).handle
        #expect(try await rig.central.setNotifyValue(true, CentralRig.serial, characteristic: handle))
        try await expectNotification(rig, [0xA0])
    }

    /// The peripheral notifies every 50 ms, as a sensor would, until gattway hears one: after a
    /// reconnection the notifications it restores start when BlueZ has written the CCCD again.
    private func expectNotificationsResume(_ rig: CentralRig, deadline: Duration = .seconds(10)) async throws {
        let end = ContinuousClock.now + deadline
        var n: UInt8 = 0
        while ContinuousClock.now < end {
            n &+= 1
            let since = rig.events.recorded
            try await rig.notify(CentralRig.serial, "ffe1", [0xB0, n])
            if (try? await rig.events.wait(since: since, timeout: .milliseconds(50), what: "a notification", value([0xB0, n]))) != nil { return }
        }
        Issue.record("no notification within \(deadline) of the reconnection")
    }

    private func expectNotification(_ rig: CentralRig, _ bytes: [UInt8]) async throws {
        let since = rig.events.recorded
        try await rig.notify(CentralRig.serial, "ffe1", bytes)
        _ = try await rig.events.wait(since: since, what: "the notification \(bytes)", value(bytes))
    }

    @Test func aLostLinkIsReconnectedAndNotificationsFlowAgain() async throws {
        let rig = try await CentralRig.connected([CentralRig.serial], autoReconnect: true)
        defer { rig.close() }
        try await subscribe(rig)
        let since = rig.events.recorded
        try await rig.control("DropLink", [.string(CentralRig.serial.description)])
        let back = try await rig.events.wait(since: since, connection(CentralRig.serial, .connected))
        // In order: the loss with its error, the attempt announced, the link back.
        let seen = rig.events.all.dropFirst(since).prefix { $0 != back } + [back]
        let kinds = seen.compactMap { event -> String? in
            switch event {
            case .connection(CentralRig.serial, .disconnected, let error?) where error.code == .cb(.peripheralDisconnected): "lost"
            case .reconnecting(CentralRig.serial, 1, let delay, _) where delay <= .milliseconds(100): "attempt 1"
            case .connection(CentralRig.serial, .connected, nil): "connected"
            default: nil
            }
        }
        #expect(kinds == ["lost", "attempt 1", "connected"])
        try await expectNotificationsResume(rig)
        #expect(try await rig.central.peripheral(CentralRig.serial).reconnect != nil, "still kept")
    }

    @Test func anExplicitDisconnectIsNeverRetried() async throws {
        let rig = try await CentralRig.connected([CentralRig.serial], autoReconnect: true)
        defer { rig.close() }
        let since = rig.events.recorded
        _ = try await rig.central.disconnect(CentralRig.serial)
        _ = try await rig.events.wait(since: since, connection(CentralRig.serial, .disconnected))
        // Absence has no event: wait out three of the quick policy's longest delays.
        try await Task.sleep(for: .milliseconds(1200))
        #expect(rig.events.count { if case .reconnecting = $0 { true } else { false } } == 0)
        #expect(try await rig.central.peripheral(CentralRig.serial).state == .disconnected)
        #expect(try await rig.central.peripheral(CentralRig.serial).reconnect == nil)
    }

    @Test func aDeviceNotKeptIsNotReconnected() async throws {
        let rig = try await CentralRig.connected([CentralRig.serial], autoReconnect: false)
        defer { rig.close() }
        let since = rig.events.recorded
        try await rig.control("DropLink", [.string(CentralRig.serial.description)])
        _ = try await rig.events.wait(since: since, connection(CentralRig.serial, .disconnected))
        try await Task.sleep(for: .milliseconds(1200))  // as above: nothing may follow
        #expect(rig.events.count(reconnecting(CentralRig.serial)) == 0)
    }

    /// The serial module kept connected with its first attempt 30 s away, and its link lost:
    /// the attempt is announced and pending.
    private func lostWithAnAttemptPending() async throws -> CentralRig {
        let slow = ReconnectPolicy(first: 30...30, factor: 2, jitter: 0, maximum: 60)
        let rig = try await CentralRig.connected([CentralRig.serial], autoReconnect: true, policy: slow)
        let since = rig.events.recorded
        try await rig.control("DropLink", [.string(CentralRig.serial.description)])
        _ = try await rig.events.wait(since: since, reconnecting(CentralRig.serial))
        return rig
    }

    @Test func requestsWhileReconnectingSaySo() async throws {
        let rig = try await lostWithAnAttemptPending()
        defer { rig.close() }
        let refused = await #expect(throws: BLEError.self) {
            _ = try await rig.central.readValue(CentralRig.serial, serialCharacteristic, offset: 0)
        }
        #expect(refused?.code == .cb(.notConnected))
        #expect(refused?.message.contains("reconnecting (attempt 1, next try in 30 s)") == true, "\(refused?.message ?? "")")
        let listed = try await rig.central.peripheral(CentralRig.serial).reconnect
        #expect(listed?.attempt == 1)
        #expect(listed?.lastError?.code == .cb(.peripheralDisconnected))
    }

    @Test func afterABluetoothdRestartTheDeviceAndItsNotificationsComeBack() async throws {
        let rig = try await CentralRig.connected([CentralRig.serial], autoReconnect: true)
        defer { rig.close() }
        try await subscribe(rig)
        let since = rig.events.recorded
        try await rig.control("Restart", [.uint32(300)])
        _ = try await rig.events.wait(since: since, what: "unsupported") { if case .state(let s) = $0 { s.state == .unsupported } else { false } }
        _ = try await rig.events.wait(since: since, what: "disconnected", connection(CentralRig.serial, .disconnected))
        _ = try await rig.events.wait(since: since, timeout: .seconds(20), what: "connected", connection(CentralRig.serial, .connected))
        // bluetoothd's notify session died with it: gattway made a new one.
        try await expectNotificationsResume(rig)
        #expect(await rig.central.status().state == .poweredOn)
    }

    @Test func anAdapterPoweredOffAndOnReconnects() async throws {
        let rig = try await CentralRig.connected([CentralRig.serial], autoReconnect: true)
        defer { rig.close() }
        try await subscribe(rig)
        let since = rig.events.recorded
        try await rig.control("SetPowered", [.bool(false)])
        _ = try await rig.events.wait(since: since, connection(CentralRig.serial, .disconnected))
        _ = try await rig.events.wait(since: since) { if case .state(let s) = $0 { s.state == .poweredOff } else { false } }
        try await rig.control("SetPowered", [.bool(true)])
        _ = try await rig.events.wait(since: since, timeout: .seconds(10), connection(CentralRig.serial, .connected))
        try await expectNotificationsResume(rig)
    }

    /// The bus's dbus-daemon stops and starts again at the same address (with bluetoothd, which
    /// cannot outlive it): the central connects to the bus again and restores the connection and
    /// its notifications.
    @Test func aBusThatGoesAwayAndComesBackIsConnectedAgainAndEverythingRestored() async throws {
        let first = try PrivateBus()
        let directory = first.directory
        let address = first.address
        var server = try Connection(address: address)
        var simulator = Simulator(connection: server, configuration: .builtIn)
        try await simulator.start()
        let central = BlueZCentral(reconnectPolicy: CentralRig.quick) { () throws(BusError) in try Connection(address: address) }
        let events = EventLog()
        central.setEventHandler { events.append($0) }
        await central.start()
        defer { central.close() }
        _ = try await central.startScan(ScanOptions())
        _ = try await events.wait(what: "the serial module") { if case .advertisement(let p) = $0 { p.id == CentralRig.serial } else { false } }
        _ = try await central.stopScan()
        _ = try await central.connect(CentralRig.serial, timeout: .seconds(10), autoReconnect: true)
        let handle = try await central.characteristic(CentralRig.serial, serialCharacteristic).handle
        #expect(try await central.setNotifyValue(true, CentralRig.serial, characteristic: handle))

        let since = events.recorded
        simulator.stop()
        server.close()
        first.stop()
        _ = try await events.wait(since: since, what: "the bus reported missing") {
            if case .state(let s) = $0 { s.state == .unsupported && s.reason?.contains("D-Bus system bus") == true } else { false }
        }
        _ = try await events.wait(since: since, what: "disconnected", connection(CentralRig.serial, .disconnected))

        let second = try PrivateBus(directory: directory)
        defer { second.stop() }
        #expect(second.address == address)
        server = try Connection(address: address)
        defer { server.close() }
        simulator = Simulator(connection: server, configuration: .builtIn)
        defer { simulator.stop() }
        try await simulator.start()
        _ = try await events.wait(since: since, timeout: .seconds(20), what: "connected again", connection(CentralRig.serial, .connected))
        #expect(await central.status().state == .poweredOn)
        // Notifications flow again: the peripheral notifies until one is heard.
        let control = try Connection(address: address)
        defer { control.close() }
        var heard = false
        for n in 0..<200 where !heard {
            let mark = events.recorded
            _ = try await control.call(.methodCall(destination: "org.bluez", path: ObjectPath("/io/gattway/simulator")!,
                                                   interface: "io.gattway.Simulator1", member: "SetValue",
                                                   [.string(CentralRig.serial.description), .string("ffe1"), .bytes([0xC0, UInt8(n)]), .bool(true)]))
            heard = (try? await events.wait(since: mark, timeout: .milliseconds(50), what: "a notification", value([0xC0, UInt8(n)]))) != nil
        }
        #expect(heard, "no notification after the bus came back")
    }

    @Test func aScanOutlivesABluetoothdRestartAndDiscoveryEndingByItself() async throws {
        let rig = try await CentralRig.start()
        defer { rig.close() }
        _ = try await rig.central.startScan(ScanOptions())
        let adapter = ObjectPath("/org/bluez/hci0")!
        func discovering() -> Bool { rig.central.link.tree.properties(at: adapter, "org.bluez.Adapter1")?["Discovering"]?.bool == true }
        func eventually(_ what: String, _ condition: () -> Bool) async throws {
            let end = ContinuousClock.now + .seconds(10)
            while !condition() {
                guard ContinuousClock.now < end else { throw Timeout(what: what) }
                try await Task.sleep(for: .milliseconds(10))  // a bounded poll of the mirror
            }
        }
        try await eventually("discovering") { discovering() }
        try await rig.control("EndDiscovery", [])
        try await eventually("discovery restarted") { rig.central.discovery.restartCount >= 1 && discovering() }
        try await rig.control("Restart", [.uint32(200)])
        try await eventually("discovery restarted after bluetoothd came back") { rig.central.discovery.restartCount >= 2 && discovering() }
        #expect(await rig.central.scanStatus().scanning)
    }

    /// Only our adapter coming back hurries an attempt. bluetoothd may own others (in the
    /// realbluez lab, hci1 is the peripheral itself): one of them powered on says nothing about
    /// whether ours can reach the device.
    @Test func anotherAdapterPoweredOnDoesNotHurryAnAttempt() async throws {
        let rig = try await lostWithAnAttemptPending()
        defer { rig.close() }
        let other = ObjectPath("/org/bluez/hci9")!
        let adapter = { (powered: Bool) in Value.stringVariantDictionary([("Address", .string("00:1A:7D:DA:71:99")), ("Powered", .bool(powered))]) }
        try rig.server.send(.signal(path: .root, interface: "org.freedesktop.DBus.ObjectManager", member: "InterfacesAdded",
                                    [.objectPath(other), .dictionary(key: Signature("s")!, value: Signature("a{sv}")!, [.init(.string(BlueZ.adapterInterface), adapter(false))])]))
        try rig.server.send(.signal(path: other, interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged",
                                    [.string(BlueZ.adapterInterface), adapter(true), .strings([])]))
        let end = ContinuousClock.now + .seconds(5)
        while try await rig.central.adapters().first(where: { $0.id == "hci9" })?.powered != true, ContinuousClock.now < end {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(try await rig.central.adapters().map(\.id) == ["hci0", "hci9"])
        #expect(rig.events.count(reconnecting(CentralRig.serial)) == 1, "only the attempt 30 s after the loss")
        #expect(try await rig.central.peripheral(CentralRig.serial).reconnect?.attempt == 1)
    }

    /// Out of range, the device is listened for and not connected to (no Connect waits in the
    /// kernel for a device that is not there); once it advertises again it is connected.
    @Test func aDeviceOutOfRangeIsConnectedOnlyOnceHeardAgain() async throws {
        let rig = try await CentralRig.connected([CentralRig.serial], autoReconnect: true)
        defer { rig.close() }
        try await subscribe(rig)
        let path = "/org/bluez/hci0/dev_" + CentralRig.serial.description.split(separator: ":").joined(separator: "_")
        func connects() async throws -> UInt32 {
            guard case .uint32(let n)? = try await rig.control("CallCount", [.string("Connect"), .string(path)]).first else { return 0 }
            return n
        }
        let before = try await connects()
        let since = rig.events.recorded
        try await rig.control("SetFault", [.string(CentralRig.serial.description), .string(#"{"outOfRange": true}"#)])
        _ = try await rig.events.wait(since: since, reconnecting(CentralRig.serial))
        let end = ContinuousClock.now + .seconds(5)
        while try await rig.central.peripheral(CentralRig.serial).reconnect?.listening != true {
            guard ContinuousClock.now < end else { throw Timeout(what: "the attempt waiting to hear the device") }
            try await Task.sleep(for: .milliseconds(10))  // a bounded poll of the device list
        }
        // Absence has no event: many of the quick policy's attempts would have come by now.
        try await Task.sleep(for: .milliseconds(1200))
        #expect(try await connects() == before, "no Connect while the device is not heard")
        #expect(try await rig.central.peripheral(CentralRig.serial).reconnect?.listening == true)
        try await rig.control("ClearFaults", [.string(CentralRig.serial.description)])
        _ = try await rig.events.wait(since: since, timeout: .seconds(10), connection(CentralRig.serial, .connected))
        #expect(try await connects() == before + 1, "one Connect, once heard")
        try await expectNotificationsResume(rig)
    }

    @Test func backoffGrowsAndStaysBounded() {
        let policy = ReconnectPolicy.standard
        #expect(policy.delay(attempt: 1) { $0.lowerBound } == 1)
        #expect(policy.delay(attempt: 1) { $0.upperBound } == 5)
        #expect(policy.delay(attempt: 2) { _ in 1 } == 10)
        #expect(policy.delay(attempt: 3) { _ in 1 } == 20)
        #expect(policy.delay(attempt: 4) { _ in 1 } == 40)
        #expect(policy.delay(attempt: 5) { _ in 1 } == 60)
        #expect(policy.delay(attempt: 50) { $0.upperBound } == 60)
        #expect(policy.delay(attempt: 3) { $0.lowerBound } == 16)
    }
}
