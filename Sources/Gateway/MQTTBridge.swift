import BLE
import FoundationEssentials
import Sensors
import Synchronization

/// The gateway on an MQTT broker: what it hears, published under `BridgeTopics`, Home Assistant
/// discovery for its sensors, and commands answered as the WebSocket answers them.
///
/// It is one more client of the event hub (a `.sink` stream client): the hub hands it each event
/// on the fan-out thread, and it queues them for its own task, at most `inboxLimit`; past that
/// the oldest is dropped and counted (`droppedEvents`). That task turns events into messages:
/// - `sensor` events (changed values only) → `sensors/<address>`, retained, the shape of
///   `GET /v1/sensors/{id}` plus `gateway`; the first reading of a device (or one with a new
///   measurement) also announces its entities to Home Assistant;
/// - `advertisement` and `connection` events → `devices/<address>` (retained, `GET /v1/devices/{id}`),
///   at once when the connection state changes, else at most every `presenceInterval`;
/// - `state`, `connection` events → `events/<type>`; state also → `state` (retained, `GET /v1/state`);
/// - notifications of characteristics subscribed over MQTT → `notifications/<address>/<handle>`.
///
/// What is retained is also kept here (bounded, `retainedLimit` topics, the oldest forgotten
/// first), and sent again whenever the broker connection is made again (`brokerConnected`), so
/// a broker that restarted without persistence has it back.
public final class MQTTBridge: Sendable {
    public static let inboxLimit = 4096
    public static let retainedLimit = 16_384
    public static let presenceInterval = Duration.seconds(30)

    struct Item: Sendable {
        var event: HubEvent?
        var subscription: String
        var json: [UInt8]
    }

    private struct State {
        var retained = RetainedMessages()
        /// The measurements announced to Home Assistant, per device.
        var announced: [BluetoothAddress: Set<String>] = [:]
        /// When each device's presence was last published, and in which connection state.
        var presence: [BluetoothAddress: (at: ContinuousClock.Instant, state: String)] = [:]
        var task: Task<Void, Never>?
    }

    let gateway: Gateway
    let broker: any MessageBroker
    public let topics: BridgeTopics
    let log: @Sendable (String) -> Void
    let client: StreamClient
    /// MQTT commands run as a WebSocket's do, with this bridge's stream client for subscriptions.
    let session: WebSocketSession
    let runningCommands = Atomic<Int>(0)
    private let inbox: AsyncStream<Item>.Continuation
    private let items: AsyncStream<Item>
    private let state = Mutex(State())
    private let dropped: DropCount
    private final class DropCount: Sendable { let value = Atomic<Int>(0) }

    public init(gateway: Gateway, broker: any MessageBroker, topics: BridgeTopics, log: @escaping @Sendable (String) -> Void) {
        self.gateway = gateway
        self.broker = broker
        self.topics = topics
        self.log = log
        let (items, inbox) = AsyncStream<Item>.makeStream(bufferingPolicy: .bufferingNewest(Self.inboxLimit))
        self.items = items
        self.inbox = inbox
        let dropped = DropCount()
        self.dropped = dropped
        client = StreamClient(id: gateway.hub.newClientID(), transport: .sink(EventSink { event, subscription, json in
            if case .dropped = inbox.yield(Item(event: event, subscription: subscription, json: json)) {
                dropped.value.add(1, ordering: .relaxed)
            }
        }), counters: gateway.hub.counters)
        session = WebSocketSession(gateway: gateway, client: client)
    }

    /// Starts taking events and commands. The broker connection may come later: `brokerConnected`.
    public func start() {
        client.select(Selection(types: [EventTypes(.state), EventTypes(.advertisement), EventTypes(.connection), EventTypes(.sensor)]),
                      as: "")
        gateway.hub.add(client)
        broker.subscribe(topics.command, qos: 1)
        let task = Task {
            await self.publishState()
            for await item in self.items { await self.handle(item) }
        }
        state.withLock { $0.task = task }
    }

    /// Stops taking events; ends the holds of MQTT subscriptions.
    public func stop() async {
        inbox.finish()
        client.close()
        gateway.hub.remove(client)
        await state.withLock { $0.task }?.value
        await session.end()
    }

    /// The broker connection is (again) made: availability, then everything retained.
    public func brokerConnected() {
        broker.publish(topics.availability, BridgeTopics.online, qos: 1, retain: true)
        let own = HomeAssistantDiscovery.gatewayConfig(topics: topics, version: gateway.version)
        broker.publish(own.topic, JSON.encodeCompact(own.config), qos: 1, retain: true)
        for (topic, payload) in state.withLock({ $0.retained.inOrder }) {
            broker.publish(topic, payload, qos: 1, retain: true)
        }
    }

