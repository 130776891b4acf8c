import BLE
import DBus
import Testing
@testable import Simulator

/// Agents and Pair as bluetoothd 5.66 over Linux's Security Manager: the method from both IO
/// capabilities, the agent's calls, and the errors Pair ends with. Sim Lock (F0:00:00:00:00:0E)
/// is KeyboardDisplay with passkey 123456; its state needs an authenticated pairing.
@Suite(.serialized) struct PairingTests {
    static let lockState = "12345678-1234-5678-1234-56789abc0011"

    /// Sim Lock discovered (not connected): Pair connects first, as bluetoothd does.
    private func lock(_ configuration: SimulatorConfiguration = .builtIn) async throws -> Sim {
        let sim = try await Sim.start(configuration)
        try await sim.discover([Sim.lock])
        return sim
    }

    /// Sim Lock discovered, and an agent with `capability` registered (the default one).
    private func lockAndAgent(_ capability: String, _ configuration: SimulatorConfiguration = .builtIn,
                              answer: @escaping @Sendable (Message) -> Message? = { $0.reply() }) async throws -> (Sim, TestAgent) {
        let sim = try await lock(configuration)
        let agent = try TestAgent(sim, answer: answer)
        try await agent.register(capability)
        return (sim, agent)
    }

    private func pairedProperties(_ sim: Sim, _ address: String) async throws -> (paired: Bool, bonded: Bool) {
        let path = Sim.devicePath(address)
        return (try await sim.property(path, Interface.device, "Paired") == .bool(true),
                try await sim.property(path, Interface.device, "Bonded") == .bool(true))
    }

    // MARK: - Agents

