import BLE
import DBus
import Simulator
import Synchronization
@testable import BlueZ

/// The BlueZ central in-process against the simulator on a private bus: the gateway's own
/// backend, talking D-Bus to a BlueZ that the test controls.
final class CentralRig: Sendable {
    let bus: PrivateBus
    let server: Connection
    let simulator: Simulator
    let client: Connection
    let central: BlueZCentral
    let events = EventLog()
    private let closed = Mutex(false)

    static let hr = BluetoothAddress("F0:00:00:00:00:01")!
    static let serial = BluetoothAddress("F0:00:00:00:00:02")!

    /// Reconnection on a test's time scale: 50–100 ms, doubling up to 400 ms.
    static let quick = ReconnectPolicy(first: 0.05...0.1, factor: 2, jitter: 0.2, maximum: 0.4)

    private init(_ configuration: SimulatorConfiguration, policy: ReconnectPolicy, restoreDeadline: Duration) throws {
        bus = try PrivateBus()
        server = try Connection(address: bus.address)
        simulator = Simulator(connection: server, configuration: configuration)
        let client = try Connection(address: bus.address)
        self.client = client
        let address = bus.address
        let first = Mutex<Connection?>(client)
        // The first connection is the test's (it subscribes and calls with it too); after a bus loss, new ones.
        central = BlueZCentral(reconnectPolicy: policy, restoreDeadline: restoreDeadline) { () throws(BusError) in
            if let c = first.withLock({ c in defer { c = nil }; return c }) { return c }
            return try Connection(address: address)
        }
    }

    static func start(_ configuration: SimulatorConfiguration = .builtIn, policy: ReconnectPolicy = quick,
                      restoreDeadline: Duration = .seconds(10)) async throws -> CentralRig {
        let rig = try CentralRig(configuration, policy: policy, restoreDeadline: restoreDeadline)
        rig.central.setEventHandler { [events = rig.events] in events.append($0) }
        try await rig.simulator.start()
        await rig.central.start()
        return rig
    }

    /// Scans until `ids` are known, then connects them.
    static func connected(_ ids: [BluetoothAddress], _ configuration: SimulatorConfiguration = .builtIn,
                          autoReconnect: Bool = false, policy: ReconnectPolicy = quick,
                          restoreDeadline: Duration = .seconds(10)) async throws -> CentralRig {
        let rig = try await start(configuration, policy: policy, restoreDeadline: restoreDeadline)
        _ = try await rig.central.startScan(ScanOptions())
        for id in ids {
            _ = try await rig.events.wait { if case .advertisement(let p) = $0 { p.id == id } else { false } }
        }
        _ = try await rig.central.stopScan()
        for id in ids { _ = try await rig.central.connect(id, timeout: .seconds(20), autoReconnect: autoReconnect) }
        return rig
    }

    func close() {
        guard !closed.withLock({ c in defer { c = true }; return c }) else { return }
        simulator.stop()
        client.close()
        server.close()
        bus.stop()
    }

    deinit { close() }

    /// A call to the simulator's control interface (faults, link loss, values).
    @discardableResult
    func control(_ member: String, _ body: [Value]) async throws -> [Value] {
        try await client.call(.methodCall(destination: "org.bluez", path: ObjectPath("/io/gattway/simulator")!,
                                          interface: "io.gattway.Simulator1", member: member, body), timeout: .seconds(10)).body
    }

    /// The peripheral sets a characteristic's value and notifies it.
    func notify(_ id: BluetoothAddress, _ uuid: String, _ value: [UInt8]) async throws {
        try await control("SetValue", [.string(id.description), .string(uuid), .bytes(value), .bool(true)])
    }
}

struct Timeout: Error, CustomStringConvertible {
    let what: String
    var description: String { "timed out waiting for \(what)" }
}

typealias EventLog = EventLogOf<CentralEvent>

/// Every event the central (or the peripheral side) reported, and tasks waiting for one that matches.
final class EventLogOf<Event: Sendable>: Sendable {
    typealias Match = @Sendable (Event) -> Bool
    private struct Waiter {
        let match: Match
        let continuation: CheckedContinuation<Event?, Never>
    }
    private let state = Mutex<(events: [Event], next: Int, waiters: [Int: Waiter])>(([], 0, [:]))

    func append(_ event: Event) {
        let matched = state.withLock { s -> [CheckedContinuation<Event?, Never>] in
            s.events.append(event)
            let hits = s.waiters.filter { $0.value.match(event) }
            for id in hits.keys { s.waiters[id] = nil }
            return hits.values.map(\.continuation)
        }
        for c in matched { c.resume(returning: event) }
    }

    var all: [Event] { state.withLock { $0.events } }

    func count(_ match: (Event) -> Bool) -> Int { state.withLock { $0.events.filter(match).count } }

    /// The first event that matches, among those recorded from the `since`-th on (pass
    /// `recorded` to wait for a new one), or `Timeout` after `timeout`.
    func wait(since: Int = 0, timeout: Duration = .seconds(10), what: String = "an event",
              _ match: @escaping Match) async throws -> Event {
        let found = await withCheckedContinuation { (continuation: CheckedContinuation<Event?, Never>) in
            let (earlier, id) = state.withLock { s -> (Event?, Int) in
                if let hit = s.events.dropFirst(since).first(where: match) { return (hit, -1) }
                s.next += 1
                s.waiters[s.next] = Waiter(match: match, continuation: continuation)
                return (nil, s.next)
            }
            if let earlier { return continuation.resume(returning: earlier) }
            Task {
                try? await Task.sleep(for: timeout)  // the time bound of a wait, not a synchronisation
                self.state.withLock { $0.waiters.removeValue(forKey: id) }?.continuation.resume(returning: nil)
            }
        }
        guard let found else { throw Timeout(what: what) }
        return found
    }

    var recorded: Int { state.withLock { $0.events.count } }
}
