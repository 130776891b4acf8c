import GatewayCore
import BLE

/// Commands on `<prefix>/<gateway-id>/command`, answered as the WebSocket answers its own:
///
/// ```
/// → {"op": "connect", "id": "1", "device": "F0:..", "timeout": 10, "autoReconnect": false}
/// ← {"op": "result", "id": "1", "device": "F0:..", "state": "connected"}
/// → {"op": "write", "id": "2", "device": "F0:..", "characteristic": "ffe1", "value": "hi", "format": "utf8"}
/// ← {"op": "result", "id": "2", "device": "F0:..", "characteristic": "0x0010", "written": 2}
/// → {"op": "read", "id": "3", "device": "F0:..", "characteristic": "2a19"}
/// → {"op": "subscribe", "id": "4", "device": "F0:..", "characteristic": "2a37"}  (→ notifications/<address>/<handle>)
/// → {"op": "unsubscribe", "id": "5", "subscription": "s1"}
/// → {"op": "disconnect", "id": "6", "device": "F0:.."}
/// ← {"op": "error", "id": "6", "error": {"domain": "CBErrorDomain", "code": 12, "name": "unknownDevice", "message": ...}}
/// ```
///
/// The answer goes to the MQTT 5 response topic with the request's correlation data; without one
/// (MQTT 3.1.1) to the command's `replyTo`, else to `command/reply`; `id` is sent back either way.
/// At most `commandLimit` commands run at once; more are answered `outOfSpace` at once.
/// Who may publish commands is the broker's to decide (its ACLs).
extension Bridge {
    static let commandLimit = 32

    struct Command: StrictDecodable {
        var op: String
        var id: String?
        var replyTo: String?
        var device: String?
        var characteristic: String?
        var value: String?
        var format: String?
        var withResponse: Bool?
        var offset: Int?
        var types: [String]?
        var subscription: String?
        var everyPacket: Bool?
        var timeout: Double?
        var autoReconnect: Bool?
        enum CodingKeys: String, CodingKey, CaseIterable {
            case op, id, replyTo, device, characteristic, value, format, withResponse, offset, types, subscription, everyPacket,
                 timeout, autoReconnect
        }
    }

    /// A message on a topic the bridge subscribed to (on the MQTT client's thread: it only starts the work).
    public func received(_ message: BrokerMessage) {
        guard message.topic == topics.command else { return }
        if runningCommands.wrappingAdd(1, ordering: .relaxed).newValue > Self.commandLimit {
            runningCommands.wrappingSubtract(1, ordering: .relaxed)
            let busy = BLEError(.outOfSpace, "\(Self.commandLimit) commands are running; send this one again when one has been answered")
            answer(message, replyTo: nil, CommandSession.reply(id: nil, error: busy))
            return
        }
        Task {
            defer { runningCommands.wrappingSubtract(1, ordering: .relaxed) }
            let (replyTo, reply) = await run(message.payload)
            answer(message, replyTo: replyTo, reply)
        }
    }

    private func answer(_ message: BrokerMessage, replyTo: String?, _ reply: [UInt8]) {
        let topic = message.responseTopic.flatMap { BridgeTopics.isPublishable($0) ? $0 : nil } ?? replyTo ?? topics.commandReply
        broker.publish(topic, reply, qos: 1, retain: false, responseTopic: nil, correlationData: message.correlationData)
    }

    /// The command's `replyTo` (when it names a usable topic) and the answer.
    func run(_ payload: [UInt8]) async -> (replyTo: String?, reply: [UInt8]) {
        var id: String?
        var replyTo: String?
        do {
            let command = try JSON.decode(Command.self, from: payload)
            id = command.id
            if let topic = command.replyTo {
                guard BridgeTopics.isPublishable(topic) else {
                    throw BLEError(.invalidParameters, "replyTo must be a topic without wildcards (+, #)")
                }
                replyTo = topic
            }
            return (replyTo, JSON.encodeCompact(try await run(command)))
        } catch let error as BLEError {
            return (replyTo, CommandSession.reply(id: id, error: error))
        } catch {
            return (replyTo, CommandSession.reply(id: id, error: BLEError(.unknown, "\(error)")))
        }
    }

    private func run(_ command: Command) async throws -> CommandSession.Reply {
        switch command.op {
        case "connect", "disconnect":
            guard let text = command.device else { throw BLEError(.invalidParameters, "\(command.op) needs a device") }
            let device = try Parse.address(text)
            let body = command.op == "connect"
                ? try await gateway.connect(device, timeout: command.timeout, autoReconnect: command.autoReconnect)
                : try await gateway.disconnect(device)
            return CommandSession.Reply(op: "result", id: command.id, device: body.id, state: body.state)
        case "subscribe", "unsubscribe", "read", "write":
            return try await session.run(CommandSession.Command(
                op: command.op, id: command.id, types: command.types, device: command.device, characteristic: command.characteristic,
                format: command.format, subscription: command.subscription, value: command.value,
                withResponse: command.withResponse, offset: command.offset, everyPacket: command.everyPacket))
        default:
            throw BLEError(.invalidParameters,
                           "unknown op \"\(command.op)\"; ops are connect, disconnect, read, write, subscribe, unsubscribe")
        }
    }
}