    @Test func agentRegistrationIsCheckedAsBluetoothdDoes() async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        let agent = try TestAgent(sim)
        await expectError("org.bluez.Error.InvalidArguments", "Invalid arguments in method call") { try await agent.register("Telepathic") }
        await expectError("org.bluez.Error.DoesNotExist", "Does Not Exist") { try await agent.requestDefault() }
        try await agent.register("KeyboardOnly")
        await expectError("org.bluez.Error.AlreadyExists", "Already Exists") { try await agent.register("DisplayOnly") }
        try await agent.requestDefault()
        // Another path than the one registered does not exist.
        await expectError("org.bluez.Error.DoesNotExist") {
            try await sim.call("/org/bluez", Interface.agentManager, "UnregisterAgent", [.objectPath(ObjectPath("/other")!)], from: agent.connection)
        }
        try await sim.call("/org/bluez", Interface.agentManager, "UnregisterAgent", [.objectPath(agent.path)], from: agent.connection)
        await expectError("org.bluez.Error.DoesNotExist") { try await agent.requestDefault() }
        try await agent.register("")  // registered again, as KeyboardDisplay
    }

    /// The caller's own agent first, else the default one: the first registered, or the last that
    /// asked to be; when its owner leaves the bus, the next one in line.
    @Test func theDefaultAgentServesCallersWithoutOne() async throws {
        let sim = try await lock()
        defer { sim.close() }
        let keyboard = try TestAgent(sim) { $0.member == "RequestPasskey" ? $0.reply([.uint32(123_456)]) : $0.reply() }
        try await keyboard.register("KeyboardOnly")
        let display = try TestAgent(sim)
        try await display.register("DisplayOnly")
        // sim.client registered no agent: the first agent registered is the default.
        try await sim.call(Sim.devicePath(Sim.lock), Interface.device, "Pair")
        #expect(keyboard.members == ["RequestPasskey"])
        #expect(display.members.isEmpty)

        try await forget(sim, Sim.lock)
        try await display.requestDefault()
        try await sim.call(Sim.devicePath(Sim.lock), Interface.device, "Pair")
        #expect(display.members == ["DisplayPasskey"])

        // The default agent's owner leaves the bus: the other one takes over.
        try await forget(sim, Sim.lock)
        display.connection.close()
        try await Task.sleep(for: .milliseconds(200))
        try await sim.call(Sim.devicePath(Sim.lock), Interface.device, "Pair")
        #expect(keyboard.members == ["RequestPasskey", "RequestPasskey"])

        // A caller with an agent of its own gets that one, default or not.
        try await forget(sim, Sim.lock)
        let own = try TestAgent(sim) { $0.member == "RequestConfirmation" ? $0.reply() : nil }
        try await own.register("DisplayYesNo")
        try await own.pair(Sim.lock)
        #expect(own.members == ["RequestConfirmation"])
        #expect(keyboard.members.count == 2)
    }

    /// RemoveDevice, then the device found again by discovery, unpaired.
    private func forget(_ sim: Sim, _ address: String) async throws {
        try await sim.call(Sim.adapter, Interface.adapter, "RemoveDevice", [.objectPath(ObjectPath(Sim.devicePath(address))!)])
        try await sim.discover([address])
    }

    // MARK: - Methods

    @Test("passkey entry, the central's user enters the passkey the lock displays")
    func passkeyEnteredRight() async throws {
        let (sim, agent) = try await lockAndAgent("KeyboardOnly") { $0.reply([.uint32(123_456)]) }
        defer { sim.close() }
        let device = Sim.devicePath(Sim.lock)
        let mark = sim.mark
        // From the client that records the signals (the agent serves it as the default one), so
        // that the signals before the reply are there when it comes.
        try await sim.call(device, Interface.device, "Pair")
        let request = try #require(agent.calls("RequestPasskey").first)
        #expect(request.body == [.objectPath(ObjectPath(device)!)])
        #expect(request.destination == agent.connection.uniqueName && request.path == agent.path)
        #expect(request.interface == "org.bluez.Agent1")
        // Paired and Bonded change before the reply.
        #expect(!sim.signals(after: mark) { $0.changes(device, Interface.device, "Paired", .bool(true)) }.isEmpty)
        #expect(try await pairedProperties(sim, Sim.lock) == (true, true))
        #expect(agent.calls("Cancel").isEmpty)
        // The pairing was authenticated: the lock's state can be read and written.
        let state = try await sim.characteristic(Sim.lock, Self.lockState)
        #expect(try await sim.read(state) == Array("locked".utf8))
        try await sim.write(state, Array("unlocked".utf8))
        #expect(try await sim.read(state) == Array("unlocked".utf8))
        await expectError("org.bluez.Error.AlreadyExists", "Already Exists") { try await agent.pair(Sim.lock) }
    }

    @Test("a wrong passkey: AuthenticationFailed, still unpaired, the state out of reach")
    func passkeyEnteredWrong() async throws {
        let (sim, agent) = try await lockAndAgent("KeyboardOnly") { $0.reply([.uint32(111_111)]) }
        defer { sim.close() }
        await expectError("org.bluez.Error.AuthenticationFailed", "Authentication Failed") { try await agent.pair(Sim.lock) }
        #expect(try await pairedProperties(sim, Sim.lock) == (false, false))
        #expect(try await sim.property(Sim.devicePath(Sim.lock), Interface.device, "Connected") == .bool(true))
        let state = try await sim.characteristic(Sim.lock, Self.lockState)
        await expectError("org.bluez.Error.Failed", "Operation failed with ATT error: 0x0e") { _ = try await sim.read(state) }
    }

    /// A random passkey: the test reads what the lock displays (`DisplayedPasskey`) and answers.
    @Test func theDisplayedPasskeyCanBeRead() async throws {
        let sim = try await lock()
        defer { sim.close() }
        await expectError("io.gattway.Simulator1.Error.NotPairing") { _ = try await sim.control("DisplayedPasskey", [.string(Sim.lock)]) }
        _ = try await sim.control("SetPairing", [.string(Sim.lock), .string(#"{"io": "DisplayOnly"}"#)])
        let agent = try TestAgent(sim) { _ in nil }
        try await agent.register("KeyboardDisplay")
        let pair = Task { try await agent.pair(Sim.lock) }
        let request = try await agent.call("RequestPasskey")
        let shown = try await sim.control("DisplayedPasskey", [.string(Sim.lock)]).first?.integer
        let passkey = try #require(shown.map(UInt32.init))
        try agent.reply(to: request, [.uint32(passkey)])
        try await pair.value
        #expect(try await pairedProperties(sim, Sim.lock) == (true, true))
        await expectError("io.gattway.Simulator1.Error.NotPairing") { _ = try await sim.control("DisplayedPasskey", [.string(Sim.lock)]) }
    }

    @Test("passkey entry, the lock's user types the passkey the agent displays (once, entered 0)")
    func passkeyDisplayed() async throws {
        let (sim, agent) = try await lockAndAgent("DisplayOnly")
        defer { sim.close() }
        let start = ContinuousClock.now
        try await agent.pair(Sim.lock)
        #expect(ContinuousClock.now - start >= .milliseconds(200))
        let display = try #require(agent.calls("DisplayPasskey").first)
        #expect(display.signature == "ouq")
        #expect(display.body.first == .objectPath(ObjectPath(Sim.devicePath(Sim.lock))!))
        #expect((display.body[1].integer ?? 1_000_000) <= 999_999)
        #expect(display.body[2] == .uint16(0))
        #expect(agent.members == ["DisplayPasskey"])
        let state = try await sim.characteristic(Sim.lock, Self.lockState)
        #expect(try await sim.read(state) == Array("locked".utf8))
    }

    @Test func theLocksUserTypesAWrongPasskey() async throws {
        let sim = try await lock()
        defer { sim.close() }
        _ = try await sim.control("SetPairing", [.string(Sim.lock), .string(#"{"io": "KeyboardOnly", "entersWrong": true}"#)])
        let agent = try TestAgent(sim)
        try await agent.register("KeyboardDisplay")
        await expectError("org.bluez.Error.AuthenticationFailed", "Authentication Failed") { try await agent.pair(Sim.lock) }
        #expect(agent.members == ["DisplayPasskey"])
        #expect(try await pairedProperties(sim, Sim.lock) == (false, false))
    }

    @Test func numericComparisonAccepted() async throws {
        let (sim, agent) = try await lockAndAgent("KeyboardDisplay")
        defer { sim.close() }
        try await agent.pair(Sim.lock)
        let request = try #require(agent.calls("RequestConfirmation").first)
        #expect(request.signature == "ou")
        #expect((request.body[1].integer ?? 1_000_000) <= 999_999)
        let state = try await sim.characteristic(Sim.lock, Self.lockState)
        #expect(try await sim.read(state) == Array("locked".utf8))
    }

    /// Whatever the agent answers but yes, bluetoothd answers the kernel no, and the kernel
    /// reports an authentication failure; no Cancel follows an answer.
    @Test("an agent's refusal fails Pair with AuthenticationFailed", arguments: ["org.bluez.Error.Rejected", "org.bluez.Error.Canceled"])
    func numericComparisonRefused(error: String) async throws {
        let (sim, agent) = try await lockAndAgent("DisplayYesNo") { $0.agentError(error) }
        defer { sim.close() }
        await expectError("org.bluez.Error.AuthenticationFailed", "Authentication Failed") { try await agent.pair(Sim.lock) }
        #expect(agent.members == ["RequestConfirmation"])
        #expect(try await pairedProperties(sim, Sim.lock) == (false, false))
    }

    @Test("Just Works: no agent call, paired but not authenticated")
    func justWorks() async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        try await sim.discover([Sim.secure, Sim.lock])
        let agent = try TestAgent(sim)
        try await agent.register("KeyboardDisplay")
        // Sim Secure is NoInputNoOutput: Just Works whatever the agent can do.
        try await agent.pair(Sim.secure)
        #expect(try await pairedProperties(sim, Sim.secure) == (true, true))
        // Sim Lock paired by a client whose agent is NoInputNoOutput: Just Works too, which its
        // state does not accept (ATT 0x0e, the link drops, as on real bluetoothd).
        let quiet = try TestAgent(sim)
        try await quiet.register("NoInputNoOutput")
        try await quiet.pair(Sim.lock)
        #expect(agent.members.isEmpty && quiet.members.isEmpty)
        #expect(try await pairedProperties(sim, Sim.lock) == (true, true))
        let state = try await sim.characteristic(Sim.lock, Self.lockState)
        let mark = sim.mark
        await expectError("org.bluez.Error.Failed", "Operation failed with ATT error: 0x0e") { _ = try await sim.read(state) }
        try await sim.signal(after: mark) { $0.changes(Sim.devicePath(Sim.lock), Interface.device, "Connected", .bool(false)) }
    }

    // MARK: - Ends

    /// No answer: the Security Manager's timeout drops the link; the agent gets Cancel().
    @Test func anAgentThatDoesNotAnswer() async throws {
        var configuration = SimulatorConfiguration.builtIn
        configuration.adapter.pairingTimeoutMs = 300
        let (sim, agent) = try await lockAndAgent("KeyboardOnly", configuration) { $0.member == "Cancel" ? $0.reply() : nil }
        defer { sim.close() }
        let device = Sim.devicePath(Sim.lock)
        let mark = sim.mark
        let start = ContinuousClock.now
        await expectError("org.bluez.Error.AuthenticationCanceled", "Authentication Canceled") { try await agent.pair(Sim.lock) }
        #expect(ContinuousClock.now - start >= .milliseconds(300))
        try await agent.call("Cancel")
        #expect(agent.members == ["RequestPasskey", "Cancel"])
        try await sim.signal(after: mark) { $0.changes(device, Interface.device, "Connected", .bool(false)) }
        #expect(try await pairedProperties(sim, Sim.lock) == (false, false))
    }

    @Test func cancelPairingDuringAnAgentRequest() async throws {
        let (sim, agent) = try await lockAndAgent("DisplayYesNo") { $0.member == "Cancel" ? $0.reply() : nil }
        defer { sim.close() }
        let device = Sim.devicePath(Sim.lock)
        let pair = Task { try await agent.pair(Sim.lock) }
        try await agent.call("RequestConfirmation")
        try await sim.call(device, Interface.device, "CancelPairing")
        await expectError("org.bluez.Error.AuthenticationCanceled", "Authentication Canceled") { try await pair.value }
        try await agent.call("Cancel")
        #expect(try await pairedProperties(sim, Sim.lock) == (false, false))
        // Nothing left to cancel.
        await expectError("org.bluez.Error.DoesNotExist", "Does Not Exist") { try await sim.call(device, Interface.device, "CancelPairing") }
        #expect(try await sim.property(device, Interface.device, "Connected") == .bool(true))
    }

    @Test func onePairAtATime() async throws {
        let (sim, agent) = try await lockAndAgent("DisplayYesNo") { $0.member == "Cancel" ? $0.reply() : nil }
        defer { sim.close() }
        let pair = Task { try await agent.pair(Sim.lock) }
        let request = try await agent.call("RequestConfirmation")
        await expectError("org.bluez.Error.InProgress", "In Progress") { try await sim.call(Sim.devicePath(Sim.lock), Interface.device, "Pair") }
        try agent.reply(to: request)
        try await pair.value
    }

    @Test func aLinkLostDuringPairingCancelsIt() async throws {
        let (sim, agent) = try await lockAndAgent("KeyboardOnly") { $0.member == "Cancel" ? $0.reply() : nil }
        defer { sim.close() }
        let pair = Task { try await agent.pair(Sim.lock) }
        try await agent.call("RequestPasskey")
        _ = try await sim.control("DropLink", [.string(Sim.lock)])
        await expectError("org.bluez.Error.AuthenticationCanceled", "Authentication Canceled") { try await pair.value }
        try await agent.call("Cancel")
    }

    /// With nothing to cancel, bluetoothd has the kernel forget the keys, which drops a paired
    /// device's link; Paired stays as bluetoothd saw it.
    @Test func cancelPairingWithNothingToCancelDropsAPairedLink() async throws {
        let sim = try await Sim.connected([Sim.hr])
        defer { sim.close() }
        let hr = Sim.devicePath(Sim.hr)
        try await sim.call(hr, Interface.device, "Pair")
        let mark = sim.mark
        await expectError("org.bluez.Error.DoesNotExist", "Does Not Exist") { try await sim.call(hr, Interface.device, "CancelPairing") }
        try await sim.signal(after: mark) { $0.changes(hr, Interface.device, "Connected", .bool(false)) }
        #expect(try await pairedProperties(sim, Sim.hr) == (true, true))
    }

    // MARK: - Bonds

    /// RemoveDevice of a bonded, connected device: the link goes down (the reply comes with it),
    /// then the object goes; found again, it is a stranger (not paired, not trusted).
    @Test func removeDeviceDropsTheBond() async throws {
        let sim = try await Sim.connected([Sim.hr])
        defer { sim.close() }
        let hr = Sim.devicePath(Sim.hr)
        try await sim.call(hr, Interface.device, "Pair")
        var mark = sim.mark
        try await sim.client.setProperty("org.bluez", ObjectPath(hr)!, Interface.device, "Trusted", .bool(true))
        try await sim.signal(after: mark) { $0.changes(hr, Interface.device, "Trusted", .bool(true)) }
        mark = sim.mark
        try await sim.call(Sim.adapter, Interface.adapter, "RemoveDevice", [.objectPath(ObjectPath(hr)!)])
        #expect(!sim.signals(after: mark) { $0.changes(hr, Interface.device, "ServicesResolved", .bool(false)) }.isEmpty)
        try await sim.signal(after: mark) { $0.removes(hr) }
        #expect(!sim.signals(after: mark) { $0.changes(hr, Interface.device, "Connected", .bool(false)) }.isEmpty)
        #expect(!sim.signals(after: mark) { $0.removes(hr + "/service0014") }.isEmpty)
        try await sim.discover([Sim.hr])
        #expect(try await pairedProperties(sim, Sim.hr) == (false, false))
        #expect(try await sim.property(hr, Interface.device, "Trusted") == .bool(false))
    }

    /// bluetoothd exits: its agents get Release() and are forgotten.
    @Test func aRestartReleasesTheAgents() async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        let agent = try TestAgent(sim)
        try await agent.register("KeyboardDisplay")
        let mark = sim.mark
        _ = try await sim.control("Restart", [.uint32(100)])
        try await agent.call("Release")
        try await sim.signal(after: mark) { $0.adds(Sim.adapter) }
        try await agent.register("KeyboardDisplay")
    }
}
