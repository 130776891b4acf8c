import Synchronization

/// A counting semaphore for tasks: `acquire` suspends (never blocks a thread) while no
/// permit is free; waiters are served in order.
final class AsyncSemaphore: Sendable {
    private struct State {
        var permits: Int
        var waiters: [CheckedContinuation<Void, Never>] = []
    }
    private let state: Mutex<State>

    init(_ permits: Int) { state = Mutex(State(permits: permits)) }

    func acquire() async {
        let acquired = state.withLock { s -> Bool in
            guard s.permits > 0 else { return false }
            s.permits -= 1
            return true
        }
        if acquired { return }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let resumeNow = state.withLock { s -> Bool in
                if s.permits > 0 { s.permits -= 1; return true }
                s.waiters.append(continuation)
                return false
            }
            if resumeNow { continuation.resume() }
        }
    }

    func release() {
        let next = state.withLock { s -> CheckedContinuation<Void, Never>? in
            if s.waiters.isEmpty { s.permits += 1; return nil }
            return s.waiters.removeFirst()
        }
        next?.resume()
    }
}
