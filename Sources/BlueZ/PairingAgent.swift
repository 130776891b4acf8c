import BLE
import DBus
import Synchronization
import Threading

/// Pairing: gattway's own BlueZ agent (`org.bluez.Agent1` at `/io/gattway/agent` on its bus
/// connection, registered with the capability `--pairing-io` names, and again whenever
/// bluetoothd comes back), `Pair` with a deadline, and the agent's questions handed to clients
/// (`CentralEvent.pairing`) and answered by them (`answer`) or up front (`pair(_:answer:)`).
///
/// One pairing per device at a time. A question nobody answers within `answerDeadline` is
/// declined (`Canceled`), so that bluetoothd ends the pairing and nothing is left half paired;
/// a `Pair` that outlives its own deadline is cancelled (`CancelPairing`). Only bluetoothd may
/// call the agent: calls from any other bus peer are refused.
final class PairingAgent: Sendable {
    static let path = ObjectPath(trusted: "/io/gattway/agent")
    static let interface = "org.bluez.Agent1"
    static let managerInterface = "org.bluez.AgentManager1"

    let capability: PairingIO
    /// Whether gattway asks to be the default agent (then it also answers for pairings other
    /// programs, or the devices themselves, start on this bluetoothd).
    let isDefault: Bool
    let answerDeadline: Duration
    private let link: BusLink
    private let events: HandlerSlot<CentralEvent>
    private let log: @Sendable (String) -> Void

    /// A question waiting for a client's answer, per device.
    private struct Question {
        let call: Message
        let request: PairingRequest
        let id: Int
    }
    private struct State {
        var questions: [BluetoothAddress: Question] = [:]
        /// Answers given with `pair`, used when bluetoothd asks.
        var upFront: [BluetoothAddress: PairingAnswer] = [:]
        /// Devices this side is pairing.
        var pairing: Set<BluetoothAddress> = []
        /// The bluetoothd (its unique bus name) the agent is registered with.
        var registeredWith: String?
        var nextQuestion = 0
    }
    private let state = Mutex(State())

    init(link: BusLink, events: HandlerSlot<CentralEvent>, capability: PairingIO, isDefault: Bool, answerDeadline: Duration,
         log: @escaping @Sendable (String) -> Void) {
        self.link = link
        self.events = events
        self.capability = capability
        self.isDefault = isDefault
        self.answerDeadline = answerDeadline
        self.log = log
    }

    private var tree: ObjectTree { link.tree }
    private var index: GATTIndex { link.index }

    // MARK: - Registration

    /// After BlueZ's objects were (re)loaded: registers with this bluetoothd unless done already.
    func register() async {
        guard let owner = tree.owner, state.withLock({ $0.registeredWith != owner }) else { return }
        do throws(BusError) {
            _ = try await link.call(.methodCall(destination: BlueZ.service, path: BlueZ.root, interface: Self.managerInterface,
                                                member: "RegisterAgent", [.objectPath(Self.path), .string(capability.rawValue)]),
                                    timeout: BusLink.callDeadline)
            if isDefault {
                _ = try await link.call(.methodCall(destination: BlueZ.service, path: BlueZ.root, interface: Self.managerInterface,
                                                    member: "RequestDefaultAgent", [.objectPath(Self.path)]),
                                        timeout: BusLink.callDeadline)
            }
            state.withLock { $0.registeredWith = owner }
            log("pairing: agent registered (\(capability.rawValue)\(isDefault ? ", the default agent" : ""))")
        } catch where error.name == "org.bluez.Error.AlreadyExists" {
            state.withLock { $0.registeredWith = owner }
        } catch {
            log("pairing: cannot register the agent: \(error); pairing works only where BlueZ needs no questions answered")
        }
    }

    // MARK: - Pairing

