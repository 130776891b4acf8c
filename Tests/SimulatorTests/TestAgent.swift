import BLE
import DBus
import Synchronization
import Testing
@testable import Simulator

/// An org.bluez.Agent1 at /test/agent on a bus connection of its own, as a pairing client
/// exports it: it records every call bluetoothd makes and answers as `answer` says (nil: it
/// does not answer, and the test may answer later with `reply`).
final class TestAgent: Sendable {
    let connection: Connection
    let path = ObjectPath("/test/agent")!
    private let sim: Sim
    private let recorded = Mutex<[Message]>([])
    private let answer: @Sendable (Message) -> Message?

    init(_ sim: Sim, answer: @escaping @Sendable (Message) -> Message? = { $0.reply() }) throws {
        self.sim = sim
        self.answer = answer
        connection = try Connection(address: sim.bus.address)
        connection.setMethodCallHandler { [weak self] call in self?.received(call) }
    }

    deinit { connection.close() }

    private func received(_ call: Message) {
        recorded.withLock { $0.append(call) }
        if let reply = answer(call) { try? connection.send(reply) }
    }

    /// Registers with AgentManager1 (the first agent registered becomes the default one).
    func register(_ capability: String) async throws {
        try await sim.call("/org/bluez", Interface.agentManager, "RegisterAgent", [.objectPath(path), .string(capability)], from: connection)
    }

    func requestDefault() async throws {
        try await sim.call("/org/bluez", Interface.agentManager, "RequestDefaultAgent", [.objectPath(path)], from: connection)
    }

    /// Pair on a device, called from this agent's connection (so bluetoothd uses this agent).
    func pair(_ address: String) async throws {
        try await sim.call(Sim.devicePath(address), Interface.device, "Pair", from: connection, timeout: .seconds(20))
    }

    func reply(to call: Message, _ body: [Value] = []) throws { try connection.send(call.reply(body)) }

    /// The calls of `member` received so far.
    func calls(_ member: String) -> [Message] { recorded.withLock { $0.filter { $0.member == member } } }

    /// The first call of `member`, waiting up to `timeout` for it.
    @discardableResult
    func call(_ member: String, timeout: Duration = .seconds(5), _ sourceLocation: SourceLocation = #_sourceLocation) async throws -> Message {
        let deadline = ContinuousClock.now + timeout
        while true {
            if let found = calls(member).first { return found }
            guard ContinuousClock.now < deadline else {
                Issue.record("the agent got no \(member) within \(timeout)", sourceLocation: sourceLocation)
                throw BusError.timedOut(member)
            }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    /// Every method the agent was asked, in order.
    var members: [String] { recorded.withLock { $0.compactMap(\.member) } }
}

extension Message {
    /// An error answer as an agent gives it ("org.bluez.Error.Rejected").
    func agentError(_ name: String) -> Message { errorReply(BusError(name: name, message: "")) }
}
