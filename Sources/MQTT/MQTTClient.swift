import CMosquitto
import Dispatch
import Glibc
import Synchronization
import Threading

/// A message the broker delivered, with the MQTT 5 request/response properties when it had them.
public struct Message: Sendable {
    public var topic: String
    public var payload: [UInt8]
    public var retain: Bool
    /// MQTT 5 Response Topic: where the sender wants the answer.
    public var responseTopic: String?
    /// MQTT 5 Correlation Data: to be sent back with the answer.
    public var correlationData: [UInt8]?
}

public struct MQTTError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}

/// One connection to a broker, over libmosquitto, on a thread of its own.
///
/// - Connecting: MQTT 5 first; a broker that refuses the protocol version gets 3.1.1 on the next
///   attempt. The thread makes an attempt and runs libmosquitto's loop while it lasts; after a
///   lost or refused connection, or an attempt that fails at once (a refused TCP connection, a
///   TLS handshake), the next attempt is made after `reconnectDelay` × 1, 4, 9, ... up to
///   `reconnectDelayMax`, each failure reported to `disconnected` with its reason and what
///   libmosquitto logged as an error meanwhile (OpenSSL's reason for a TLS failure: "certificate
///   verify failed"). libmosquitto's own reconnection is not used: it tells nothing of the
///   attempts that fail, and gives up after some (TLS, a refused CONNACK). Subscriptions are made again on
///   every connection (the session is clean), then `connected` runs: the place to publish what
///   retained state the broker should have again.
/// - While disconnected, `publish` queues at most `offlineLimit` messages; past it the oldest is
///   dropped and counted (`dropped`). The queue is sent, oldest first, before `connected` runs.
/// - The last will (`Configuration.will`) is what the broker publishes when the connection ends
///   without a DISCONNECT (the process was killed, the network went away).
/// Callbacks run on libmosquitto's thread: keep them short.
public final class MQTTClient: @unchecked Sendable {
    // @unchecked: `handle` is libmosquitto's client, which is thread-safe for publish, subscribe
    // and disconnect while the connection's thread runs its loop (`mosquitto_threaded_set`);
    // everything else is in `state` or a semaphore.

    public struct Will: Sendable {
        public var topic: String
        public var payload: [UInt8]
        public var retain: Bool
        public init(topic: String, payload: [UInt8], retain: Bool = true) {
            self.topic = topic
            self.payload = payload
            self.retain = retain
        }
    }

    public struct Configuration: Sendable {
        public var url: BrokerURL
        public var clientID: String
        public var keepAliveSeconds: Int32 = 30
        public var will: Will?
        /// TLS (`mqtts://`): the CA certificates to trust (PEM), and an optional client certificate and key.
        public var caFile: String?
        public var certificateFile: String?
        public var keyFile: String?
        public var reconnectDelay: UInt32 = 1
        public var reconnectDelayMax: UInt32 = 30
        public var offlineLimit = 1024

        public init(url: BrokerURL, clientID: String) {
            self.url = url
            self.clientID = clientID
        }
    }

    /// What the client reports, on libmosquitto's thread.
    public final class Handlers: Sendable {
        let connected: @Sendable (_ protocolVersion: Int) -> Void
        let disconnected: @Sendable (_ reason: String) -> Void
        let message: @Sendable (Message) -> Void

        public init(connected: @escaping @Sendable (Int) -> Void, disconnected: @escaping @Sendable (String) -> Void,
                    message: @escaping @Sendable (Message) -> Void) {
            self.connected = connected
            self.disconnected = disconnected
            self.message = message
        }
    }

    private struct Outgoing {
        var topic: String
        var payload: [UInt8]
        var qos: Int32
        var retain: Bool
        var responseTopic: String?
        var correlationData: [UInt8]?
    }

    private struct State {
        var handlers: Handlers?
        var connected = false
        var version = gw_mqtt_v5
        var subscriptions: [(filter: String, qos: Int32)] = []
        var offline: [Outgoing] = []
        var dropped = 0
        var started = false
        var stopped = false
        /// `stop`'s last message, and who waits for the broker's PUBACK of it.
        var finalMessage: Int32?
        var finalAcknowledged: DispatchSemaphore?
        var acknowledgedAfterStop: Set<Int32> = []
        /// Failed attempts and lost connections since the last connection was made.
        var restarts: UInt32 = 0
        /// libmosquitto's last error log line since the last attempt (OpenSSL's reasons come this way).
        var lastError: String?
        /// Why the connection ended (a refused CONNACK, a lost connection), for the thread to tell.
        var refusal: String?
        var lost: String?
    }

