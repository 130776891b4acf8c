import GatewayCore
import HTTPServer
import Synchronization

/// One encoded answer kept while its source's version stays the same (`Central.peripheralsVersion`),
/// so that polling clients (dashboards, home automation) cost a lookup, not an encoding.
final class EncodedCache: Sendable {
    private let slot = Mutex<(version: UInt64, body: [UInt8])?>(nil)

    /// The body for `version`: the kept one, or `make()`'s, kept for next time. With no version,
    /// always `make()`.
    func body(version: UInt64?, _ make: () async throws -> [UInt8]) async rethrows -> [UInt8] {
        guard let version else { return try await make() }
        if let kept = slot.withLock({ $0 }), kept.version == version { return kept.body }
        let body = try await make()
        slot.withLock { $0 = (version, body) }
        return body
    }
}
