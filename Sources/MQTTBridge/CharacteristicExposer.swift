import GatewayCore
import BLE
import FoundationEssentials
import Sensors
import Synchronization

/// `--mqtt-expose`: chosen GATT characteristics as Home Assistant sensors, on the bridge's broker.
///
/// - A `notify` characteristic's device is kept connected by a keeper task of its own: it
///   connects (as a client's connect with `autoReconnect` does, so the central reconnects after
///   a link loss and restores the notifications), holds the notifications (one hold per
///   characteristic, shared with every other client), reads the value once if it can be read,
///   and then looks again at every connection event of the device or every `checkInterval`:
///   a device the central has given up on (or a client disconnected) is connected again, with
///   backoff (1 s doubling to 30 s) while that fails.
/// - A `poll` characteristic is read every N seconds, connecting first as `connect=auto` does
///   (the link is let go after `--idle-disconnect` without requests); a failed read is tried
///   again sooner, with the same backoff, never later than the poll interval.
///
/// Each value is published retained on `values/<address>/<service>/<characteristic>` in the
/// shape of `GET …/value` (hex) plus `device`, `gateway`, `name` and the decoded `measurement`;
/// the first value of each characteristic also announces its entity. Both go through the
/// bridge's retained store, so they are sent again when the broker connection comes back.
/// Notifications reach this type as a `.sink` client of the hub (at most `inboxLimit` waiting,
/// the oldest dropped first); problems are logged when they start and when they end.
public final class CharacteristicExposer: Sendable {
    public static let inboxLimit = 1024
    static let checkInterval = Duration.seconds(30)
    static let connectTimeout = Duration.seconds(10)

    private struct State {
        var tasks: [Task<Void, Never>] = []
        var announced: Set<String> = []
        /// The problem last logged per characteristic (`label`) and concern, so that each is logged once.
        var problems: [String: String] = [:]
        var stopped = false
    }

    let bridge: Bridge
    public let exposed: [ExposedCharacteristic]
    private var gateway: Gateway { bridge.gateway }
    private let client: StreamClient
    private let inbox: AsyncStream<HubEvent>.Continuation
    private let events: AsyncStream<HubEvent>
    /// Rung at each connection event of a device with `notify` characteristics.
    private let bells: [BluetoothAddress: Doorbell]
    private let state = Mutex(State())

    public init(bridge: Bridge, exposed: [ExposedCharacteristic]) {
        self.bridge = bridge
        self.exposed = exposed
        let (events, inbox) = AsyncStream<HubEvent>.makeStream(bufferingPolicy: .bufferingNewest(Self.inboxLimit))
        self.events = events
        self.inbox = inbox
        client = StreamClient(id: bridge.gateway.hub.newClientID(), transport: .sink(EventSink { event, _, _ in
            if let event { inbox.yield(event) }
        }), counters: bridge.gateway.hub.counters)
        bells = Dictionary(exposed.filter { $0.mode == .notify }.map { ($0.device, Doorbell()) }, uniquingKeysWith: { a, _ in a })
    }

    /// Starts keeping, holding and polling; values are published from now on.
    public func start() {
        for device in bells.keys {
            client.select(Selection(types: [EventTypes(.notification), EventTypes(.connection)], device: device), as: "expose \(device)")
        }
        gateway.hub.add(client)
        var tasks = [Task { for await event in self.events { await self.handle(event) } }]
        for (device, bell) in bells {
            let notified = exposed.filter { $0.device == device && $0.mode == .notify }
            tasks.append(Task { await self.keep(device, notified, bell) })
        }
        for e in exposed {
            if case .poll(let interval) = e.mode { tasks.append(Task { await self.poll(e, every: interval) }) }
        }
        state.withLock { $0.tasks = tasks }
    }

    /// Stops: the holds are released; the devices stay as they are.
    public func stop() async {
        let tasks = state.withLock { s -> [Task<Void, Never>] in
            s.stopped = true
            return s.tasks
        }
        for task in tasks { task.cancel() }
        for bell in bells.values { bell.ring() }
        inbox.finish()
        client.close()
        gateway.hub.remove(client)
        for task in tasks { await task.value }
    }

    private var stopped: Bool { state.withLock { $0.stopped } }

    // MARK: - Notified values

    private func handle(_ event: HubEvent) async {
        switch event.event {
        case .central(.value(let update)):
            for e in exposed where e.mode == .notify && e.device == update.device
                && e.service == update.serviceUUID && e.characteristic == update.characteristicUUID {
                let value = AttributeValue(handle: update.characteristicHandle, uuid: update.characteristicUUID, value: update.value)
                await publish(e, value, source: .notification)
            }
        case .central(.connection(let id, _, _)), .central(.reconnecting(let id, _, _, _)):
            bells[id]?.ring()
        default:
            break
        }
    }

    /// Keeps `device` connected with the notifications of `list` held, until stopped.
    private func keep(_ device: BluetoothAddress, _ list: [ExposedCharacteristic], _ bell: Doorbell) async {
        var held: [ExposedCharacteristic: NotificationHolds.Key] = [:]
        var failures = 0
        while !stopped {
            var wait = Self.checkInterval
            do {
                try await link(device, list, &held)
                failures = 0
            } catch {
                failures += 1
                wait = Self.backoff(failures)
                for e in list where held[e] == nil { problem(e, "\(error.message); trying again in \(wait)") }
            }
            await bell.wait(atMost: wait)
        }
        for key in held.values { await gateway.holds.release(key) }
    }

