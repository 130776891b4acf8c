import Synchronization

/// One request's state between the calls of MHD's access handler. MHD holds one retain through
/// `con_cls` (released when the request completes), the handler's task another while it runs.
final class RequestContext: Sendable {
    /// What the access handler does once the request is complete.
    enum Step {
        /// Start the handler with this body.
        case run(body: [UInt8])
        /// Answer `.bodyTooLarge`: the body went over the limit and was dropped.
        case bodyTooLarge
        /// Send the handler's response (after the resume).
        case send(Response)
        /// Resumed by `stop` before the handler answered.
        case shuttingDown
    }

    private enum Phase {
        case receiving
        case handling
        case answered(Response)
        /// Handed to MHD. Only a WebSocket's upgrade is kept, for the upgrade callback: a stream's
        /// connection lives for hours, and its context with it.
        case sent(WebSocketUpgrade?)
    }

    private struct State {
        var phase = Phase.receiving
        var body: [UInt8] = []
        var received = 0
        var overLimit = false
    }

    let connection: MHDHandle
    private let state = Mutex(State())

    init(connection: MHDHandle) {
        self.connection = connection
    }

    /// The declared length is over the limit: drop the body as it comes.
    func markOverLimit() {
        state.withLock { $0.overLimit = true }
    }

    /// Appends a piece of body, or drops it once over `limit`. False when the client sent more than
    /// we drain: close the connection.
    func receive(_ chunk: UnsafeRawBufferPointer, limit: Int) -> Bool {
        state.withLock { state in
            state.received += chunk.count
            if state.overLimit || state.received > limit {
                state.overLimit = true
                state.body = []
                return state.received - limit <= discardAllowance
            }
            state.body.append(contentsOf: chunk)
            return true
        }
    }

    func takeNextStep() -> Step {
        state.withLock { state in
            switch state.phase {
            case .receiving:
                state.phase = .handling
                if state.overLimit { return .bodyTooLarge }
                defer { state.body = [] }
                return .run(body: state.body)
            case .handling, .sent:
                return .shuttingDown
            case .answered(let response):
                if case .webSocket(let upgrade) = response.kind { state.phase = .sent(upgrade) } else { state.phase = .sent(nil) }
                return .send(response)
            }
        }
    }

    /// From the handler's task, before the connection is resumed.
    func answer(_ response: Response) {
        state.withLock { $0.phase = .answered(response) }
    }

    /// The WebSocket the handler answered with, for MHD's upgrade callback, which takes it.
    func takeWebSocketUpgrade() -> WebSocketUpgrade? {
        state.withLock { state in
            guard case .sent(let upgrade) = state.phase else { return nil }
            state.phase = .sent(nil)
            return upgrade
        }
    }
}
