import BLE
import DBus
import Testing
@testable import Simulator

@Suite(.serialized) struct FaultTests {
    @Test func aConnectErrorForTheNextAttemptOnly() async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        try await sim.discover([Sim.hr])
        try await sim.setFault(Sim.hr, #"{"connectError": {"message": "le-connection-abort-by-remote", "count": 1}}"#)
        let hr = Sim.devicePath(Sim.hr)
        let mark = sim.mark
        await expectError("org.bluez.Error.Failed", "le-connection-abort-by-remote") { try await sim.connect(Sim.hr) }
        #expect(sim.signals(after: mark) { $0.changes(hr, Interface.device, "Connected") }.isEmpty)
        try await sim.connect(Sim.hr)
        #expect(try await sim.property(hr, Interface.device, "Connected") == .bool(true))
    }

    @Test("abort-by-local shows the link coming and going before the error, which bleak waits for")
    func abortByLocal() async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        try await sim.discover([Sim.hr])
        try await sim.setFault(Sim.hr, #"{"connectError": {"message": "le-connection-abort-by-local"}}"#)
        let hr = Sim.devicePath(Sim.hr)
        let mark = sim.mark
        await expectError("org.bluez.Error.Failed", "le-connection-abort-by-local") { try await sim.connect(Sim.hr) }
        let connected = sim.signals(after: mark) { $0.changes(hr, Interface.device, "Connected") }
        #expect(connected.map { $0.body[1].stringDictionary?["Connected"]?.unwrapped } == [.bool(true), .bool(false)])
        // Every attempt fails while the fault stays.
        await expectError("org.bluez.Error.Failed", "le-connection-abort-by-local") { try await sim.connect(Sim.hr) }
        _ = try await sim.control("ClearFaults", [.string("")])
        try await sim.connect(Sim.hr)
    }