    /// Events the inbox had no room for.
    public var droppedEvents: Int { dropped.value.load(ordering: .relaxed) }
    /// Topics whose retained message is kept for a reconnection.
    public var retainedCount: Int { state.withLock { $0.retained.count } }

    // MARK: - Events

    private func handle(_ item: Item) async {
        guard let event = item.event else { return }  // a `dropped` notice: counted by the hub
        guard item.subscription.isEmpty else {
            // A subscription made by an MQTT command.
            if case .central(.value(let value)) = event.event {
                broker.publish(topics.notification(value.device, handle: value.characteristicHandle), item.json)
            } else {
                broker.publish(topics.event(event.type), item.json)
            }
            return
        }
        switch event.event {
        case .sensor(let update):
            await publish(update)
        case .central(.advertisement(let info)):
            publishPresence(info, connectionChanged: false)
        case .central(.connection(let id, let connection, _)):
            broker.publish(topics.event(.connection), item.json)
            // The event's state: the device's own may not say it yet.
            if var info = try? await gateway.central.peripheral(id) {
                info.state = connection
                publishPresence(info, connectionChanged: true)
            }
        case .central(.reconnecting):
            broker.publish(topics.event(.connection), item.json)
        case .central(.state):
            broker.publish(topics.event(.state), item.json)
            await publishState()
        case .central(.value), .central(.advertisementChanged):
            break  // not selected by the bridge's own subscription
        }
    }

    private func publishState() async {
        retain(topics.state, JSON.encodeCompact(ManagerStateBody(await gateway.central.status())), qos: 1)
    }

    private func publish(_ update: SensorBoard.Update) async {
        guard let info = try? await gateway.central.peripheral(update.device) else { return }
        var body = SensorBody(info, SensorBoard.Current(reading: update.reading, heard: info.lastSeen ?? Date()), now: Date())
        body.rssi = update.rssi ?? info.rssi
        body.gateway = topics.gatewayID
        retain(topics.sensor(update.device), JSON.encodeCompact(body), qos: 0)
        announce(update.device, name: info.name, reading: update.reading)
    }

    /// Home Assistant entities for measurements of the device not announced yet.
    private func announce(_ device: BluetoothAddress, name: String?, reading: SensorReading) {
        let names = Set(reading.measurements.map(\.key))
        guard !names.isEmpty else { return }
        let new = state.withLock { s -> Bool in
            if let known = s.announced[device], names.isSubset(of: known) { return false }
            if s.announced.count >= SensorBoard.limit { s.announced.removeAll() }  // announced again when heard
            s.announced[device, default: []].formUnion(names)
            return true
        }
        guard new else { return }
        for (topic, config) in HomeAssistantDiscovery.configs(device: device, name: name, reading: reading, topics: topics) {
            retain(topic, JSON.encodeCompact(config), qos: 1)
        }
    }

    private func publishPresence(_ info: PeripheralInfo, connectionChanged: Bool) {
        let now = ContinuousClock.now
        let due = state.withLock { s -> Bool in
            if let last = s.presence[info.id], !connectionChanged, last.state == info.state.name,
               now - last.at < Self.presenceInterval { return false }
            if s.presence.count >= SensorBoard.limit { s.presence.removeAll() }
            s.presence[info.id] = (now, info.state.name)
            return true
        }
        if due { retain(topics.device(info.id), JSON.encodeCompact(gateway.deviceBody(info)), qos: 0) }
    }

    func retain(_ topic: String, _ payload: [UInt8], qos: Int) {
        state.withLock { $0.retained.set(topic, payload) }
        broker.publish(topic, payload, qos: qos, retain: true)
    }
}

/// Topic → last retained payload, in the order first published; at most `MQTTBridge.retainedLimit`.
struct RetainedMessages {
    private var payloads: [String: (order: UInt64, bytes: [UInt8])] = [:]
    private var next: UInt64 = 0
    var limit = MQTTBridge.retainedLimit

    var count: Int { payloads.count }

    mutating func set(_ topic: String, _ bytes: [UInt8]) {
        if let old = payloads[topic] {
            payloads[topic] = (old.order, bytes)
            return
        }
        if payloads.count >= limit, let oldest = payloads.min(by: { $0.value.order < $1.value.order })?.key {
            payloads[oldest] = nil
        }
        next += 1
        payloads[topic] = (next, bytes)
    }

    subscript(topic: String) -> [UInt8]? { payloads[topic]?.bytes }

    var inOrder: [(String, [UInt8])] {
        payloads.sorted { $0.value.order < $1.value.order }.map { ($0.key, $0.value.bytes) }
    }
}