    public let configuration: Configuration
    private let mosquitto: gw_mosquitto
    private let handle: OpaquePointer
    private let state = Mutex(State())
    /// Signalled by `stop`: ends the connection thread's wait before its next attempt.
    private let stopping = DispatchSemaphore(value: 0)
    /// Signalled when the connection's thread ends.
    private let ended = DispatchSemaphore(value: 0)

    public init(_ configuration: Configuration) throws(MQTTError) {
        self.configuration = configuration
        let mosquitto = try libmosquitto.get()
        self.mosquitto = mosquitto
        guard let handle = mosquitto.new(configuration.clientID, true, nil) else {
            throw MQTTError("cannot make an MQTT client (out of memory, or an empty client id)")
        }
        self.handle = handle
        // Every stored property has its value: a throw from here on runs deinit, which destroys `handle`.
        func check(_ rc: Int32, _ what: String) throws(MQTTError) {
            guard rc == MOSQ_ERR_SUCCESS.rawValue else { throw MQTTError("\(what): \(mosquitto.text(rc))") }
        }
        _ = mosquitto.threaded_set(handle, true)
        mosquitto.user_data_set(handle, Unmanaged.passUnretained(self).toOpaque())
        _ = mosquitto.int_option(handle, MOSQ_OPT_PROTOCOL_VERSION, gw_mqtt_v5)
        let url = configuration.url
        if let user = url.user {
            try check(mosquitto.username_pw_set(handle, user, url.password), "user and password")
        }
        if url.tls {
            try check(mosquitto.tls_set(handle, configuration.caFile, configuration.caFile == nil ? "/etc/ssl/certs" : nil,
                                        configuration.certificateFile, configuration.keyFile, nil), "TLS")
        }
        if let will = configuration.will {
            try check(will.payload.withUnsafeBytes {
                mosquitto.will_set_v5(handle, will.topic, Int32($0.count), $0.baseAddress, 1, will.retain, nil)
            }, "last will")
        }
        mosquitto.connect_v5_callback_set(handle) { _, context, rc, _, _ in
            guard let context else { return }
            Unmanaged<MQTTClient>.fromOpaque(context).takeUnretainedValue().didConnect(rc)
        }
        mosquitto.disconnect_v5_callback_set(handle) { _, context, rc, _ in
            guard let context else { return }
            Unmanaged<MQTTClient>.fromOpaque(context).takeUnretainedValue().didDisconnect(rc)
        }
        mosquitto.publish_v5_callback_set(handle) { _, context, mid, _, _ in
            guard let context else { return }
            Unmanaged<MQTTClient>.fromOpaque(context).takeUnretainedValue().didPublish(mid)
        }
        mosquitto.message_v5_callback_set(handle) { _, context, message, properties in
            guard let context, let message else { return }
            Unmanaged<MQTTClient>.fromOpaque(context).takeUnretainedValue().didReceive(message.pointee, properties)
        }
        mosquitto.log_callback_set(handle) { _, context, level, text in
            guard let context, let text, level & Int32(MOSQ_LOG_ERR) != 0 else { return }
            let line = String(cString: text)
            Unmanaged<MQTTClient>.fromOpaque(context).takeUnretainedValue().state.withLock { $0.lastError = line }
        }
    }

    deinit { mosquitto.destroy(handle) }

    /// Starts the connection's thread and its first attempt; a broker that cannot be reached
    /// now is tried again with backoff.
    public func start(_ handlers: Handlers) {
        state.withLock { s in
            s.handlers = handlers
            s.started = true
        }
        Threads.start(name: "gattway-mqtt") { [self] in run() }
    }

    /// The connection's thread: an attempt, libmosquitto's loop while the connection lasts, the
    /// delay before the next; until `stop`.
    private func run() {
        defer { ended.signal() }
        while !isStopped {
            state.withLock { s in
                s.lastError = nil
                s.refusal = nil
                s.lost = nil
            }
            var rc = mosquitto.connect_async(handle, configuration.url.host, Int32(configuration.url.port), configuration.keepAliveSeconds)
            let why: String
            if rc == MOSQ_ERR_SUCCESS.rawValue {
                guard !isStopped else { return }
                // Returns when the connection ends (`didDisconnect` makes it), or at an error
                // before there was one (a TLS handshake that fails in the loop).
                rc = mosquitto.loop_forever(handle, 1000, 1)
                guard !isStopped else { return }
                why = state.withLock { $0.refusal ?? $0.lost } ?? "cannot connect: \(reason(rc))"
            } else {
                why = "cannot connect: \(reason(rc))"
            }
            let delay = state.withLock { s -> UInt32 in
                s.restarts = min(s.restarts + 1, 1000)  // (its square must not overflow in a broker's weeks away)
                return min(configuration.reconnectDelay * s.restarts * s.restarts, configuration.reconnectDelayMax)
            }
            handlers?.disconnected("\(why); trying again in \(delay) s")
            if stopping.wait(timeout: .now() + .seconds(Int(delay))) == .success { return }
        }
    }

