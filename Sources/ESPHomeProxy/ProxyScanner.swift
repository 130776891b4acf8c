import BLE
import ESPHomeAPI
import Synchronization
import Threading

/// The proxy's scanner: the advertisement subscriptions of the API's clients, the discovery
/// that feeds them, and the scanner state they are told.
///
/// The discovery is gattway's watch, which lasts beside any scan and reports every
/// advertisement of its devices. The first subscriber starts it on every device when no watch
/// runs (and the last one stops that watch again, unless it was replaced meanwhile); a watch
/// that runs already (`--watch`, `PUT /v1/watch`) is taken as it is, its filters too. Stopping
/// the watch over REST stops the advertisements, and the state says so. Subscriptions and their
/// ends run one after the other (one lane), so that a watch is never started twice.
///
/// A client may ask for passive scanning (Home Assistant's scanner mode): the watch this
/// scanner started then scans passively where the kernel's advertisement path allows it (an
/// advertisement monitor; on the D-Bus path BlueZ 5.66 scans actively only). The state's `mode`
/// is how the controllers scan now, `configuredMode` gattway's own setting (active), as an
/// ESPHome proxy reports what it runs and what its configuration says.
final class ProxyScanner: Sendable {
    private struct State {
        /// Listening to the central's advertisements (the feed's id) while anyone subscribes.
        var listener: Int?
        /// The watch this scanner started (its start), to stop when the last subscriber goes.
        var ownWatch: WatchStatus?
        /// The state last told, to tell only changes.
        var told: Told?
        var poller: Task<Void, Never>?
        /// The mode clients asked for last (the watch this scanner starts scans so).
        var requested = ProxyScanner.configuredMode
        var warnedFilters = false
    }

    /// What the clients were told.
    private struct Told: Equatable {
        var state: BluetoothScannerState
        var mode: BluetoothScannerMode
    }

    /// gattway's scanner mode when no client asked for another.
    static let configuredMode = BluetoothScannerMode.active

    private let bluetooth: GatewayBluetooth
    let advertiser: Advertiser
    private let state = Mutex(State())
    private let lane = Lanes<Int>()
    private let log: @Sendable (String) -> Void
    /// How often the watch's state is looked at while anyone subscribes (the adapter going off
    /// comes as a hub event at once; a discovery BlueZ ended shows here).
    static let pollInterval = Duration.seconds(5)

    init(bluetooth: GatewayBluetooth, log: @escaping @Sendable (String) -> Void) {
        self.bluetooth = bluetooth
        self.log = log
        advertiser = Advertiser(log: log)
    }

    func stop() {
        advertiser.stop()
        let (listener, poller) = state.withLock { s in
            defer { s.listener = nil; s.poller = nil }
            return (s.listener, s.poller)
        }
        poller?.cancel()
        if let listener { bluetooth.stopListening(listener) }
    }

    /// A client subscribes: it gets the advertisements from now on, and at once the scanner's
    /// state (bleak-esphome takes that as the sign that the subscription was taken).
    func subscribe(_ client: APIClient) {
        lane.submit(0) { [self] in
            advertiser.subscribe(client)
            await startIfNeeded()
            let now = await currentState()
            state.withLock { $0.told = now }
            client.send(Self.response(now))
        }
    }

    func unsubscribe(_ client: APIClient) {
        lane.submit(0) { [self] in
            guard advertiser.unsubscribe(client), advertiser.subscriberCount == 0 else { return }
            await stopIfIdle()
        }
    }

    /// A client asks for a mode: the watch this scanner started scans so from now on (one
    /// started over REST keeps its own). The answer is the state as it then is: passive asked
    /// where passive cannot run (the D-Bus path) stays active, and says so.
    func setMode(_ mode: BluetoothScannerMode, by client: APIClient) {
        lane.submit(0) { [self] in
            let changed = state.withLock { s in defer { s.requested = mode }; return s.requested != mode }
            if changed { await apply(mode, askedBy: client) }
            let now = await currentState()
            client.send(Self.response(now))
            let told = state.withLock { s in defer { s.told = now }; return s.told }
            if told != nil && told != now { advertiser.broadcast(Self.response(now)) }
        }
    }

