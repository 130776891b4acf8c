import GatewayCore
import BLE
import HTTPServer
import Synchronization

/// Event streams (SSE and WebSocket) open at once, in all (`--max-streams`: past it 503) and from
/// one client address (`--max-client-streams`: past it 429), each with `Retry-After`, while the
/// server keeps connections for other requests.
final class StreamLimit: Sendable {
    let limit: Int
    let perClient: Int
    private let state = Mutex<(open: Int, byClient: [String: Int])>((0, [:]))

    init(limit: Int, perClient: Int = .max) {
        self.limit = max(0, limit)
        self.perClient = max(0, perClient)
    }

    /// A place for one more stream of `client`, or the answer that refuses it.
    func acquire(_ client: String) -> Result<StreamPlace, Refusal> {
        let refusal: Refusal? = state.withLock { state in
            if state.open >= limit { return .total(limit) }
            let mine = state.byClient[client] ?? 0
            if mine >= perClient { return .client(perClient) }
            state.open += 1
            state.byClient[client] = mine + 1
            return nil
        }
        if let refusal { return .failure(refusal) }
        return .success(StreamPlace(self, client))
    }

    fileprivate func release(_ client: String) {
        state.withLock { state in
            state.open -= 1
            let mine = (state.byClient[client] ?? 1) - 1
            state.byClient[client] = mine > 0 ? mine : nil
        }
    }

    var count: Int { state.withLock { $0.open } }

    enum Refusal: Error {
        case total(Int)
        case client(Int)

        /// The answer to the stream's request.
        func response(_ layout: JSON.Layout) -> Response {
            let (status, message) = switch self {
            case .total(let limit):
                (503, "\(limit) event streams are open, as many as gattway serves (--max-streams); retry later")
            case .client(let limit):
                (429, "this address has \(limit) event streams open, as many as one client may (--max-client-streams); retry later")
            }
            var response = Response.error(BLEError(.connectionLimitReached, message), status: status, layout: layout)
            response.headers.append((name: "Retry-After", value: "5"))
            return response
        }
    }
}

/// One stream's place in the `StreamLimit`, given back once: when the stream ends, or when
/// its response is dropped without ever being sent.
final class StreamPlace: Sendable {
    private let limit: StreamLimit
    private let client: String
    private let held = Atomic<Bool>(true)

    fileprivate init(_ limit: StreamLimit, _ client: String) {
        self.limit = limit
        self.client = client
    }

    func release() {
        if held.exchange(false, ordering: .acquiringAndReleasing) { limit.release(client) }
    }

    deinit { release() }
}
