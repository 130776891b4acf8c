import BLE
import Synchronization
import Threading

/// Devices gattway connected on its own for a `connect=auto` request, and their idle
/// disconnect: such a device is disconnected once no request has used it for `idleAfter` and
/// nothing holds its notifications, so that a poller does not keep a link open forever.
///
/// Only devices this type connected are ever disconnected by it. A client's connect claims
/// the device (from then on it is the client's, even if gattway connected it first) until the
/// client disconnects it or the link goes down; a device the central keeps connected
/// (`autoReconnect`) is never taken. Connects, claims and idle disconnects of a device run one
/// at a time, so that a client's connect cannot be undone by an idle disconnect decided before it.
package final class AutoConnections: Sendable {
    private struct State {
        /// Devices gattway connected on its own: when a request last finished with each, and
        /// the timer that looks again when it may have become idle.
        var owned: [BluetoothAddress: (lastUse: ContinuousClock.Instant, timer: Task<Void, Never>?)] = [:]
        /// Devices a client connected.
        var claimed: Set<BluetoothAddress> = []
        /// Requests using each device now (bounded by the requests served at once).
        var busy: [BluetoothAddress: Int] = [:]
    }

    private let state = Mutex(State())
    private let turns = SerialQueues<BluetoothAddress>(maxWaiting: 32, maxWait: .seconds(60))
    private let central: BlocklistedCentral
    private let holds: NotificationHolds
    private let log: @Sendable (String) -> Void
    package let idleAfter: Duration

    /// A poller's connect must answer within its patience (Home Assistant's polling sensors
    /// wait 10 s).
    package static let connectTimeout: Duration = .seconds(10)

    package init(central: BlocklistedCentral, holds: NotificationHolds, idleAfter: Duration, log: @escaping @Sendable (String) -> Void) {
        self.central = central
        self.holds = holds
        self.idleAfter = idleAfter
        self.log = log
    }

    /// Whether gattway connected `id` on its own and will disconnect it when idle.
    package func owns(_ id: BluetoothAddress) -> Bool { state.withLock { $0.owned[id] != nil } }

    /// `body` uses the device: it is not idle meanwhile, and its idle time starts when `body` ends.
    package func using<T>(_ id: BluetoothAddress, _ body: () async throws -> T) async throws -> T {
        state.withLock { $0.busy[id, default: 0] += 1 }
        defer {
            state.withLock { s in
                let left = (s.busy[id] ?? 1) - 1
                s.busy[id] = left > 0 ? left : nil
                guard s.owned[id] != nil else { return }
                s.owned[id]!.lastUse = .now
                if left == 0 { schedule(id, &s) }
            }
        }
        return try await body()
    }

    /// `connect=auto`: connects `id` unless it is connected (`unknownDevice` when the adapter
    /// does not know it), within `connectTimeout`; gattway owns the link it made. With
    /// `whenHeard`, once the device has been heard advertising (waiting at most that long).
    package func connectIfNeeded(_ id: BluetoothAddress, whenHeard listening: Duration? = nil) async throws(BLEError) {
        try await inTurn(id) { () async throws(BLEError) in
            let device = try await central.peripheral(id)
            guard device.state != .connected else { return }
            if let listening {
                _ = try await central.connectWhenHeard(id, timeout: Self.connectTimeout, listening: listening)
            } else {
                _ = try await central.connect(id, timeout: Self.connectTimeout, autoReconnect: false)
            }
            let owned = state.withLock { s -> Bool in
                guard !s.claimed.contains(id), device.reconnect == nil else { return false }
                s.owned[id] = (.now, nil)
                return true
            }
            if owned { log("\(id): connected for connect=auto; disconnected after \(idleAfter) without requests") }
        }
    }

    /// A client's connect: the device is the client's from now on (unless the connect fails).
    package func clientConnects<T: Sendable>(_ id: BluetoothAddress, _ connect: () async throws(BLEError) -> T) async throws(BLEError) -> T {
        try await inTurn(id) { () async throws(BLEError) -> T in
            release(id, claim: true)
            do throws(BLEError) {
                return try await connect()
            } catch {
                state.withLock { _ = $0.claimed.remove(id) }
                throw error
            }
        }
    }

    /// A client's disconnect: nobody's any more.
    package func clientDisconnects<T: Sendable>(_ id: BluetoothAddress, _ disconnect: () async throws(BLEError) -> T) async throws(BLEError) -> T {
        try await inTurn(id) { () async throws(BLEError) -> T in
            release(id, claim: false)
            return try await disconnect()
        }
    }

    /// At shutdown: the devices gattway connected on its own (`connect=auto`, serial ports) are
    /// disconnected now, as their idle timers would have done; no one would after gattway.
    /// Answers how many there were.
    package func disconnectOwned() async -> Int {
        let ids = state.withLock { s -> [BluetoothAddress] in
            let ids = Array(s.owned.keys)
            for id in ids { s.owned.removeValue(forKey: id)?.timer?.cancel() }
            return ids
        }
        await withTaskGroup(of: Void.self) { group in
            for id in ids {
                group.addTask {
                    do {
                        _ = try await self.central.disconnect(id)
                    } catch {
                        self.log("\(id): disconnect at shutdown failed: \(error)")
                    }
                }
            }
        }
        return ids.count
    }

    /// The link went down: whoever had it, nobody has it now (a kept device the central
    /// reconnects is still never taken).
    package func linkDown(_ id: BluetoothAddress) { release(id, claim: false) }

    // MARK: -

    private func release(_ id: BluetoothAddress, claim: Bool) {
        let timer = state.withLock { s -> Task<Void, Never>? in
            if claim { s.claimed.insert(id) } else { s.claimed.remove(id) }
            return s.owned.removeValue(forKey: id)?.timer ?? nil
        }
        timer?.cancel()
    }

    private func inTurn<T: Sendable>(_ id: BluetoothAddress, _ body: () async throws(BLEError) -> T) async throws(BLEError) -> T {
        try await turns.run(id, refused: { refusal in
            refusal == .cancelled
                ? BLEError(.operationCancelled, "cancelled while waiting to connect or disconnect \(id)")
                : BLEError(.outOfSpace, "too many connects and disconnects of \(id) are waiting; retry later")
        }, body)
    }

    /// Under the lock: a timer that looks again when `id` may have become idle.
    private func schedule(_ id: BluetoothAddress, _ s: inout State) {
        s.owned[id]?.timer?.cancel()
        let due = s.owned[id]!.lastUse + idleAfter
        s.owned[id]!.timer = Task { [weak self] in
            do { try await Task.sleep(until: due) } catch { return }
            await self?.disconnectIfIdle(id)
        }
    }

    private func disconnectIfIdle(_ id: BluetoothAddress) async {
        _ = await turns.run(id) {
            let held = holds.snapshot().keys.contains { $0.device == id }
            let idle = state.withLock { s -> Bool in
                guard let owned = s.owned[id], s.busy[id] == nil else { return false }
                guard !held else {
                    // Streams or a kept hold hold its notifications: in use; look again later.
                    s.owned[id]!.lastUse = .now
                    schedule(id, &s)
                    return false
                }
                guard ContinuousClock.now - owned.lastUse >= idleAfter else { return false }
                s.owned[id] = nil
                return true
            }
            guard idle else { return }
            log("\(id): no requests for \(idleAfter): disconnecting (connect=auto)")
            do {
                _ = try await central.disconnect(id)
            } catch {
                log("\(id): idle disconnect failed: \(error)")
            }
        }
    }
}