    /// Pairs (connecting first if needed, as BlueZ does), answering bluetoothd's question with
    /// `answer` when it fits, else asking clients; within `timeout`. Already paired: answers at once.
    func pair(_ id: BluetoothAddress, answer: PairingAnswer?, timeout: Duration) async throws(BLEError) {
        _ = try link.usableAdapter()
        let path = try index.devicePath(id)
        await link.engage(path)
        if tree.properties(at: path, BlueZ.deviceInterface)?["Paired"]?.bool == true { return }
        let started = state.withLock { s -> Bool in
            guard s.pairing.insert(id).inserted else { return false }
            s.upFront[id] = answer
            return true
        }
        guard started else {
            throw BLEError(.operationNotSupported, "\(id) is being paired already: answer its pairing request, or wait for it to end")
        }
        defer { state.withLock { s in s.pairing.remove(id); s.upFront[id] = nil } }
        declines.withLock { $0[id] = nil }
        log("\(id): pairing (\(capability.rawValue))")
        do throws(BusError) {
            _ = try await link.call(.methodCall(destination: BlueZ.service, path: path, interface: BlueZ.deviceInterface,
                                                member: "Pair"), timeout: timeout)
        } catch {
            let failure: BLEError
            if Connector.isTimeout(error) {
                // BlueZ goes on unless told: nothing may stay half paired.
                _ = try? await link.call(.methodCall(destination: BlueZ.service, path: path, interface: BlueZ.deviceInterface,
                                                     member: "CancelPairing"), timeout: BusLink.callDeadline)
                failure = BLEError(.encryptionTimedOut, "\(id) was not paired within \(Connector.seconds(timeout))", detail: error.description)
            } else if error.name == "org.bluez.Error.AlreadyExists" {
                // Bonded already, which the mirror may not know yet: read it, so the answer says so.
                await link.readIntoMirror(path, BlueZ.deviceInterface)
                return
            } else {
                failure = lastDecline(id) ?? ErrorMapping.map(error, context: .device)
            }
            dropQuestion(id)
            log("\(id): pairing failed: \(failure)")
            events(.pairing(id: id, state: .failed(failure)))
            throw failure
        }
        await link.readIntoMirror(path, BlueZ.deviceInterface)
        log("\(id): paired" + (tree.properties(at: path, BlueZ.deviceInterface)?["Bonded"]?.bool == true ? " and bonded" : ""))
        events(.pairing(id: id, state: .paired))
    }

    /// A client answers the question bluetoothd asked about `id`.
    func answer(_ id: BluetoothAddress, _ answer: PairingAnswer) throws(BLEError) {
        let question = state.withLock { s -> Question? in
            guard let q = s.questions[id], answer.answers(q.request) else { return nil }
            s.questions[id] = nil
            return q
        }
        guard let question else {
            if let waiting = request(id) {
                throw BLEError(.invalidParameters, "\(id)'s pairing asks for \(Self.wanted(waiting)), not this answer")
            }
            throw BLEError(.invalidParameters, "no pairing request of \(id) is waiting for an answer")
        }
        reply(question, with: answer)
    }

    /// The question bluetoothd asked about `id` that waits for an answer.
    func request(_ id: BluetoothAddress) -> PairingRequest? { state.withLock { $0.questions[id]?.request } }

    // MARK: - The agent's calls

    /// A method call on gattway's connection: true when it was the agent's.
    func handle(_ call: Message) -> Bool {
        guard call.path == Self.path else { return false }
        guard call.sender != nil, call.sender == tree.owner else {
            link.send(call.errorReply(BusError(name: "org.bluez.Error.Rejected", message: "only bluetoothd may use gattway's agent")))
            return true
        }
        guard call.interface == nil || call.interface == Self.interface else {
            link.send(call.errorReply(BusError(name: "org.freedesktop.DBus.Error.UnknownMethod", message: "no such interface")))
            return true
        }
        let member = call.member ?? ""
        switch member {
        case "Release":
            state.withLock { $0.registeredWith = nil }
            link.send(call.reply())
        case "Cancel":
            // bluetoothd gave up on the question (its own timeout, or the pairing ended).
            let cancelled = state.withLock { s -> [BluetoothAddress] in
                defer { s.questions.removeAll() }
                return Array(s.questions.keys)
            }
            for id in cancelled { log("\(id): pairing request cancelled by BlueZ") }
            link.send(call.reply())
        default:
            guard let request = Self.request(member, call.body) else {
                link.send(call.errorReply(BusError(name: "org.freedesktop.DBus.Error.UnknownMethod", message: "Agent1 has no \(member)")))
                return true
            }
            guard let id = device(call.body.first?.objectPath) else {
                // A device of another adapter (gattway is the default agent): not gattway's to answer.
                link.send(call.errorReply(BusError(name: "org.bluez.Error.Rejected", message: "not a device of gattway's adapter")))
                return true
            }
            ask(id, request, call)
        }
        return true
    }