    @Test func dropLinkFailsPendingRequestsThenDisconnects() async throws {
        let sim = try await Sim.connected([Sim.hr])
        defer { sim.close() }
        let hr = Sim.devicePath(Sim.hr)
        let battery = try await sim.characteristic(Sim.hr, "2A19")
        try await sim.setFault(Sim.hr, #"{"responseDelayMs": 5000}"#)
        let read = Task { try await sim.read(battery) }
        try await Task.sleep(for: .milliseconds(100))
        let mark = sim.mark
        _ = try await sim.control("DropLink", [.string(Sim.hr)])
        await expectError("org.bluez.Error.Failed", "Operation failed") { _ = try await read.value }
        try await sim.signal(after: mark) { $0.changes(hr, Interface.device, "ServicesResolved", .bool(false)) }
        try await sim.signal(after: mark) { $0.changes(hr, Interface.device, "Connected", .bool(false)) }
        await expectError("io.gattway.Simulator1.Error.NotConnected") { _ = try await sim.control("DropLink", [.string(Sim.hr)]) }
    }

    @Test func slowResponsesAndReadsInProgress() async throws {
        let sim = try await Sim.connected([Sim.hr])
        defer { sim.close() }
        let manufacturer = try await sim.characteristic(Sim.hr, "2A29")
        try await sim.setFault(Sim.hr, #"{"responseDelayMs": 300}"#)
        let start = ContinuousClock.now
        async let first = sim.read(manufacturer)
        async let same = sim.read(manufacturer)
        try await Task.sleep(for: .milliseconds(100))
        // Another offset while a read runs: InProgress; the same offset shares the answer.
        await expectError("org.bluez.Error.InProgress", "In Progress") { _ = try await sim.read(manufacturer, offset: 2) }
        #expect(try await first == Array("gattway simulator".utf8))
        #expect(try await same == Array("gattway simulator".utf8))
        #expect(ContinuousClock.now - start >= .milliseconds(290))
    }

    @Test("suppressConnectedSignal: no Connected=true signal, yet Get says true")
    func suppressedConnectedSignal() async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        try await sim.discover([Sim.hr])
        try await sim.setFault(Sim.hr, #"{"suppressConnectedSignal": true}"#)
        let hr = Sim.devicePath(Sim.hr)
        let mark = sim.mark
        try await sim.connect(Sim.hr)
        try await sim.signal(after: mark) { $0.changes(hr, Interface.device, "ServicesResolved", .bool(true)) }
        #expect(sim.signals(after: mark) { $0.changes(hr, Interface.device, "Connected") }.isEmpty)
        #expect(try await sim.property(hr, Interface.device, "Connected") == .bool(true))
    }

    @Test("servicesResolvedEarly: ServicesResolved=true before the GATT objects (bluez#1489)")
    func servicesResolvedEarly() async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        try await sim.discover([Sim.hr])
        try await sim.setFault(Sim.hr, #"{"servicesResolvedEarly": true}"#)
        let hr = Sim.devicePath(Sim.hr)
        let mark = sim.mark
        try await sim.connect(Sim.hr)
        try await sim.signal(after: mark) { $0.adds(hr + "/service0020/char0027") }
        let all = sim.signals(after: mark) { _ in true }
        let resolved = try #require(all.firstIndex { $0.changes(hr, Interface.device, "ServicesResolved", .bool(true)) })
        let added = try #require(all.firstIndex { $0.member == "InterfacesAdded" })
        #expect(resolved < added)
    }

    @Test func outOfRangeStopsAdvertisingAndDropsTheLink() async throws {
        var configuration = SimulatorConfiguration.builtIn
        configuration.adapter.connectTimeoutMs = 300
        let sim = try await Sim.start(configuration)
        defer { sim.close() }
        try await sim.discover([Sim.hr])
        try await sim.connect(Sim.hr)
        let hr = Sim.devicePath(Sim.hr)
        let mark = sim.mark
        try await sim.setFault(Sim.hr, #"{"outOfRange": true}"#)
        try await sim.signal(after: mark) { $0.changes(hr, Interface.device, "Connected", .bool(false)) }
        await expectError("org.bluez.Error.Failed", "le-connection-abort-by-local") { try await sim.connect(Sim.hr) }
        let scan = sim.mark
        try await sim.call(Sim.adapter, Interface.adapter, "StartDiscovery")
        try await Task.sleep(for: .milliseconds(1200))
        #expect(sim.signals(after: scan) { $0.changes(hr, Interface.device, "RSSI") }.isEmpty)
    }

    @Test func dropLinkAfterAFixedTime() async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        try await sim.discover([Sim.hr])
        try await sim.setFault(Sim.hr, #"{"dropLinkAfterMs": 200}"#)
        let mark = sim.mark
        try await sim.connect(Sim.hr)
        try await sim.signal(after: mark) { $0.changes(Sim.devicePath(Sim.hr), Interface.device, "Connected", .bool(false)) }
    }

    @Test func aFaultOnTheCCCDFailsStartNotify() async throws {
        let sim = try await Sim.connected([Sim.hr])
        defer { sim.close() }
        try await sim.setFault(Sim.hr, #"{"attErrors": [{"uuid": "2902", "operation": "write", "code": "0x0d"}]}"#)
        let battery = try await sim.characteristic(Sim.hr, "2A19")
        await expectError("org.bluez.Error.InvalidArguments", "Invalid Length") {
            try await sim.call(battery, Interface.characteristic, "StartNotify")
        }
        // No session was kept.
        await expectError("org.bluez.Error.Failed", "No notify session started") {
            try await sim.call(battery, Interface.characteristic, "StopNotify")
        }
    }

    @Test func controlInterfaceRefusesBadInput() async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        await expectError("io.gattway.Simulator1.Error.UnknownDevice") { try await sim.setFault("00:00:00:00:00:00", "{}") }
        await expectError("io.gattway.Simulator1.Error.UnknownDevice") { try await sim.setFault("nonsense", "{}") }
        await expectError("io.gattway.Simulator1.Error.InvalidArguments", "fault: connectDelay: unknown key (known keys: connectError, connectDelayMs, responseDelayMs, suppressConnectedSignal, servicesResolvedEarly, outOfRange, staleLink, dropLinkAfterMs, lateServices, forgetGATT, attErrors, servicesResolvedAfterPairingMs, dropLinkAfterPairing, keptSessionsLost)") {
            try await sim.setFault(Sim.hr, #"{"connectDelay": 5}"#)
        }
        await expectError("io.gattway.Simulator1.Error.InvalidArguments") { try await sim.setFault(Sim.hr, "{") }
    }

    @Test func setValueNotifiesSubscribers() async throws {
        let sim = try await Sim.connected([Sim.hr])
        defer { sim.close() }
        let battery = try await sim.characteristic(Sim.hr, "2A19")
        try await sim.call(battery, Interface.characteristic, "StartNotify")
        let mark = sim.mark
        _ = try await sim.control("SetValue", [.string(Sim.hr), .string("2a19"), .bytes([42]), .bool(true)])
        try await sim.signal(after: mark) { $0.changes(battery, Interface.characteristic, "Value", .bytes([42])) }
        #expect(try await sim.read(battery) == [42])
    }

    /// `Restart`: bluetoothd leaves the bus (org.bluez released, no signals), then comes back
    /// with the adapter and without the unpaired devices or their sessions.
    @Test func restartReleasesTheNameAndComesBackWithoutSessions() async throws {
        let sim = try await Sim.connected([Sim.hr])
        defer { sim.close() }
        let measurement = try await sim.characteristic(Sim.hr, "2A37")
        try await sim.call(measurement, Interface.characteristic, "StartNotify")
        let (owners, changed) = AsyncStream.makeStream(of: String.self)
        try await sim.client.subscribe(MatchRule(sender: "org.freedesktop.DBus", interface: "org.freedesktop.DBus",
                                                 member: "NameOwnerChanged", arg0: "org.bluez")) { signal in
            changed.yield(signal.body.count > 2 ? signal.body[2].string ?? "" : "")
        }
        let mark = sim.mark
        _ = try await sim.control("Restart", [.uint32(200)])
        var next = owners.makeAsyncIterator()
        #expect(await next.next() == "")  // gone
        let back = await next.next()
        #expect(back == sim.server.uniqueName)
        // As bluetoothd does, the adapter is announced once the name is taken.
        try await sim.signal(after: mark) { $0.adds(Sim.adapter) }
        let objects = try await sim.managedObjects()
        #expect(objects[ObjectPath(Sim.adapter)!]?[Interface.adapter] != nil)
        #expect(objects[ObjectPath(Sim.devicePath(Sim.hr))!] == nil, "an unpaired device is forgotten")
        // Found again by discovery; its notify session did not survive.
        try await sim.discover([Sim.hr])
        try await sim.connect(Sim.hr)
        #expect(try await sim.property(measurement, Interface.characteristic, "Notifying") == .bool(false))
    }

    @Test func poweringOffEndsLinksAndOnRestores() async throws {
        let sim = try await Sim.connected([Sim.hr])
        defer { sim.close() }
        let mark = sim.mark
        _ = try await sim.control("SetPowered", [.bool(false)])
        try await sim.signal(after: mark) { $0.changes(Sim.devicePath(Sim.hr), Interface.device, "Connected", .bool(false)) }
        try await sim.signal(after: mark) { $0.changes(Sim.adapter, Interface.adapter, "Powered", .bool(false)) }
        _ = try await sim.control("SetPowered", [.bool(true)])
        try await sim.signal(after: mark) { $0.changes(Sim.adapter, Interface.adapter, "Powered", .bool(true)) }
        try await sim.connect(Sim.hr)
    }

    @Test func discoveryCanEndByItself() async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        let mark = sim.mark
        try await sim.call(Sim.adapter, Interface.adapter, "StartDiscovery")
        try await sim.signal(after: mark) { $0.changes(Sim.adapter, Interface.adapter, "Discovering", .bool(true)) }
        _ = try await sim.control("EndDiscovery", [])
        try await sim.signal(after: mark) { $0.changes(Sim.adapter, Interface.adapter, "Discovering", .bool(false)) }
    }

    /// As bluetoothd 5.66 in the lab when its Pair connected: Connected, Paired, the reply, and
    /// ServicesResolved only after it.
    @Test("servicesResolvedAfterPairingMs, on a link the Pair makes: ServicesResolved only that long after the reply")
    func servicesResolvedAfterAPairThatConnects() async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        try await sim.discover([Sim.secure])
        try await sim.setFault(Sim.secure, #"{"servicesResolvedAfterPairingMs": 300}"#)
        let secure = Sim.devicePath(Sim.secure)
        let mark = sim.mark
        try await sim.call(secure, Interface.device, "Pair")  // Just Works: no agent asked
        let replied = ContinuousClock.now
        #expect(try await sim.property(secure, Interface.device, "Connected") == .bool(true))
        #expect(try await sim.property(secure, Interface.device, "Paired") == .bool(true))
        #expect(try await sim.property(secure, Interface.device, "ServicesResolved") == .bool(false))
        #expect(sim.signals(after: mark) { $0.changes(secure, Interface.device, "ServicesResolved") }.isEmpty)
        try await sim.signal(after: mark) { $0.changes(secure, Interface.device, "ServicesResolved", .bool(true)) }
        #expect(ContinuousClock.now - replied >= .milliseconds(250))
    }

    @Test("servicesResolvedAfterPairingMs, on a link with its services resolved: unresolved before the reply, resolved again later")
    func servicesResolvedAgainAfterAPairOnAConnectedLink() async throws {
        let sim = try await Sim.connected([Sim.secure])
        defer { sim.close() }
        try await sim.setFault(Sim.secure, #"{"servicesResolvedAfterPairingMs": 300}"#)
        let secure = Sim.devicePath(Sim.secure)
        let mark = sim.mark
        try await sim.call(secure, Interface.device, "Pair")
        #expect(sim.signals(after: mark) { $0.changes(secure, Interface.device, "ServicesResolved", .bool(false)) }.count == 1)
        #expect(try await sim.property(secure, Interface.device, "ServicesResolved") == .bool(false))
        try await sim.signal(after: mark) { $0.changes(secure, Interface.device, "ServicesResolved", .bool(true)) }
        #expect(try await sim.property(secure, Interface.device, "Connected") == .bool(true))
    }

    @Test func dropLinkAfterPairingEndsTheLinkRightAfterTheReply() async throws {
        let sim = try await Sim.connected([Sim.secure])
        defer { sim.close() }
        try await sim.setFault(Sim.secure, #"{"dropLinkAfterPairing": true}"#)
        let secure = Sim.devicePath(Sim.secure)
        let mark = sim.mark
        try await sim.call(secure, Interface.device, "Pair")
        #expect(try await sim.property(secure, Interface.device, "Paired") == .bool(true))
        try await sim.signal(after: mark) { $0.changes(secure, Interface.device, "Connected", .bool(false)) }
        #expect(try await sim.property(secure, Interface.device, "Connected") == .bool(false))
    }
}
