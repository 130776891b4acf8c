import BLE
import DBus

/// An agent as bluetoothd keeps it (src/agent.c): its owner's bus name, its object path and
/// the capability it registered with.
struct Agent: Sendable, Equatable {
    let owner: String
    let path: ObjectPath
    let capability: IOCapability
}

/// AgentManager1, Pair and CancelPairing as bluetoothd 5.66 serves them (src/agent.c,
/// src/device.c) over Linux's Security Manager (LE Secure Connections, smp.c): the method
/// follows from the agent's capability and the peripheral's, bluetoothd asks the agent, and
/// the kernel's answers decide the Pair reply. Whatever the agent answers other than yes, a
/// wrong passkey and a peripheral that types a wrong one all end in AuthenticationFailed (the
/// kernel reports every failed pairing as an authentication failure); an agent that does not
/// answer runs into the Security Manager's timeout, which drops the link (AuthenticationCanceled).
extension Engine {
    /// bluetoothd gives an agent request up after 60 s (REQUEST_TIMEOUT); for LE pairing the
    /// Security Manager's timeout (`pairingTimeoutMs`, 30 s) normally comes first.
    static let agentRequestTimeout = Duration.seconds(60)
    /// The Security Manager's exchanges before the user has anything to do (Just Works: all of them).
    static let smpExchangeMs = 20
    /// How long the peripheral's user takes to type the passkey the central displays.
    static let typingMs = 200

    // MARK: - Agents

    func agentManagerCall(_ call: Message, member: String, sender: String) {
        guard let path = call.body.first?.objectPath else { return fail(call, BlueZError.invalidArguments()) }
        switch member {
        case "RegisterAgent":
            guard agents[sender] == nil else { return fail(call, BlueZError.alreadyExists) }
            guard let capability = IOCapability(agentCapability: call.body[1].string ?? "") else {
                return fail(call, BlueZError.invalidArguments())
            }
            agents[sender] = Agent(owner: sender, path: path, capability: capability)
            // The first agent becomes the default one; later ones wait in line.
            defaultAgents.append(sender)
            log("agent \(path) of \(sender) registered (\(capability.rawValue))")
            reply(call)
        case "UnregisterAgent":
            guard agents[sender]?.path == path else { return fail(call, BlueZError.doesNotExist) }
            dropAgent(sender)
            reply(call)
        default:  // RequestDefaultAgent
            guard agents[sender]?.path == path else { return fail(call, BlueZError.doesNotExist) }
            defaultAgents.removeAll { $0 == sender }
            defaultAgents.insert(sender, at: 0)
            log("agent \(path) of \(sender) is the default")
            reply(call)
        }
    }

    /// An agent unregistered, or its owner left the bus: the next in line becomes the default.
    func dropAgent(_ owner: String) {
        agents[owner] = nil
        defaultAgents.removeAll { $0 == owner }
        log("agent of \(owner) gone")
    }

    /// bluetoothd exits: each agent gets Release() and is forgotten.
    func releaseAgents() {
        for owner in defaultAgents { if let agent = agents[owner] { tell(agent, "Release") } }
        agents = [:]
        defaultAgents = []
    }

    /// A call to an agent whose answer bluetoothd does not wait for (Cancel, Release, DisplayPasskey).
    func tell(_ agent: Agent, _ member: String, _ body: [Value] = []) {
        send(.methodCall(destination: agent.owner, path: agent.path, interface: Interface.agent, member: member, body))
    }

    // MARK: - Pair

    func pair(_ d: Int, call: Message, sender: String) {
        if devices[d].pairing != nil { return fail(call, BlueZError.inProgress) }
        devices[d].temporary = false
        devices[d].temporaryTimer = nil
        if devices[d].bonded { return fail(call, BlueZError.alreadyExists) }
        // bluetoothd takes the caller's agent, else the default one (agent_get).
        let agent = agents[sender] ?? defaultAgents.first.flatMap { agents[$0] }
        devices[d].pairing = DeviceState.Pairing(id: makeID(), call: call, sender: sender, agent: agent)
        switch devices[d].link {
        case .connected, .disconnecting: startPairing(d)
        case .connecting: break  // linkUp continues
        case .idle:
            guard adapters[devices[d].adapter].powered else {
                devices[d].pairing = nil
                return fail(call, BlueZError.failed("Input/output error"))
            }
            beginConnect(d)
        }
    }

