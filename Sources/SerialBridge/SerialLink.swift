import BLE
import GatewayCore
import Synchronization

/// A device's UART as a serial port, shared by every client of it (WebSocket readers and
/// writer, TCP clients): what the device notifies on `tx` goes to each reader as it comes; what
/// the one writer sends is written to `rx` in pieces of at most MTU − 3 bytes, in order, with
/// flow control.
///
/// Flow control: a write with response is answered by the device only once it took the bytes,
/// which is the one end-to-end backpressure ATT gives; writes without response are faster but a
/// device whose FIFO is full drops them, so they are paced at `rate` bytes per second (the rate
/// its UART drains). `auto` writes with response where `rx` allows it.
///
/// The `tx` notifications are held through the core's holds (started once, restored after every
/// reconnection), and taken from the hub like any client's. Each reader takes what it can: bytes
/// it cannot take are dropped, counted and logged, never silently.
package final class SerialLink: Sendable {
    package enum WriteMode: String, Sendable, CaseIterable {
        case auto, response, command
    }

    /// How a client writes.
    package struct WriteOptions: Sendable, Equatable {
        package var mode: WriteMode
        /// Bytes per second for writes without response (nil: as fast as BlueZ takes them).
        package var rate: Int?

        package init(mode: WriteMode = .auto, rate: Int? = nil) {
            self.mode = mode
            self.rate = rate
        }

        /// From text (a query, an option): `mode` auto, response or command; `rate` bytes per second.
        package init(mode: String?, rate: String?) throws(BLEError) {
            self.init()
            if let mode {
                guard let parsed = WriteMode(rawValue: mode) else {
                    throw BLEError(.invalidParameters, "mode must be auto, response or command, not \"\(mode)\"")
                }
                self.mode = parsed
            }
            if let rate {
                guard let n = Int(rate), (1...100_000_000).contains(n) else {
                    throw BLEError(.invalidParameters, "rate must be bytes per second, from 1 to 100000000, not \"\(rate)\"")
                }
                self.rate = n
            }
        }
    }

    /// Totals over the link's life (bytes).
    package struct Counters: Sendable, Equatable {
        package init(received: Int = 0, sent: Int = 0, dropped: Int = 0, unwritten: Int = 0) {
            (self.received, self.sent, self.dropped, self.unwritten) = (received, sent, dropped, unwritten)
        }

        package var received = 0
        package var sent = 0
        /// Received bytes a reader could not take.
        package var dropped = 0
        /// Bytes a writer sent that could not be written (the write failed, the link stayed down).
        package var unwritten = 0

        package static func + (a: Counters, b: Counters) -> Counters {
            Counters(received: a.received + b.received, sent: a.sent + b.sent, dropped: a.dropped + b.dropped,
                     unwritten: a.unwritten + b.unwritten)
        }
    }

    package let device: BluetoothAddress
    package let resolved: SerialProfile.Resolved
    private let gateway: Gateway
    private let log: @Sendable (String) -> Void
    private let client: StreamClient
    private let hold: NotificationHolds.Key
    private let policy: ReconnectPolicy

    /// What happens to a client when the device's link goes down.
    package enum LinkLoss: String, Sendable, CaseIterable {
        /// The client is ended (a WebSocket closes with 4001, a TCP client is disconnected).
        case close
        /// The client stays; the link is connected again (with the reconnect policy's delays) and
        /// `tx` held again; writes wait for it (at most `SerialLink.holdWriteLimit`).
        case hold
    }

    /// The link, as a client hears of it.
    package enum LinkChange: Sendable, Equatable {
        /// The device disconnected.
        case lost(BLEError?)
        /// Connected again, with `tx` notifying again.
        case back
    }

    /// A reader takes bytes (false: it had no room, they are dropped) and hears of the link.
    package struct Reader: Sendable {
        package let bytes: @Sendable ([UInt8]) -> Bool
        package let link: @Sendable (LinkChange) -> Void

        package init(bytes: @escaping @Sendable ([UInt8]) -> Bool, link: @escaping @Sendable (LinkChange) -> Void) {
            self.bytes = bytes
            self.link = link
        }
    }

    /// How long a write of a holding client waits for the link to come back.
    package static let holdWriteLimit = Duration.seconds(30)

    private struct State {
        var readers: [Int: Reader] = [:]
        var writer: Int?
        /// Clients that hold through a link loss.
        var holding: Set<Int> = []
        var next = 0
        /// Connected, with `tx` notifying (false from a disconnection until the hold is restored).
        var up = true
        /// Writes waiting for the link to come back.
        var waiting: [Int: CheckedContinuation<Bool, Never>] = [:]
        var reconnecting: Task<Void, Never>?
        /// The longest piece `rx` took, once it refused a longer one (nil: MTU − 3).
        var pieceLimit: Int?
        var counters = Counters()
        /// Dropped bytes not logged yet (logged at most once a second).
        var unlogged = 0
        var loggedAt: ContinuousClock.Instant?
    }
    private let state = Mutex(State())

    init(device: BluetoothAddress, resolved: SerialProfile.Resolved, gateway: Gateway, policy: ReconnectPolicy,
         log: @escaping @Sendable (String) -> Void) {
        self.device = device
        self.resolved = resolved
        self.gateway = gateway
        self.policy = policy
        self.log = log
        hold = NotificationHolds.Key(device: device, characteristic: resolved.tx.handle)
        let box = WeakLink()
        let tx = resolved.tx.handle
        client = StreamClient(id: gateway.hub.newClientID(), transport: .sink(EventSink { event, _, _ in
            guard let event, let link = box.link else { return }
            switch event.event {
            case .central(.value(let update)): link.received(update.value)
            case .central(.connection(_, .disconnected, let error)): link.lost(error)
            case .central(.resubscribed(_, tx, _, nil)): link.back()
            default: break
            }
        }))
        box.link = self
        client.select(Selection(types: [EventTypes(.notification), EventTypes(.hold)], device: device,
                                characteristic: .handle(resolved.tx.handle)), as: "tx")
        client.select(Selection(types: [EventTypes(.connection)], device: device), as: "link")
    }

    /// Starts following `tx` (the hold, then the hub).
    func start() async throws(BLEError) {
        try await gateway.holds.acquire(hold)
        gateway.hub.add(client)
    }

    /// Stops following `tx` (the last client left).
    func stop() async {
        client.close()
        gateway.hub.remove(client)
        let (waiting, reconnecting) = state.withLock { s in
            defer { s.waiting = [:]; s.reconnecting = nil }
            return (Array(s.waiting.values), s.reconnecting)
        }
        reconnecting?.cancel()
        for waiter in waiting { waiter.resume(returning: false) }
        await gateway.holds.release(hold)
    }

    // MARK: - Clients

    /// Adds a reader; with `writer`, also the writer, unless another client is (then nil).
    func attach(_ reader: Reader, writer: Bool, onLinkLoss: LinkLoss) -> Int? {
        state.withLock { s -> Int? in
            if writer && s.writer != nil { return nil }
            s.next += 1
            s.readers[s.next] = reader
            if writer { s.writer = s.next }
            if onLinkLoss == .hold { s.holding.insert(s.next) }
            return s.next
        }
    }

    /// Removes a client; true when it was the last.
    func detach(_ id: Int) -> Bool {
        state.withLock { s in
            s.readers[id] = nil
            s.holding.remove(id)
            if s.writer == id { s.writer = nil }
            return s.readers.isEmpty
        }
    }

    package var counters: Counters { state.withLock { $0.counters } }
    package var holdingClients: Int { state.withLock { $0.holding.count } }
    package var hasWriter: Bool { state.withLock { $0.writer != nil } }
    package var clients: Int { state.withLock { $0.readers.count } }

    // MARK: - Reading

    private func received(_ bytes: [UInt8]) {
        let readers = state.withLock { s -> [Reader] in
            s.counters.received += bytes.count
            return Array(s.readers.values)
        }
        var lost = 0
        for reader in readers where !reader.bytes(bytes) { lost += bytes.count }
        guard lost > 0 else { return }
        let report = state.withLock { s -> Int? in
            s.counters.dropped += lost
            s.unlogged += lost
            let now = ContinuousClock.now
            guard s.loggedAt.map({ now - $0 >= .seconds(1) }) ?? true else { return nil }
            defer { (s.unlogged, s.loggedAt) = (0, now) }
            return s.unlogged
        }
        if let report { log("\(device): serial: \(report) received byte(s) dropped: a reader read too slowly") }
    }

    // MARK: - The link

    package var isUp: Bool { state.withLock { $0.up } }

    private func lost(_ error: BLEError?) {
        let (readers, reconnect) = state.withLock { s -> ([Reader], Bool) in
            s.up = false
            let reconnect = !s.holding.isEmpty && s.reconnecting == nil
            if reconnect { s.reconnecting = Task { await self.reconnect() } }
            return (Array(s.readers.values), reconnect)
        }
        log("\(device): serial port: link lost\(error.map { " (\($0.name): \($0.message))" } ?? "")"
            + (reconnect ? "; its holding clients stay, connecting again" : ""))
        for reader in readers { reader.link(.lost(error)) }
    }

    private func back() {
        let (readers, waiting) = state.withLock { s -> ([Reader], [CheckedContinuation<Bool, Never>]) in
            guard !s.up else { return ([], []) }
            s.up = true
            s.reconnecting = nil
            defer { s.waiting = [:] }
            return (Array(s.readers.values), Array(s.waiting.values))
        }
        guard !readers.isEmpty || !waiting.isEmpty else { return }
        log("\(device): serial port: link back, tx notifying again")
        for waiter in waiting { waiter.resume(returning: true) }
        for reader in readers { reader.link(.back) }
    }

    /// While holding clients remain and the link is down: connect again once the device is heard
    /// advertising, with the policy's delays between attempts (a device the central keeps
    /// connected is left to the central). As the central's own attempts: the second comes as soon
    /// as a first would (a link that dropped while it was made, or a stale link below BlueZ,
    /// which two failed connects in a row have the central reset).
    private func reconnect() async {
        var attempt = 0
        while !Task.isCancelled, state.withLock({ !$0.up && !$0.holding.isEmpty }) {
            attempt += 1
            do { try await Task.sleep(for: .seconds(policy.delay(attempt: attempt <= 2 ? 1 : attempt - 1))) } catch { return }
            guard state.withLock({ !$0.up && !$0.holding.isEmpty }) else { return }
            if let info = try? await gateway.central.peripheral(device), info.reconnect != nil || info.state == .connected {
                continue
            }
            do throws(BLEError) {
                try await gateway.autoConnections.connectIfNeeded(device, whenHeard: Self.listenLimit)
            } catch {
                log("\(device): serial port: connecting again failed (attempt \(attempt)): \(error.name): \(error.message)")
            }
        }
    }

    /// How long an attempt listens for the device before it counts as failed (the next listens again).
    static let listenLimit = Duration.seconds(30)

    /// Waits until the link is back, at most `limit`; false if it is not.
    private func linkBack(within limit: Duration) async -> Bool {
        let key = state.withLock { s -> Int? in
            guard !s.up else { return nil }
            s.next += 1
            return s.next
        }
        guard let key else { return true }
        let timer = Task {
            try? await Task.sleep(for: limit)
            self.state.withLock { $0.waiting.removeValue(forKey: key) }?.resume(returning: false)
        }
        defer { timer.cancel() }
        return await withCheckedContinuation { continuation in
            let ready = state.withLock { s -> Bool in
                guard !s.up else { return true }
                s.waiting[key] = continuation
                return false
            }
            if ready { continuation.resume(returning: true) }
        }
    }

    // MARK: - Writing

    /// Writes `bytes` to `rx`, after the client's earlier writes, in pieces of at most MTU − 3.
    /// A holding client's write that meets a link going down waits for it to come back (at most
    /// `holdWriteLimit`) and goes on where it was; bytes that could not be written are counted.
    func write(_ bytes: [UInt8], from client: Int, options: WriteOptions) async throws(BLEError) {
        guard let holds = state.withLock({ s in s.writer == client ? s.holding.contains(client) : nil }) else {
            throw BLEError(.invalidParameters, "this client reads only: the serial port of \(device) has one writer at a time")
        }
        let type = try writeType(options.mode)
        var pacer = Pacer(rate: type == .withoutResponse ? options.rate : nil)
        var offset = 0
        var piece = await pieceLength()
        while offset < bytes.count {
            let end = min(bytes.count, offset + piece)
            await pacer.wait(for: end - offset)
            do throws(BLEError) {
                if holds, !isUp, !(await linkBack(within: Self.holdWriteLimit)) {
                    throw BLEError(.notConnected, "\(device) did not come back within \(Self.holdWriteLimit)")
                }
                _ = try await gateway.central.writeValue(device, .handle(resolved.rx.handle), Array(bytes[offset..<end]),
                                                         type: type, fragment: false)
            } catch {
                let linkDown = error.code == .cb(.notConnected) || error.code == .cb(.peripheralDisconnected)
                if error.code == .att(.invalidAttributeValueLength), end - offset > Self.smallestPiece {
                    piece = learnPieceLimit(refused: end - offset)
                    continue
                }
                if holds, linkDown, await linkBack(within: Self.holdWriteLimit) {
                    piece = await pieceLength()
                    continue
                }
                noteUnwritten(bytes.count - offset, error)
                throw error
            }
            state.withLock { $0.counters.sent += end - offset }
            offset = end
        }
    }

    /// MTU − 3: the most one write carries; less once the device refused such a length.
    private func pieceLength() async -> Int {
        let mtu = (try? await gateway.central.peripheral(device).mtu) ?? nil
        let limit = state.withLock { $0.pieceLimit } ?? .max
        return min(limit, WriteType.withoutResponse.maximumWriteValueLength(mtu: mtu))
    }

    /// What every link takes in one write (ATT's default MTU, 23, less 3).
    static let smallestPiece = 20

    /// `rx` refused a piece of `refused` bytes as too long (seen on real BlueZ: an MTU of 517
    /// exchanged, a write of 511 refused `Invalid Length`): pieces of three quarters of that from
    /// now on, logged once per step.
    private func learnPieceLimit(refused: Int) -> Int {
        let limit = max(Self.smallestPiece, refused * 3 / 4)
        state.withLock { $0.pieceLimit = limit }
        log("\(device): serial: rx refused \(refused) bytes in one write as too long: pieces of \(limit) from now on")
        return limit
    }

    private func noteUnwritten(_ count: Int, _ error: BLEError) {
        state.withLock { $0.counters.unwritten += count }
        log("\(device): serial: \(count) byte(s) not written: \(error.name): \(error.message)")
    }

    /// What a mode means for this `rx`.
    package func writeType(_ mode: WriteMode) throws(BLEError) -> WriteType {
        let properties = resolved.rx.properties
        switch mode {
        case .auto: return properties.contains(.write) ? .withResponse : .withoutResponse
        case .response:
            guard properties.contains(.write) else {
                throw BLEError(att: .writeNotPermitted, "\(resolved.rx.uuid) takes writes without response only: use mode command (with a rate)")
            }
            return .withResponse
        case .command:
            guard properties.contains(.writeWithoutResponse) else {
                throw BLEError(att: .writeNotPermitted, "\(resolved.rx.uuid) takes writes with response only: use mode response")
            }
            return .withoutResponse
        }
    }
}

/// Spaces writes so that at most `rate` bytes go out per second (none: no waiting).
struct Pacer {
    let rate: Int?
    private var started: ContinuousClock.Instant?
    private var sent = 0

    init(rate: Int?) { self.rate = rate }

    mutating func wait(for count: Int) async {
        guard let rate, rate > 0 else { return }
        let start = started ?? .now
        started = start
        // The bytes already sent may leave only at `rate`: wait until their time has come.
        let due = start + .milliseconds(sent * 1000 / rate)
        if due > .now { try? await Task.sleep(until: due) }
        sent += count
    }
}

/// The link, as the hub's sink sees it (it is made before the link exists).
private final class WeakLink: @unchecked Sendable {
    // Set once, before the sink is added to the hub; read on the hub's thread after that.
    weak var link: SerialLink?
}