    private func ask(_ id: BluetoothAddress, _ request: PairingRequest, _ call: Message) {
        events(.pairing(id: id, state: .request(request)))
        guard request.needsAnswer else {
            log("\(id): pairing: \(Self.describe(request))")
            link.send(call.reply())
            return
        }
        let (question, upFront, ours) = state.withLock { s -> (Question, PairingAnswer?, Bool) in
            s.nextQuestion += 1
            let q = Question(call: call, request: request, id: s.nextQuestion)
            let answer = s.upFront[id].flatMap { $0.answers(request) ? $0 : nil }
            if answer == nil { s.questions[id] = q }
            return (q, answer, s.pairing.contains(id))
        }
        if let upFront { return reply(question, with: upFront) }
        // Just Works that bluetoothd asks about while this side is pairing: this side asked for it.
        if request == .authorization && ours { return reply(question, with: .confirm(true)) }
        log("\(id): pairing asks \(Self.describe(request)); waiting up to \(Connector.seconds(answerDeadline)) for a client's answer")
        Task { [answerDeadline] in
            try? await Task.sleep(for: answerDeadline)
            self.unanswered(id, question.id)
        }
    }

    private func unanswered(_ id: BluetoothAddress, _ number: Int) {
        let question = state.withLock { s -> Question? in
            guard let q = s.questions[id], q.id == number else { return nil }
            s.questions[id] = nil
            return q
        }
        guard let question else { return }
        log("\(id): nobody answered the pairing request within \(Connector.seconds(answerDeadline)): declined")
        decline(question, BusError(name: "org.bluez.Error.Canceled",
                                   message: "nobody answered the pairing request within \(Connector.seconds(answerDeadline))"))
    }

    private func reply(_ question: Question, with answer: PairingAnswer) {
        switch (answer, question.request) {
        case (.passkey(let passkey), .passkey):
            link.send(question.call.reply([.uint32(passkey)]))
        case (.pinCode(let pin), .pinCode):
            link.send(question.call.reply([.string(pin)]))
        case (.confirm(true), _):
            link.send(question.call.reply())
        default:
            decline(question, BusError(name: "org.bluez.Error.Rejected", message: "the client said no"))
        }
    }

    /// Why this side declined, kept for the `Pair` that then fails.
    private let declines = Mutex<[BluetoothAddress: BLEError]>([:])

    private func decline(_ question: Question, _ error: BusError) {
        if let id = device(question.call.body.first?.objectPath) {
            let reason = error.name.hasSuffix("Canceled")
                ? BLEError(.operationCancelled, error.message, detail: error.description)
                : BLEError(att: .insufficientAuthentication, "pairing was rejected: \(error.message)", detail: error.description)
            declines.withLock { $0[id] = reason }
        }
        link.send(question.call.errorReply(error))
    }

    private func lastDecline(_ id: BluetoothAddress) -> BLEError? { declines.withLock { $0.removeValue(forKey: id) } }

    private func dropQuestion(_ id: BluetoothAddress) { _ = state.withLock { $0.questions.removeValue(forKey: id) } }

    /// The device an agent call is about, if it is one of gattway's adapter.
    private func device(_ path: ObjectPath?) -> BluetoothAddress? {
        guard let path, let adapter = path.parent, index.isInUse(adapter: adapter) else { return nil }
        return BlueZ.address(pathElement: path.lastElement)
    }

    static func request(_ member: String, _ body: [Value]) -> PairingRequest? {
        switch member {
        case "RequestPinCode": return .pinCode
        case "RequestPasskey": return .passkey
        case "RequestConfirmation": return body.count > 1 ? body[1].integer.flatMap { UInt32(exactly: $0) }.map { .confirmation($0) } : nil
        case "DisplayPasskey":
            guard body.count > 2, let passkey = body[1].integer.flatMap({ UInt32(exactly: $0) }), let entered = body[2].integer else { return nil }
            return .displayPasskey(passkey, entered: entered)
        case "DisplayPinCode": return body.count > 1 ? body[1].string.map { .displayPinCode($0) } : nil
        case "RequestAuthorization": return .authorization
        case "AuthorizeService": return body.count > 1 ? body[1].string.flatMap { BluetoothUUID($0) }.map { .service($0) } : nil
        default: return nil
        }
    }

    static func describe(_ request: PairingRequest) -> String {
        switch request {
        case .passkey: "for the passkey the device shows"
        case .pinCode: "for the device's PIN code"
        case .confirmation(let n): "to confirm the number \(PairingRequest.digits(n)) shows on the device too"
        case .displayPasskey(let n, _): "to show the passkey \(PairingRequest.digits(n)): type it on the device"
        case .displayPinCode(let pin): "to show the PIN code \(pin): type it on the device"
        case .authorization: "to allow the device to pair"
        case .service(let uuid): "to allow the device the service \(uuid)"
        }
    }

    private static func wanted(_ request: PairingRequest) -> String {
        switch request {
        case .passkey: "a passkey"
        case .pinCode: "a PIN code"
        case .confirmation, .authorization, .service: "a confirmation (yes or no)"
        case .displayPasskey, .displayPinCode: "nothing"
        }
    }
}
