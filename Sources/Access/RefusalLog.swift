import Synchronization

/// One log line per refusal, without letting a flood of refusals flood the log: for each kind of
/// refusal and client, the first is logged, then at most one line per `interval`, which says how
/// many were not logged since.
public final class RefusalLog: Sendable {
    private let log: @Sendable (String) -> Void
    private let interval: Duration
    private struct Entry {
        var logged: ContinuousClock.Instant
        var unlogged: Int
    }
    private let entries = Mutex<[String: Entry]>([:])
    private let counts = Mutex<[String: Int]>([:])
    private static let maxEntries = 4096

    public init(interval: Duration = .seconds(10), log: @escaping @Sendable (String) -> Void) {
        self.interval = interval
        self.log = log
    }

    /// Logs `message` ("429 ..."), or counts it when this kind and client were logged lately.
    public func refused(_ kind: String, client: String, _ message: @autoclosure () -> String,
                        now: ContinuousClock.Instant = .now) {
        counts.withLock { $0[kind, default: 0] += 1 }
        let key = kind + " " + client
        let unlogged: Int? = entries.withLock { entries in
            if let entry = entries[key], now - entry.logged < interval {
                entries[key]!.unlogged += 1
                return nil
            }
            if entries.count >= Self.maxEntries { entries = entries.filter { now - $0.value.logged < interval } }
            defer { entries[key] = Entry(logged: now, unlogged: 0) }
            return entries[key]?.unlogged ?? 0
        }
        guard let unlogged else { return }
        log("refused (\(kind)) \(client): \(message())" + (unlogged > 0 ? " (and \(unlogged) more since the last such line)" : ""))
    }
}

extension RefusalLog {
    /// Refusals so far by kind (`token`, `rate`, `streams`, ...), logged or not.
    public var countsByKind: [String: Int] { counts.withLock { $0 } }
}
