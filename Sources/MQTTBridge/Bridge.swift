import GatewayCore
import BLE
import FoundationEssentials
import Sensors
import Synchronization
import Threading

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
///   at once when the device is new to the bridge or its connection state changes, else at most
///   every `presenceInterval`: an RSSI that changes at every packet (a scan that allows
///   duplicates) is no reason to publish more often;
/// - `state`, `connection`, `adapter`, `pairing`, `servicesChanged` events → `events/<type>`; state
///   also → `state` (retained, `GET /v1/state`), each adapter → `adapters/<name>` (retained);
/// - notifications of characteristics subscribed over MQTT → `notifications/<address>/<handle>`.
///
/// What is retained is also kept here (bounded, `retainedLimit` topics, the oldest forgotten
/// first), and sent again whenever the broker connection is made again (`brokerConnected`), so
/// a broker that restarted without persistence has it back; while the connection is down it is
/// only kept here (`brokerDisconnected`), so that nothing goes out twice when it comes back.
///
/// With `expireAfter` (seconds), Home Assistant is told to show an entity unavailable when its
/// state topic has been quiet that long. Sensors publish on change only, so a sensor still heard
/// has its reading published again, unchanged, when the last was `expireAfter / 2` ago (checked
/// at each sweep, against what the gateway heard: with a scan that filters duplicates, or the
/// watch, an unchanged advertisement never reaches the bridge as an event): a steady thermometer
/// or a beacon stays available, one not heard any more goes unavailable.
///
/// Devices come and go (phones change their random address every few minutes): a device the
/// gateway has not heard for `forgetAfter` (and that is not connected), or no longer knows, is
/// forgotten here too: its `devices/` and `sensors/` topics are cleared (an empty retained
/// message) and what was kept of it, its discovery configs included, is dropped. At most
/// `deviceLimit` devices are followed; past it the one heard longest ago is forgotten. Discovery
/// configs are not cleared on the broker: another gateway may still feed the same entity.
public final class Bridge: Sendable {
    public static let inboxLimit = 4096
    public static let retainedLimit = 16_384
    public static let presenceInterval = Duration.seconds(30)
    public static let deviceLimit = SensorBoard.limit

    /// An event to publish, or (`sweep`) the time to forget devices not heard for long.

    struct Item: Sendable {
        var event: HubEvent?
        var subscription: String
        var json: [UInt8]
        var sweep = false
    }

    /// A device with topics of its own on the broker.
    private struct Followed {
        /// When the gateway last heard it, as far as the bridge knows.
        var heard: Date
        /// When its presence was last published, and in which connection state.
        var presence: (at: ContinuousClock.Instant, state: String)?
        /// When its sensor reading was last published, and which reading it was.
        var reading: ContinuousClock.Instant?
        var lastReading: SensorReading?
        /// The measurements announced to Home Assistant, and their discovery topics.
        var announced: Set<String> = []
        var discoveryTopics: Set<String> = []
    }

    private struct State {
        var retained = RetainedMessages()
        /// Between `brokerConnected` and `brokerDisconnected`: retained messages go to the broker
        /// as they are made; otherwise only into `retained`, which `brokerConnected` sends.
        var brokerUp = false
        var followed: [BluetoothAddress: Followed] = [:]
        var task: Task<Void, Never>?
        var sweeper: Task<Void, Never>?
    }

    let gateway: Gateway
    let broker: any MessageBroker
    public let topics: BridgeTopics
    let log: @Sendable (String) -> Void
    /// A device not heard for this long is forgotten (`--forget-after`, the watch's too).
    let forgetAfter: Duration
    /// Home Assistant's `expire_after` of the sensors' entities, in seconds; nil: none.
    public let expireAfter: Int?
    let client: StreamClient
    /// MQTT commands run as a WebSocket's do, with this bridge's stream client for subscriptions.
    let session: CommandSession
    let runningCommands = Atomic<Int>(0)
    private let inbox: AsyncStream<Item>.Continuation
    private let items: AsyncStream<Item>
    private let state = Mutex(State())
    private let dropped: DropCount
    private final class DropCount: Sendable { let value = Atomic<Int>(0) }

