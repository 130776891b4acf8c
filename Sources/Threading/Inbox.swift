import Dispatch
import Synchronization

/// What other threads leave for a thread of its own, and the wake-up that thread waits for: the
/// event hub's fan-out and the ESPHome proxy's advertiser each read one.
///
/// Posting never waits for the thread. A post that asks to wake it does so once: until the
/// thread next takes its inbox, further posts add to what it will find, so a burst of posts costs
/// one wake-up.
///
/// `post` and `take` are inlinable, so that callers in other modules get them specialised (the
/// generic ones looked up type metadata at every call).
public final class Inbox<Contents: Sendable>: Sendable {
    @usableFromInline struct State {
        @usableFromInline var contents: Contents
        /// Woken, and the inbox not taken since.
        @usableFromInline var woken = false

        init(contents: Contents) { self.contents = contents }
    }

    @usableFromInline let state: Mutex<State>
    @usableFromInline let wake = DispatchSemaphore(value: 0)

    public init(_ contents: Contents) {
        state = Mutex(State(contents: contents))
    }

    /// Changes the contents (bounded as the caller bounds them); wakes the thread when `change`
    /// returns true, unless it is woken already.
    @inlinable
    public func post(_ change: (inout Contents) -> Bool) {
        let signal = state.withLock { s -> Bool in
            guard change(&s.contents), !s.woken else { return false }
            s.woken = true
            return true
        }
        if signal { wake.signal() }
    }

    /// On the thread: `body` takes what it wants of the contents; what is posted after asks
    /// for a wake-up again.
    @inlinable
    public func take<T>(_ body: (inout Contents) -> T) -> T {
        state.withLock { s in
            s.woken = false
            return body(&s.contents)
        }
    }

    /// On the thread: waits for a wake-up, or until `deadline` (nil: none).
    public func wait(until deadline: ContinuousClock.Instant? = nil) {
        guard let deadline else { return wake.wait() }
        let (seconds, attoseconds) = (deadline - .now).components
        let nanoseconds = max(0, seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
        _ = wake.wait(timeout: .now() + .nanoseconds(Int(clamping: nanoseconds)))
    }
}
