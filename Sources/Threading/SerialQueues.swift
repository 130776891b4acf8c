import Synchronization

/// Async work run one at a time per key (or `width` at a time), in arrival order.
///
/// One line per key, behind one `Mutex`: a key's line counts the work running and keeps the
/// waiters in order, each a continuation resumed outside the lock. A finishing body hands its
/// slot straight to the first waiter (the slot never looks free, so a newcomer cannot barge in),
/// which keeps the invariant: a key has waiters only while all `width` slots run. A key with
/// nothing running or waiting has no line (rotating private addresses are many keys).
/// Bounded: at most `maxWaiting` wait per key, each at most `maxWait`.
public final class SerialQueues<Key: Hashable & Sendable>: Sendable {
    /// Why `run` did not run its body.
    public enum Refusal: Error, Sendable, Equatable {
        /// `waiting` were already waiting on the key (`maxWaiting`).
        case full(waiting: Int)
        /// The work waited `maxWait` and gave up.
        case timedOut(Duration)
        /// The waiting task was cancelled.
        case cancelled
    }

    private struct Waiter {
        let id: UInt64
        let continuation: CheckedContinuation<Refusal?, Never>
        /// Sleeps `maxWait`, then refuses the waiter; cancelled when the waiter is resolved otherwise.
        var timer: Task<Void, Never>?
    }

    private struct Line {
        var running = 0
        /// In arrival order. An array: removing from the front or the middle is O(`maxWaiting`).
        var waiters: [Waiter] = []
    }

    /// What an arrival is told: run now, refused, or wait (and, when it brought its waiter, waits).
    private enum Arrival { case run, refuse(Refusal), wait }

    private struct State {
        var lines: [Key: Line] = [:]
        var lastID: UInt64 = 0

        /// Takes a free slot on `key` or, with a waiter, queues it; without one it only says `.wait`.
        mutating func arrive(_ key: Key, width: Int, maxWaiting: Int, waiter: Waiter?) -> Arrival {
            // Scalars, not a copy of the line: a copy would make the append below copy the array.
            let running = lines[key]?.running ?? 0, waiting = lines[key]?.waiters.count ?? 0
            if running < width {
                lines[key, default: Line()].running += 1
                return .run
            }
            if waiting >= maxWaiting { return .refuse(.full(waiting: waiting)) }
            guard let waiter else { return .wait }
            // Checked under the lock: a cancellation before this point found no waiter to refuse.
            if Task.isCancelled { return .refuse(.cancelled) }
            lines[key]!.waiters.append(waiter)
            return .wait
        }

        /// Where the waiter `id` stands in `key`'s line; nil once it no longer waits.
        func place(_ key: Key, _ id: UInt64) -> Int? {
            lines[key]?.waiters.firstIndex { $0.id == id }
        }

        /// Removes the waiter `id` from `key`'s line, if it still waits.
        mutating func remove(_ key: Key, _ id: UInt64) -> Waiter? {
            place(key, id).map { lines[key]!.waiters.remove(at: $0) }
        }

        /// Hands a finished body's slot to the first waiter, or frees it (and the idle key).
        mutating func leave(_ key: Key) -> Waiter? {
            guard lines[key]!.waiters.isEmpty else { return lines[key]!.waiters.removeFirst() }
            lines[key]!.running -= 1
            if lines[key]!.running == 0 { lines[key] = nil }
            return nil
        }
    }

    private let state = Mutex(State())
    private let width: Int
    private let maxWaiting: Int
    private let maxWait: Duration?

    /// - Parameters:
    ///   - width: how many bodies run at once per key.
    ///   - maxWaiting: how many may wait per key; the next one is refused with `.full`.
    ///   - maxWait: how long one may wait before it is refused with `.timedOut`; nil: no limit.
    public init(width: Int = 1, maxWaiting: Int = 32, maxWait: Duration? = .seconds(60)) {
        precondition(width >= 1, "SerialQueues needs a width of at least 1")
        precondition(maxWaiting >= 0, "SerialQueues cannot have a negative maxWaiting")
        self.width = width
        self.maxWaiting = maxWaiting
        self.maxWait = maxWait
    }