    /// The link is up: the Security Manager exchanges its first PDUs, then the method's user step.
    func startPairing(_ d: Int) {
        guard let id = devices[d].pairing?.id else { return }
        tasks.after(milliseconds: Engine.smpExchangeMs) { await self.userStep(d, id: id) }
    }

    private func userStep(_ d: Int, id: Int) {
        guard let pairing = devices[d].pairing, pairing.id == id, devices[d].hasGATT else { return }
        let method = PairingMethod(central: pairing.agent?.capability ?? .noInputNoOutput, peripheral: peripherals[devices[d].peer].pairingConfig.io)
        guard let agent = pairing.agent, method != .justWorks else { return paired(d, authenticated: false) }
        let device = Value.objectPath(devices[d].path)
        switch method {
        case .justWorks:
            break
        case .centralEnters:
            let passkey = UInt32(peripherals[devices[d].peer].pairingConfig.passkey ?? Int.random(in: 0...999_999))
            devices[d].pairing?.displayedPasskey = passkey
            log("\(devices[d].address): displays passkey \(sixDigits(passkey))")
            ask(d, id: id, agent, "RequestPasskey", [device], .passkey(expected: passkey))
        case .peripheralEnters:
            // bluetoothd shows it once, entered 0 (the peripheral sends no keypress notifications).
            tell(agent, "DisplayPasskey", [device, .uint32(UInt32.random(in: 0...999_999)), .uint16(0)])
            tasks.after(milliseconds: Engine.typingMs) { await self.peripheralTyped(d, id: id) }
        case .numericComparison:
            ask(d, id: id, agent, "RequestConfirmation", [device, .uint32(UInt32.random(in: 0...999_999))], .confirmation)
        }
    }

    /// bluetoothd asks the agent and waits; the Security Manager waits `pairingTimeoutMs`.
    private func ask(_ d: Int, id: Int, _ agent: Agent, _ member: String, _ body: [Value], _ request: DeviceState.AgentRequest) {
        devices[d].pairing?.asking = request
        log("\(devices[d].address): \(member) to agent \(agent.path) of \(agent.owner)")
        let call = Message.methodCall(destination: agent.owner, path: agent.path, interface: Interface.agent, member: member, body)
        let connection = connection
        tasks.spawn {
            let answer: Result<Message, BusError>
            do throws(BusError) {
                answer = .success(try await connection.call(call, timeout: Engine.agentRequestTimeout))
            } catch {
                answer = .failure(error)
            }
            await self.agentAnswered(d, id: id, answer)
        }
        tasks.after(milliseconds: adapterConfig(d).pairingTimeoutMs) { await self.pairingTimedOut(d, id: id) }
    }

    private func agentAnswered(_ d: Int, id: Int, _ answer: Result<Message, BusError>) {
        guard let pairing = devices[d].pairing, pairing.id == id, let request = pairing.asking else { return }
        devices[d].pairing?.asking = nil
        switch answer {
        case .failure(let error):
            // bluetoothd answers the kernel no, and the kernel fails the pairing.
            log("\(devices[d].address): the agent answered \(error)")
            if error.name == "org.freedesktop.DBus.Error.NoReply", let agent = pairing.agent { tell(agent, "Cancel") }
            endPairing(d, BlueZError.authenticationFailed)
        case .success(let reply):
            if case .passkey(let expected) = request {
                guard reply.body.count == 1, case .uint32(let entered) = reply.body[0] else {
                    log("\(devices[d].address): the agent's passkey reply has the signature \"\(reply.signature)\", not \"u\"")
                    return endPairing(d, BlueZError.authenticationFailed)
                }
                guard entered == expected else {
                    log("\(devices[d].address): passkey \(sixDigits(entered)) entered, \(sixDigits(expected)) displayed")
                    return endPairing(d, BlueZError.authenticationFailed)
                }
            }
            paired(d, authenticated: true)
        }
    }

    private func peripheralTyped(_ d: Int, id: Int) {
        guard devices[d].pairing?.id == id, devices[d].hasGATT else { return }
        guard !peripherals[devices[d].peer].pairingConfig.entersWrong else {
            log("\(devices[d].address): its user types a wrong passkey")
            return endPairing(d, BlueZError.authenticationFailed)
        }
        paired(d, authenticated: true)
    }