    public init(gateway: Gateway, broker: any MessageBroker, topics: BridgeTopics, forgetAfter: Duration = .seconds(3600),
                expireAfter: Int? = nil, log: @escaping @Sendable (String) -> Void) {
        self.gateway = gateway
        self.broker = broker
        self.topics = topics
        self.forgetAfter = forgetAfter
        self.expireAfter = expireAfter
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
        session = CommandSession(gateway: gateway, client: client)
    }

    /// Starts taking events and commands. The broker connection may come later: `brokerConnected`.
    public func start() {
        client.select(Selection(types: [EventTypes(.state), EventTypes(.advertisement), EventTypes(.connection), EventTypes(.sensor),
                                        EventTypes(.pairing), EventTypes(.servicesChanged), EventTypes(.adapter)]),
                      as: "")
        gateway.hub.add(client)
        broker.subscribe(topics.command, qos: 1)
        let task = Task {
            await self.publishState()
            for await item in self.items { await self.handle(item) }
        }
        // Sweeps run in the inbox's order, so that a device is never cleared after a newer publish.
        // A quarter of the forgetting's or the expiry's time, whichever is shorter, 1 to 60 s.
        let expiry = expireAfter.map { Duration.seconds($0) / 4 } ?? .seconds(60)
        let interval = min(max(min(forgetAfter / 4, expiry), .seconds(1)), .seconds(60))
        let sweeper = Task { [inbox, hub = gateway.hub] in
            let sweep = Item(event: nil, subscription: "", json: [], sweep: true)
            // One at once, behind the events of before the client was added: a steady sensor the
            // watch heard before (one reading, never changed since) is published now, not never.
            await hub.offered()
            inbox.yield(sweep)
            while (try? await Task.sleep(for: interval)) != nil {
                inbox.yield(sweep)
            }
        }
        state.withLock { s in
            s.task = task
            s.sweeper = sweeper
        }
    }

    /// Stops taking events; ends the holds of MQTT subscriptions.
    public func stop() async {
        state.withLock { $0.sweeper }?.cancel()
        inbox.finish()
        client.close()
        gateway.hub.remove(client)
        await state.withLock { $0.task }?.value
        await session.end()
    }

    /// The broker connection is (again) made: availability, then everything retained. Under the
    /// lock that `retain` takes, so that a newer message for a topic never goes out before the
    /// older one sent here (the broker would keep the older).
    public func brokerConnected() {
        state.withLock { s in
            s.brokerUp = true
            broker.publish(topics.availability, BridgeTopics.online, qos: 1, retain: true)
            let own = HomeAssistantDiscovery.gatewayConfig(topics: topics, version: gateway.version)
            broker.publish(own.topic, JSON.encodeCompact(own.config), qos: 1, retain: true)
            for (topic, payload) in s.retained.inOrder {
                broker.publish(topic, payload, qos: 1, retain: true)
            }
        }
    }

    /// The broker connection is lost (or not made): retained messages are only kept until
    /// `brokerConnected` sends them all. Handed to the client meanwhile, they would wait in its
    /// offline queue and go out twice at the reconnection: from the queue, then from here.
    public func brokerDisconnected() {
        state.withLock { $0.brokerUp = false }
    }

    /// Events the inbox had no room for.
    public var droppedEvents: Int { dropped.value.load(ordering: .relaxed) }
    /// Topics whose retained message is kept for a reconnection.
    public var retainedCount: Int { state.withLock { $0.retained.count } }
    /// Devices with topics of their own.
    public var followedCount: Int { state.withLock { $0.followed.count } }

    // MARK: - Events