    /// Restarts this scanner's own watch in `mode`.
    private func apply(_ mode: BluetoothScannerMode, askedBy client: APIClient) async {
        let words = mode == .passive ? "passive" : "active"
        guard let own = state.withLock({ $0.ownWatch }) else {
            let watch = await bluetooth.watchStatus()
            if watch.watching { log("\(client.peer): asks for \(words) scanning; the watch was started over REST (PUT /v1/watch) and keeps its mode") }
            return
        }
        let now = await bluetooth.watchStatus()
        guard now.watching, now.since == own.since, now.options == own.options else { return }
        do {
            let started = try await bluetooth.watchEverything(active: mode == .active)
            state.withLock { $0.ownWatch = started }
            log("\(client.peer): asks for \(words) scanning; the watch for Home Assistant now scans \(started.mode?.rawValue ?? words)")
        } catch {
            log("\(client.peer): asks for \(words) scanning: \(error.message)")
        }
    }

    /// Looks at the state again (the adapter's state changed, or the poll): subscribers are told a change.
    func refresh() {
        lane.submit(0) { [self] in
            guard advertiser.subscriberCount > 0 else { return }
            let now = await currentState()
            let changed = state.withLock { s in
                defer { s.told = now }
                return s.told != now
            }
            if changed { advertiser.broadcast(Self.response(now)) }
        }
    }

    // MARK: In the lane

    private func startIfNeeded() async {
        if state.withLock({ $0.listener == nil }) {
            let id = bluetooth.listen { [advertiser] in advertiser.heard($0) }
            let poller = Task { [weak self] in
                while (try? await Task.sleep(for: Self.pollInterval)) != nil { self?.refresh() }
            }
            state.withLock { s in
                s.listener = id
                s.poller = poller
            }
        }
        let watch = await bluetooth.watchStatus()
        if watch.watching {
            if let options = watch.options, options.hasFilters, !state.withLock({ s in defer { s.warnedFilters = true }; return s.warnedFilters }) {
                log("advertisements: the watch runs with filters (GET /v1/watch); Home Assistant sees only the devices it follows")
            }
            return
        }
        do {
            let started = try await bluetooth.watchEverything(active: state.withLock { $0.requested } == .active)
            state.withLock { $0.ownWatch = started }
            log("advertisements: the watch started for Home Assistant, on every device")
        } catch {
            // The watch is on whatever BlueZ says (it starts when the adapter is usable); this
            // is a refusal of another kind: the state tells the client.
            log("advertisements: cannot start the watch: \(error.message)")
        }
    }

    private func stopIfIdle() async {
        let (listener, poller, own) = state.withLock { s in
            defer { s.listener = nil; s.poller = nil; s.ownWatch = nil; s.told = nil }
            return (s.listener, s.poller, s.ownWatch)
        }
        poller?.cancel()
        if let listener { bluetooth.stopListening(listener) }
        guard let own else { return }
        // Only the watch it started: one replaced since (PUT /v1/watch) has another start.
        let now = await bluetooth.watchStatus()
        guard now.watching, now.since == own.since, now.options == own.options else { return }
        do {
            try await bluetooth.stopWatch()
            log("advertisements: no subscriber left: the watch started for them stopped")
        } catch {
            log("advertisements: stopping the watch: \(error.message)")
        }
    }

    /// Running while the watch discovers; starting while it waits for the adapter (it resumes by
    /// itself); stopped when there is no watch. The mode the controllers scan in for it.
    private func currentState() async -> Told {
        let watch = await bluetooth.watchStatus()
        let mode: BluetoothScannerMode = watch.mode == .passive ? .passive : .active
        if !watch.watching { return Told(state: .stopped, mode: state.withLock { $0.requested }) }
        return Told(state: watch.discovering ? .running : .starting, mode: mode)
    }

    private static func response(_ told: Told) -> BluetoothScannerStateResponse {
        BluetoothScannerStateResponse(state: told.state, mode: told.mode, configuredMode: configuredMode)
    }
}