    private var isStopped: Bool { state.withLock { $0.stopped } }

    /// libmosquitto's text for `rc`, with what it logged as an error since the attempt began.
    private func reason(_ rc: Int32) -> String {
        let text = mosquitto.text(rc)
        guard let logged = state.withLock({ s -> String? in defer { s.lastError = nil }; return s.lastError }) else {
            // TLS 1.3: the broker's refusal of the client's certificate (or its absence) comes after
            // the handshake, and libmosquitto may report only that the session broke.
            if configuration.url.tls && rc == MOSQ_ERR_PROTOCOL.rawValue {
                return text + " (the broker may have ended the TLS session: does it want a client certificate?)"
            }
            return text
        }
        return "\(text) (\(logged))"
    }

    /// Sends `final` (QoS 1) and waits at most `timeout` for the broker to acknowledge it, then
    /// a DISCONNECT (so the last will is not published: `final` is what replaces it) and stops
    /// the loop thread.
    public func stop(after final: (topic: String, payload: [UInt8], retain: Bool)? = nil, timeout: Duration = .seconds(2)) {
        let (connected, started) = state.withLock { s -> (Bool, Bool) in
            s.stopped = true
            return (s.connected, s.started)
        }
        if connected, let final {
            let acknowledged = DispatchSemaphore(value: 0)
            var mid: Int32 = 0
            _ = final.payload.withUnsafeBytes {
                mosquitto.publish_v5(handle, &mid, final.topic, Int32($0.count), $0.baseAddress, 1, final.retain, nil)
            }
            // The PUBACK may have come already (noted in `acknowledgedAfterStop`).
            let already = state.withLock { s -> Bool in
                s.finalMessage = mid
                s.finalAcknowledged = acknowledged
                return s.acknowledgedAfterStop.contains(mid)
            }
            if already { acknowledged.signal() }
            let (seconds, attoseconds) = timeout.components
            _ = acknowledged.wait(timeout: .now() + .nanoseconds(Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)))
        }
        _ = mosquitto.disconnect_v5(handle, 0, nil)  // ends the loop
        stopping.signal()  // ends a wait for the next attempt
        if started { _ = ended.wait(timeout: .now() + .seconds(5)) }
    }

    public var isConnected: Bool { state.withLock { $0.connected } }
    /// Messages dropped from the offline queue because it was full.
    public var dropped: Int { state.withLock { $0.dropped } }
    /// The protocol in use or to be tried next: 5 or 4 (3.1.1).
    public var protocolVersion: Int { Int(state.withLock { $0.version }) }

    /// Publishes now, or queues while disconnected. `responseTopic`/`correlationData` are
    /// MQTT 5 properties, left out under 3.1.1.
    public func publish(_ topic: String, _ payload: [UInt8], qos: Int = 0, retain: Bool = false,
                        responseTopic: String? = nil, correlationData: [UInt8]? = nil) {
        let message = Outgoing(topic: topic, payload: payload, qos: Int32(min(max(qos, 0), 2)), retain: retain,
                               responseTopic: responseTopic, correlationData: correlationData)
        let (now, version) = state.withLock { s -> (Bool, Int32) in
            guard !s.stopped else { return (false, s.version) }
            if s.connected { return (true, s.version) }
            queue(message, &s)
            return (false, s.version)
        }
        // The connection can end between the check and the call: then it waits like the others.
        if now && send(message, version: version) == MOSQ_ERR_NO_CONN.rawValue {
            state.withLock { queue(message, &$0) }
        }
    }

    private func queue(_ message: Outgoing, _ s: inout State) {
        s.offline.append(message)
        if s.offline.count > configuration.offlineLimit {
            s.offline.removeFirst()
            s.dropped += 1
        }
    }

    /// Subscribes now if connected, and again on every later connection.
    public func subscribe(_ filter: String, qos: Int = 1) {
        let connected = state.withLock { s -> Bool in
            s.subscriptions.append((filter, Int32(qos)))
            return s.connected
        }
        if connected { _ = mosquitto.subscribe_v5(handle, nil, filter, Int32(qos), 0, nil) }
    }

    // MARK: - On libmosquitto's thread

    private func send(_ message: Outgoing, version: Int32) -> Int32 {
        var properties: OpaquePointer?
        defer { if properties != nil { mosquitto.property_free_all(&properties) } }
        if version == gw_mqtt_v5 {
            if let topic = message.responseTopic {
                _ = mosquitto.property_add_string(&properties, Int32(MQTT_PROP_RESPONSE_TOPIC.rawValue), topic)
            }
            if let data = message.correlationData {
                _ = data.withUnsafeBytes {
                    mosquitto.property_add_binary(&properties, Int32(MQTT_PROP_CORRELATION_DATA.rawValue), $0.baseAddress,
                                                  UInt16(clamping: $0.count))
                }
            }
        }
        return message.payload.withUnsafeBytes {
            mosquitto.publish_v5(handle, nil, message.topic, Int32($0.count), $0.baseAddress, message.qos, message.retain, properties)
        }
    }

    private func didConnect(_ rc: Int32) {
        guard rc == 0 else {
            // 132 (MQTT 5: unsupported protocol version) or 1 (3.1.1's): a broker without MQTT 5.
            let fellBack = state.withLock { s -> Bool in
                guard s.version == gw_mqtt_v5, rc == Int32(MQTT_RC_UNSUPPORTED_PROTOCOL_VERSION.rawValue) || rc == 1 else { return false }
                s.version = gw_mqtt_v311
                return true
            }
            if fellBack { _ = mosquitto.int_option(handle, MOSQ_OPT_PROTOCOL_VERSION, gw_mqtt_v311) }
            let reason = mosquitto.reason_string(rc).map { String(cString: $0) } ?? "reason code \(rc)"
            state.withLock { $0.refusal = "refused by the broker: \(reason)" + (fellBack ? "; MQTT 3.1.1 next" : "") }
            return
        }
        let (subscriptions, queued, version, handlers) = state.withLock { s in
            s.connected = true
            s.restarts = 0
            defer { s.offline = [] }
            return (s.subscriptions, s.offline, s.version, s.handlers)
        }
        for subscription in subscriptions {
            _ = mosquitto.subscribe_v5(handle, nil, subscription.filter, subscription.qos, 0, nil)
        }
        for message in queued { _ = send(message, version: version) }
        handlers?.connected(Int(version))
    }

    private func didPublish(_ mid: Int32) {
        state.withLock { s -> DispatchSemaphore? in
            guard s.stopped else { return nil }
            s.acknowledgedAfterStop.insert(mid)
            return s.finalMessage == mid ? s.finalAcknowledged : nil
        }?.signal()
    }

    private func didDisconnect(_ rc: Int32) {
        let stopped = state.withLock { s in
            s.connected = false
            return s.stopped
        }
        guard !stopped else { return }
        let lost = rc == 0 ? "disconnected by the broker" : "connection lost: \(reason(rc))"
        state.withLock { s in if s.refusal == nil { s.lost = lost } }
        // libmosquitto's loop would try again by itself; disconnected, it returns to `run`.
        _ = mosquitto.disconnect_v5(handle, 0, nil)
    }

    private func didReceive(_ message: mosquitto_message, _ properties: OpaquePointer?) {
        var responseTopic: String?
        var correlationData: [UInt8]?
        if let properties {
            var text: UnsafeMutablePointer<CChar>?
            if mosquitto.property_read_string(properties, Int32(MQTT_PROP_RESPONSE_TOPIC.rawValue), &text, false) != nil, let text {
                responseTopic = String(cString: text)
                free(text)
            }
            var data: UnsafeMutableRawPointer?
            var length: UInt16 = 0
            if mosquitto.property_read_binary(properties, Int32(MQTT_PROP_CORRELATION_DATA.rawValue), &data, &length, false) != nil, let data {
                correlationData = Array(UnsafeRawBufferPointer(start: data, count: Int(length)))
                free(data)
            }
        }
        let payload = message.payload.map { Array(UnsafeRawBufferPointer(start: $0, count: Int(message.payloadlen))) } ?? []
        handlers?.message(Message(topic: String(cString: message.topic), payload: payload, retain: message.retain,
                                  responseTopic: responseTopic, correlationData: correlationData))
    }

    private var handlers: Handlers? { state.withLock { $0.handlers } }
}