    /// The agent did not answer in time: the Security Manager gives up and drops the link.
    private func pairingTimedOut(_ d: Int, id: Int) {
        guard let pairing = devices[d].pairing, pairing.id == id, pairing.asking != nil else { return }
        log("\(devices[d].address): no answer from the agent in \(adapterConfig(d).pairingTimeoutMs) ms: the pairing times out")
        linkDown(d)
    }

    private func paired(_ d: Int, authenticated: Bool) {
        guard let pairing = devices[d].pairing else { return }
        devices[d].pairing = nil
        bond(d, authenticated: authenticated)
        resolveAfterPairing(d)
        reply(pairing.call)
        if peripherals[devices[d].peer].faults.dropLinkAfterPairing, devices[d].link == .connected {
            log("\(devices[d].address): ends the link after the pairing")
            linkDown(d)
        }
    }

    /// The servicesResolvedAfterPairingMs fault: once the pairing ended on a link that is up,
    /// ServicesResolved is false (now, before the Pair reply) and true again that much later.
    private func resolveAfterPairing(_ d: Int) {
        guard let ms = peripherals[devices[d].peer].faults.servicesResolvedAfterPairingMs, devices[d].link == .connected else { return }
        if devices[d].servicesResolved {
            devices[d].servicesResolved = false
            propertiesChanged(.device(d), Interface.device, ["ServicesResolved"])
        }
        let epoch = devices[d].linkEpoch
        tasks.after(milliseconds: ms) { await self.resolvedAfterPairing(d, epoch: epoch) }
    }

    private func resolvedAfterPairing(_ d: Int, epoch: Int) {
        guard devices[d].linkEpoch == epoch, devices[d].link == .connected, !devices[d].servicesResolved else { return }
        resolveServices(d)
    }

    /// Pairing ends without success: an agent request still waiting gets Cancel() (agent_cancel),
    /// then the Pair caller gets `error`.
    func endPairing(_ d: Int, _ error: BusError) {
        guard let pairing = devices[d].pairing else { return }
        devices[d].pairing = nil
        if pairing.asking != nil, let agent = pairing.agent { tell(agent, "Cancel") }
        log("\(devices[d].address): pairing failed: \(error.name)")
        resolveAfterPairing(d)
        fail(pairing.call, error)
    }

    func cancelPairing(_ d: Int, call: Message) {
        guard devices[d].pairing != nil else {
            // Nothing to cancel: bluetoothd still has the kernel remove the device's keys, which
            // disconnects a paired device, and answers DoesNotExist (device.c, cancel_pairing).
            fail(call, BlueZError.doesNotExist)
            if devices[d].paired {
                devices[d].authenticated = false
                if devices[d].hasGATT {
                    log("\(devices[d].address): CancelPairing with no pairing: the kernel forgets its keys and drops the link")
                    linkDown(d)
                }
            }
            return
        }
        endPairing(d, BlueZError.authenticationCanceled)
        reply(call)
    }

    /// The Pair caller left the bus: bluetoothd cancels the agent's request and disconnects
    /// (create_bond_req_exit).
    func pairingCallerLeft(_ d: Int) {
        guard let pairing = devices[d].pairing else { return }
        devices[d].pairing = nil
        if pairing.asking != nil, let agent = pairing.agent { tell(agent, "Cancel") }
        log("\(devices[d].address): pairing canceled, \(pairing.sender) left the bus")
        if isConnecting(d) { cancelConnect(d) } else if devices[d].hasGATT { requestDisconnect(d, call: nil) }
    }

    /// Paired and Bonded become true (Pair, or the Just Works pairing an encrypted attribute
    /// starts by itself), with the key's strength.
    func bond(_ d: Int, authenticated: Bool = false) {
        guard !devices[d].paired || !devices[d].bonded else { return }
        devices[d].paired = true
        devices[d].bonded = true
        devices[d].authenticated = authenticated
        log("\(devices[d].address): paired (\(authenticated ? "authenticated" : "Just Works"))")
        propertiesChanged(.device(d), Interface.device, ["Paired", "Bonded"])
    }
}

/// A passkey as agents show it: six digits, zero-padded.
func sixDigits(_ passkey: UInt32) -> String {
    let digits = String(passkey)
    return String(repeating: "0", count: max(0, 6 - digits.count)) + digits
}
