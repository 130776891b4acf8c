import BLE
import HTTPServer
import Synchronization

/// Event streams (SSE and WebSocket) open at once, against `--max-streams`: past it a new stream
/// is answered 503 with `Retry-After`, while the server keeps connections for other requests.
final class StreamLimit: Sendable {
    let limit: Int
    private let open = Atomic<Int>(0)

    init(limit: Int) { self.limit = max(0, limit) }

    /// Takes a place; false when all are taken.
    func acquire() -> Bool {
        var current = open.load(ordering: .relaxed)
        while current < limit {
            let (exchanged, original) = open.compareExchange(expected: current, desired: current + 1, ordering: .acquiringAndReleasing)
            if exchanged { return true }
            current = original
        }
        return false
    }

    func release() { open.subtract(1, ordering: .acquiringAndReleasing) }

    var count: Int { open.load(ordering: .relaxed) }

    /// The answer when every place is taken.
    func refusal(_ layout: JSON.Layout) -> Response {
        var response = Response.error(BLEError(.connectionLimitReached,
            "\(limit) event streams are open, as many as gattway serves (--max-streams); retry later"), status: 503, layout: layout)
        response.headers.append((name: "Retry-After", value: "5"))
        return response
    }
}

/// One stream's place in the `StreamLimit`, given back once: when the stream ends, or when
/// its response is dropped without ever being sent.
final class StreamPlace: Sendable {
    private let limit: StreamLimit
    private let held = Atomic<Bool>(true)

    init(_ limit: StreamLimit) { self.limit = limit }

    func release() {
        if held.exchange(false, ordering: .acquiringAndReleasing) { limit.release() }
    }

    deinit { release() }
}
