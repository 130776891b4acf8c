import BLE
import ESPHomeAPI
import Synchronization
import Threading

/// Every advertisement the central reports, to each API client that subscribed, as the API's
/// raw advertisements in batches — as ESPHome sends them: up to `batchSize` a message, none
/// waiting longer than `batchDelay` (a full batch goes at once).
///
/// The central's thread only makes the advertisement's entry (its AD bytes as they came, or
/// rebuilt from BlueZ's properties) and appends it to the inbox (bounded: past `inboxLimit` the
/// oldest is dropped and counted), waking the advertiser's thread when a batch starts or
/// fills. That thread makes each batch's message once and hands it
/// to every subscriber whose connection has room: a client with more than `backlog` bytes
/// waiting to be written gets no advertisements until it has read them (those are counted, and
/// logged at most every `logInterval`), so a slow client loses advertisements, not its
/// connection, and never holds up the others.
final class Advertiser: Sendable {
    static let batchSize = 16
    static let batchDelay = Duration.milliseconds(100)
    static let inboxLimit = 8192
    static let backlog = 256 * 1024
    static let logInterval = Duration.seconds(10)

    /// The API's message for an advertisement, made on the central's thread (a few fields; a
    /// whole device's snapshot would be copied twice more on its way).
    private struct Report: Sendable {
        let message: BluetoothLERawAdvertisement
        let at: ContinuousClock.Instant
    }

    private struct Reports: Sendable {
        var reports: [Report] = []
        /// Dropped because the inbox was full, not yet logged.
        var overflow = 0
        var stopped = false
    }

    private struct Subscriber {
        let client: APIClient
        /// Advertisements it did not get for want of room: since the last log line, and in all.
        var unlogged = 0
        var dropped = 0
        var lastLog: ContinuousClock.Instant?
    }

    private let inbox = Inbox(Reports())
    private let subscribers = Mutex<[UInt64: Subscriber]>([:])
    private let overflowTotal = Atomic<Int>(0)
    private let log: @Sendable (String) -> Void

    init(log: @escaping @Sendable (String) -> Void) {
        self.log = log
        Threads.start(name: "esphome-adverts") { [self] in run() }
    }

    /// Ends the thread.
    func stop() {
        inbox.post { i in
            i.stopped = true
            return true
        }
    }

    func subscribe(_ client: APIClient) {
        subscribers.withLock { $0[client.id] = $0[client.id] ?? Subscriber(client: client) }
    }

    /// Whether it was subscribed.
    @discardableResult
    func unsubscribe(_ client: APIClient) -> Bool {
        subscribers.withLock { $0.removeValue(forKey: client.id) != nil }
    }

    var subscriberCount: Int { subscribers.withLock { $0.count } }

    /// Sends `message` to every subscriber now (the scanner's state), outside the batches.
    func broadcast(_ message: some APIMessage) {
        for client in subscribers.withLock({ $0.values.map(\.client) }) { client.send(message) }
    }

    /// Advertisements `client` did not get for want of room.
    func dropped(for client: APIClient) -> Int { subscribers.withLock { $0[client.id]?.dropped ?? 0 } }

    /// Advertisements dropped because the thread fell behind the central.
    var overflowed: Int { overflowTotal.load(ordering: .relaxed) }

    /// A report from the central (its thread): queued, never waited on.
    func heard(_ info: PeripheralInfo) {
        inbox.post { i in
            if i.reports.count >= Self.inboxLimit {
                i.reports.removeFirst()
                i.overflow += 1
            }
            i.reports.append(Report(message: RawAdvertisement.message(info), at: .now))
            // A batch starts (the thread sets its deadline) or fills (the thread sends it).
            return i.reports.count == 1 || i.reports.count % Self.batchSize == 0
        }
    }

    // MARK: The thread

    private func run() {
        while true {
            let (taken, deadline, overflow, stopped) = inbox.take { i -> ([Report], ContinuousClock.Instant?, Int, Bool) in
                let overflow = i.overflow
                i.overflow = 0
                if i.stopped { return ([], nil, overflow, true) }
                let count = i.reports.count
                if count >= Self.batchSize {
                    let whole = count - count % Self.batchSize
                    defer { i.reports.removeFirst(whole) }
                    return (Array(i.reports[..<whole]), nil, overflow, false)
                }
                guard let first = i.reports.first else { return ([], nil, overflow, false) }
                let due = first.at + Self.batchDelay
                if ContinuousClock.now >= due {
                    defer { i.reports.removeAll(keepingCapacity: true) }
                    return (i.reports, nil, overflow, false)
                }
                return ([], due, overflow, false)
            }
            if overflow > 0 {
                overflowTotal.add(overflow, ordering: .relaxed)
                log("advertisements: \(overflow) dropped: they came faster than they could be sent")
            }
            if stopped { return }
            if taken.isEmpty {
                inbox.wait(until: deadline)
                continue
            }
            var start = taken.startIndex
            while start < taken.endIndex {
                let end = min(start + Self.batchSize, taken.endIndex)
                let batch = taken[start..<end].map(\.message)
                if !batch.isEmpty { send(BluetoothLERawAdvertisementsResponse(advertisements: batch)) }
                start = end
            }
        }
    }

    private func send(_ message: BluetoothLERawAdvertisementsResponse) {
        let now = ContinuousClock.now
        var lines: [String] = []
        let clients = subscribers.withLock { s -> [APIClient] in
            var ready: [APIClient] = []
            for (id, var subscriber) in s {
                if subscriber.client.buffered <= Self.backlog {
                    ready.append(subscriber.client)
                    continue
                }
                subscriber.unlogged += message.advertisements.count
                subscriber.dropped += message.advertisements.count
                if subscriber.lastLog.map({ now - $0 >= Self.logInterval }) ?? true {
                    lines.append("\(subscriber.client.peer): reads too slowly: \(subscriber.unlogged) advertisements dropped "
                                 + "(\(subscriber.dropped) since it subscribed)")
                    subscriber.unlogged = 0
                    subscriber.lastLog = now
                }
                s[id] = subscriber
            }
            return ready
        }
        for client in clients { client.send(message) }
        for line in lines { log(line) }
    }
}
