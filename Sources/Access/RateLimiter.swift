import Synchronization
import Threading

/// Requests per client address, as token buckets: each client may send `burst` requests at once
/// and `perSecond` on average. Bounded: past `maxClients` addresses, those whose buckets have
/// refilled (idle clients) are forgotten, then the longest idle.
public final class RateLimiter: Sendable {
    public let perSecond: Double
    public let burst: Double
    private let maxClients: Int
    private struct Bucket {
        var tokens: Double
        var updated: ContinuousClock.Instant
    }
    private let buckets = Mutex<[String: Bucket]>([:])

    public init(perSecond: Double, burst: Double, maxClients: Int = 16_384) {
        self.perSecond = perSecond
        self.burst = max(1, burst)
        self.maxClients = max(1, maxClients)
    }

    /// Takes one request from `client`'s bucket: nil when allowed, else the whole seconds after
    /// which one will be (at least 1).
    public func take(_ client: String, now: ContinuousClock.Instant = .now) -> Int? {
        buckets.withLock { buckets in
            var bucket = buckets[client].map { refilled($0, now) } ?? Bucket(tokens: burst, updated: now)
            defer {
                if buckets[client] == nil && buckets.count >= maxClients { prune(&buckets, now) }
                buckets[client] = bucket
            }
            guard bucket.tokens >= 1 else {
                return max(1, Int(((1 - bucket.tokens) / perSecond).rounded(.up)))
            }
            bucket.tokens -= 1
            return nil
        }
    }

    private func refilled(_ bucket: Bucket, _ now: ContinuousClock.Instant) -> Bucket {
        let elapsed = now - bucket.updated
        let seconds = elapsed.inSeconds
        return Bucket(tokens: min(burst, bucket.tokens + max(0, seconds) * perSecond), updated: now)
    }

    private func prune(_ buckets: inout [String: Bucket], _ now: ContinuousClock.Instant) {
        buckets = buckets.filter { refilled($0.value, now).tokens < burst }
        if buckets.count >= maxClients, let oldest = buckets.min(by: { $0.value.updated < $1.value.updated })?.key {
            buckets[oldest] = nil
        }
    }

    /// Addresses with a bucket now (for tests and metrics).
    public var clientCount: Int { buckets.withLock { $0.count } }
}