    private func handle(_ item: Item) async {
        if item.sweep { return await sweep() }
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
        case .central(.adapter(let info, let change)):
            broker.publish(topics.event(.adapter), item.json)
            if change == .removed {
                retain(topics.adapter(info.id), [], qos: 1)
            } else {
                retain(topics.adapter(info.id), JSON.encodeCompact(AdapterBody(info)), qos: 1)
            }
        case .central(.pairing), .central(.servicesChanged):
            // What a pairing asks (answered with POST /v1/devices/{id}/pairing), and changed GATT tables.
            broker.publish(topics.event(event.type), item.json)
        case .central(.value), .central(.advertisementChanged), .central(.resubscribed), .peripheral:
            break  // not selected by the bridge's own subscription
        }
    }

    /// The state, and each adapter in use.
    private func publishState() async {
        retain(topics.state, JSON.encodeCompact(ManagerStateBody(await gateway.central.status())), qos: 1)
        for adapter in (try? await gateway.central.adapters()) ?? [] where adapter.selected {
            retain(topics.adapter(adapter.id), JSON.encodeCompact(AdapterBody(adapter)), qos: 1)
        }
    }

    private func publish(_ update: SensorBoard.Update) async {
        guard let info = try? await gateway.central.peripheral(update.device) else { return }
        publishReading(info, SensorBoard.Current(reading: update.reading, heard: info.lastSeen ?? Date()), rssi: update.rssi ?? info.rssi)
        announce(update.device, name: info.name, reading: update.reading)
    }

    /// Publishes the reading, unless it is the one published last for the device (`again`: the
    /// expiry's sending it anew): a reading the sweep found reaches the bridge as its event too
    /// when the event was still on its way, and either may come first.
    private func publishReading(_ info: PeripheralInfo, _ current: SensorBoard.Current, rssi: Int?, again: Bool = false) {
        var body = SensorBody(info, current, now: Date())
        body.rssi = rssi
        body.gateway = topics.gatewayID
        follow(info.id, heard: info.lastSeen ?? Date())
        let new = state.withLock { s -> Bool in
            guard again || s.followed[info.id]?.lastReading != current.reading else { return false }
            s.followed[info.id]?.reading = .now
            s.followed[info.id]?.lastReading = current.reading
            return true
        }
        guard new else { return }
        retain(topics.sensor(info.id), JSON.encodeCompact(body), qos: 0)
    }

    /// Readings of sensors the gateway hears (its list and the watch's) that events did not
    /// bring: one never published (heard before the bridge started and steady since, as a
    /// beacon is; heard within `forgetAfter`), and with `expireAfter` an unchanged one whose last
    /// message is half of that old (heard within that half).
    private func publishUnsentReadings() async {
        let now = Date()
        let clock = ContinuousClock.now
        let half = expireAfter.map { Duration.seconds($0) / 2 }
        let listed = await gateway.central.peripherals()
        let ids = Set(listed.map(\.id))
        let heard = listed + (await gateway.central.watched()).filter { !ids.contains($0.id) }
        let sent = state.withLock { s in s.followed.compactMapValues(\.reading) }
        for info in heard {
            guard let seen = info.lastSeen else { continue }
            let quiet = now.timeIntervalSince(seen)
            if let last = sent[info.id] {
                guard let half, clock - last >= half, quiet <= half.inSeconds else { continue }
            } else if quiet > forgetAfter.inSeconds {
                continue
            }
            // A changed reading found here goes out as its `sensor` event, queued behind this sweep.
            guard case (let current?, false) = gateway.sensors.hearing(info) else { continue }
            publishReading(info, current, rssi: info.rssi, again: sent[info.id] != nil)
            announce(info.id, name: info.name, reading: current.reading)
        }
    }

    /// Home Assistant entities for measurements of the device not announced yet.
    private func announce(_ device: BluetoothAddress, name: String?, reading: SensorReading) {
        let names = Set(reading.measurements.map(\.key))
        guard !names.isEmpty else { return }
        let new = state.withLock { s -> Bool in
            guard let known = s.followed[device]?.announced, !names.isSubset(of: known) else { return false }
            s.followed[device]?.announced.formUnion(names)
            return true
        }
        guard new else { return }
        for (topic, config) in HomeAssistantDiscovery.configs(device: device, name: name, reading: reading, topics: topics,
                                                              expireAfter: expireAfter) {
            state.withLock { _ = $0.followed[device]?.discoveryTopics.insert(topic) }
            retain(topic, JSON.encodeCompact(config), qos: 1)
        }
    }

    private func publishPresence(_ info: PeripheralInfo, connectionChanged: Bool) {
        let now = ContinuousClock.now
        follow(info.id, heard: info.lastSeen ?? Date())
        let due = state.withLock { s -> Bool in
            if let last = s.followed[info.id]?.presence, !connectionChanged, last.state == info.state.name,
               now - last.at < Self.presenceInterval { return false }
            s.followed[info.id]?.presence = (now, info.state.name)
            return true
        }
        if due { retain(topics.device(info.id), JSON.encodeCompact(gateway.deviceBody(info)), qos: 0) }
    }

    // MARK: - Forgetting

    /// Notes a device heard; a new one past `deviceLimit` makes the one heard longest ago forgotten.
    private func follow(_ device: BluetoothAddress, heard: Date) {
        let evicted = state.withLock { s -> BluetoothAddress? in
            if let known = s.followed[device]?.heard {
                s.followed[device]?.heard = max(known, heard)
                return nil
            }
            var evicted: BluetoothAddress?
            if s.followed.count >= Self.deviceLimit, let oldest = s.followed.min(by: { $0.value.heard < $1.value.heard })?.key {
                evicted = oldest
            }
            s.followed[device] = Followed(heard: heard)
            return evicted
        }
        if let evicted { forget([evicted], why: "more than \(Self.deviceLimit) devices") }
    }

    /// Forgets the devices not heard for `forgetAfter` that the gateway does not hear (or know)
    /// either; then publishes the readings events did not bring (`publishUnsentReadings`).
    private func sweep() async {
        let now = Date()
        let limit = forgetAfter.inSeconds
        let quiet = state.withLock { s in s.followed.filter { now.timeIntervalSince($0.value.heard) > limit }.map(\.key) }
        var gone: [BluetoothAddress] = []
        for device in quiet {
            // Its unchanged readings and RSSI changes do not reach the bridge: the gateway knows better.
            if let info = try? await gateway.central.peripheral(device) {
                let heard = info.state == .disconnected ? info.lastSeen : now  // a connected device does not advertise
                if let heard, now.timeIntervalSince(heard) <= limit {
                    state.withLock { $0.followed[device]?.heard = heard }
                    continue
                }
            }
            gone.append(device)
        }
        if !gone.isEmpty { forget(gone, why: "not heard for \(limit == limit.rounded() ? "\(Int(limit))" : "\(limit)") s") }
        await publishUnsentReadings()
    }

    /// Clears the devices' own retained topics and drops what is kept of them.
    private func forget(_ devices: [BluetoothAddress], why: String) {
        var cleared: [String] = []
        state.withLock { s in
            for device in devices {
                guard let followed = s.followed.removeValue(forKey: device) else { continue }
                for topic in [topics.device(device), topics.sensor(device)] where s.retained.remove(topic) {
                    cleared.append(topic)
                }
                for topic in followed.discoveryTopics { _ = s.retained.remove(topic) }
            }
        }
        for topic in cleared { broker.publish(topic, [], qos: 1, retain: true) }
        let shown = devices.prefix(5).map(\.description).joined(separator: ", ") + (devices.count > 5 ? ", ..." : "")
        log("mqtt: forgot \(devices.count) device\(devices.count == 1 ? "" : "s") (\(why)), their retained topics cleared: \(shown)")
    }

    func retain(_ topic: String, _ payload: [UInt8], qos: Int) {
        state.withLock { s in
            s.retained.set(topic, payload)
            if s.brokerUp { broker.publish(topic, payload, qos: qos, retain: true) }
        }
    }
}

/// Topic → last retained payload, in the order first published; at most `Bridge.retainedLimit`.
struct RetainedMessages {
    private var payloads: [String: (order: UInt64, bytes: [UInt8])] = [:]
    private var next: UInt64 = 0
    var limit = Bridge.retainedLimit

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

    /// Whether the topic was kept.
    mutating func remove(_ topic: String) -> Bool { payloads.removeValue(forKey: topic) != nil }

    subscript(topic: String) -> [UInt8]? { payloads[topic]?.bytes }

    var inOrder: [(String, [UInt8])] {
        payloads.sorted { $0.value.order < $1.value.order }.map { ($0.key, $0.value.bytes) }
    }
}