    /// One look at the device: connected (or being reconnected by the central), every
    /// characteristic of `list` held.
    private func link(_ device: BluetoothAddress, _ list: [ExposedCharacteristic],
                      _ held: inout [ExposedCharacteristic: NotificationHolds.Key]) async throws(BLEError) {
        let info = try await gateway.central.peripheral(device)
        if info.state != .connected {
            // The central is reconnecting it: its connection event wakes the keeper.
            guard info.reconnect == nil else { return }
            _ = try await gateway.autoConnections.clientConnects(device) { () async throws(BLEError) in
                try await gateway.central.connect(device, timeout: Self.connectTimeout, autoReconnect: true)
            }
            bridge.log("mqtt: \(device) connected for --mqtt-expose (kept connected)")
        }
        for e in list where held[e] == nil {
            let c = try await gateway.central.characteristic(device, e.ref)
            try c.requireNotifiable()
            let key = NotificationHolds.Key(device: device, characteristic: c.handle)
            try await gateway.holds.acquire(key)
            held[e] = key
            resolved(e, "notifications held")
            if c.properties.contains(.read), let value = try? await gateway.readNow(device, .characteristic(e.ref), offset: 0) {
                await publish(e, value, source: .read)
            }
        }
    }

    // MARK: - Polled values

    private func poll(_ e: ExposedCharacteristic, every interval: Duration) async {
        var failures = 0
        while !stopped {
            var wait = interval
            do {
                try await gateway.autoConnections.connectIfNeeded(e.device)
                let value = try await gateway.autoConnections.using(e.device) {
                    try await self.gateway.readNow(e.device, .characteristic(e.ref), offset: 0)
                }
                failures = 0
                resolved(e, "read every \(interval)")
                await publish(e, value, source: .read)
            } catch {
                failures += 1
                wait = min(interval, Self.backoff(failures))
                let message = (error as? BLEError)?.message ?? "\(error)"
                problem(e, "\(message); trying again in \(wait)")
            }
            do { try await Task.sleep(for: wait) } catch { return }
        }
    }

    // MARK: - Publishing

    private func publish(_ e: ExposedCharacteristic, _ value: AttributeValue, source: ValueBody.Source) async {
        let body = ExposedValueBody(value, source: source, exposed: e, gateway: bridge.topics.gatewayID)
        if body.measurement == nil {
            problem(e, e.decoding.whyNoMeasurement(value.value), about: .value)
        } else {
            resolved(e, "values with a measurement", about: .value)
        }
        bridge.retain(bridge.topics.value(e), JSON.encodeCompact(body), qos: 0)
        guard state.withLock({ $0.announced.insert(e.uniqueID).inserted }) else { return }
        let name = try? await gateway.central.peripheral(e.device).name
        let (topic, config) = HomeAssistantDiscovery.config(e, deviceName: name, topics: bridge.topics,
                                                            expireAfter: bridge.expireAfter)
        bridge.retain(topic, JSON.encodeCompact(config), qos: 1)
    }

    /// What a problem is with: getting the value, or decoding it (a poll that reads fine but gets
    /// no measurement each time is one problem, logged once).
    private enum Concern { case link, value }

    private func problem(_ e: ExposedCharacteristic, _ text: String, about concern: Concern = .link) {
        let new = state.withLock { $0.problems.updateValue(text, forKey: "\(e.label) \(concern)") != text }
        if new { bridge.log("mqtt: --mqtt-expose \(e.label): \(text)") }
    }

    private func resolved(_ e: ExposedCharacteristic, _ text: String, about concern: Concern = .link) {
        let had = state.withLock { $0.problems.removeValue(forKey: "\(e.label) \(concern)") }
        if had != nil { bridge.log("mqtt: --mqtt-expose \(e.label): \(text) again") }
    }

    /// 1 s, doubling, at most 30 s.
    static func backoff(_ failures: Int) -> Duration { .seconds(min(30, 1 << min(max(failures - 1, 0), 5))) }
}

/// `values/<address>/<service>/<characteristic>`: `GET …/value` (hex), and what the value is: the
/// device, its service, the gateway that read it, the entity's name and the decoded measurement
/// (absent when the value is too short for the decoding), as members of the same object.
struct ExposedValueBody: Encodable {
    var value: ValueBody
    var device: String
    var service: String
    var gateway: String
    var name: String
    var measurement: Measurement?

    init(_ read: AttributeValue, source: ValueBody.Source, exposed: ExposedCharacteristic, gateway: String) {
        value = ValueBody(read, format: .hex, source: source, age: .zero)
        device = exposed.device.description
        service = exposed.service.uuidString
        self.gateway = gateway
        name = exposed.name
        measurement = exposed.decoding.measurement(read.value, unit: exposed.unit)
    }

    private enum CodingKeys: String, CodingKey { case device, service, gateway, name, measurement }

    func encode(to encoder: any Encoder) throws {
        try value.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(device, forKey: .device)
        try container.encode(service, forKey: .service)
        try container.encode(gateway, forKey: .gateway)
        try container.encode(name, forKey: .name)
        try container.encodeIfPresent(measurement, forKey: .measurement)
    }
}

/// A wake-up to wait for with a deadline: `ring` ends the current (or the next) `wait`.
private final class Doorbell: Sendable {
    private let state = Mutex<(rung: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))

    func ring() {
        let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
            guard let w = s.waiter else {
                s.rung = true
                return nil
            }
            s.waiter = nil
            return w
        }
        waiter?.resume()
    }

    func wait(atMost limit: Duration) async {
        let timer = Task { [weak self] in
            do { try await Task.sleep(for: limit) } catch { return }
            self?.ring()
        }
        defer { timer.cancel() }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let early = state.withLock { s -> Bool in
                if s.rung {
                    s.rung = false
                    return true
                }
                s.waiter = continuation
                return false
            }
            if early { continuation.resume() }
        }
    }
}