    /// Runs `body` once the earlier work on `key` is done (fewer than `width` running). A waiter is
    /// refused at once with `.full` when `maxWaiting` already wait on that key, with `.timedOut` when it
    /// waited `maxWait`, with `.cancelled` when its task is cancelled while it waits (then it is removed
    /// from the line at once and later waiters move up). Work that has started is never interrupted by
    /// the queue. `refused` turns a refusal into the caller's own error type.
    ///
    /// `body` runs in the caller's isolation (`isolation`), so an actor can queue work on its own state.
    /// A free slot is taken without suspending: no task, no continuation, no sleep.
    public func run<T, Failure: Error>(
        _ key: Key, isolation: isolated (any Actor)? = #isolation,
        refused: (Refusal) -> Failure, _ body: () async throws(Failure) -> T
    ) async throws(Failure) -> T {
        switch state.withLock({ $0.arrive(key, width: width, maxWaiting: maxWaiting, waiter: nil) }) {
        case .run: break
        case .refuse(let refusal): throw refused(refusal)
        case .wait:
            if let refusal = await wait(key, isolation: isolation) { throw refused(refusal) }
        }
        defer { leave(key) }
        return try await body()
    }

    /// `run` for a body that cannot fail: nil when refused.
    public func run<T>(
        _ key: Key, isolation: isolated (any Actor)? = #isolation, _ body: () async -> T
    ) async -> T? {
        try? await run(key, isolation: isolation, refused: { $0 }) { () async throws(Refusal) -> T in await body() }
    }

    /// How many wait on `key` (for tests and logs).
    public func waiting(_ key: Key) -> Int {
        state.withLock { $0.lines[key]?.waiters.count ?? 0 }
    }

    /// Keys with work running or waiting: 0 when idle.
    public var keys: Int { state.withLock { $0.lines.count } }

    /// Waits for a slot on `key`: nil when admitted (the slot is then this caller's).
    private func wait(_ key: Key, isolation: isolated (any Actor)?) async -> Refusal? {
        let id = state.withLock { s -> UInt64 in
            s.lastID += 1
            return s.lastID
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Refusal?, Never>) in
                let waiter = Waiter(id: id, continuation: continuation)
                // Looked at again: the slot may have been freed, or the line filled, since the first look.
                switch state.withLock({ $0.arrive(key, width: width, maxWaiting: maxWaiting, waiter: waiter) }) {
                case .run: continuation.resume(returning: nil)
                case .refuse(let refusal): continuation.resume(returning: refusal)
                case .wait: if let maxWait { startTimer(key, id, maxWait) }
                }
            }
        } onCancel: {
            resolve(key, id, .cancelled)
        }
    }

    /// Refuses the waiter `id` after `maxWait`, unless it is resolved first. The timer is kept with
    /// its waiter, so that admitting or cancelling the waiter ends the sleep too.
    private func startTimer(_ key: Key, _ id: UInt64, _ maxWait: Duration) {
        let timer = Task {
            guard (try? await Task.sleep(for: maxWait)) != nil else { return }
            self.resolve(key, id, .timedOut(maxWait))
        }
        let kept = state.withLock { s -> Bool in
            guard let place = s.place(key, id) else { return false }
            s.lines[key]!.waiters[place].timer = timer
            return true
        }
        if !kept { timer.cancel() }  // resolved in between
    }

    /// Takes the waiter `id` out of its line and refuses it; nothing if it no longer waits.
    private func resolve(_ key: Key, _ id: UInt64, _ refusal: Refusal) {
        guard let waiter = state.withLock({ $0.remove(key, id) }) else { return }
        waiter.timer?.cancel()
        waiter.continuation.resume(returning: refusal)
    }

    private func leave(_ key: Key) {
        guard let next = state.withLock({ $0.leave(key) }) else { return }
        next.timer?.cancel()
        next.continuation.resume(returning: nil)
    }
}
