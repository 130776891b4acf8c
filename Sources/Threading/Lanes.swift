import Synchronization

/// Async work run one at a time per key, in the order it was handed in — from any thread,
/// without waiting (`SerialQueues` takes its place in line only once its caller's task runs,
/// so two tasks started one after the other may reach it in either order).
///
/// A key with work gets a task that runs the work one piece after the other and ends when its
/// lane is empty; an idle key keeps nothing. Bounded: at most `maxWaiting` pieces wait per key,
/// and a piece beyond is refused at once.
public final class Lanes<Key: Hashable & Sendable>: Sendable {
    /// A piece of work in a box: closures are moved through the lock, never called from it.
    private final class Work: Sendable {
        let run: @Sendable () async -> Void
        init(_ run: @escaping @Sendable () async -> Void) { self.run = run }
    }

    private let lanes = Mutex<[Key: [Work]]>([:])
    public let maxWaiting: Int

    public init(maxWaiting: Int = 64) {
        self.maxWaiting = maxWaiting
    }

    /// Runs `work` after the work handed in before it on `key`; false (and nothing done) when
    /// `maxWaiting` already wait there.
    @discardableResult
    public func submit(_ key: Key, _ work: @escaping @Sendable () async -> Void) -> Bool {
        let box = Work(work)
        // nil: refused; true: this lane was idle, so a task must start it.
        let start = lanes.withLock { lanes -> Bool? in
            guard let waiting = lanes[key] else {
                lanes[key] = []
                return true
            }
            guard waiting.count < maxWaiting else { return nil }
            lanes[key]!.append(box)
            return false
        }
        guard let start else { return false }
        if start { Task { await self.drain(key, first: box) } }
        return true
    }

    /// Pieces waiting on `key` (not the one running).
    public func waiting(_ key: Key) -> Int { lanes.withLock { $0[key]?.count ?? 0 } }

    /// Whether any work runs or waits on `key`.
    public func isBusy(_ key: Key) -> Bool { lanes.withLock { $0[key] != nil } }

    private func drain(_ key: Key, first: Work) async {
        var next: Work? = first
        while let work = next {
            await work.run()
            next = lanes.withLock { lanes -> Work? in
                guard let waiting = lanes[key], !waiting.isEmpty else {
                    lanes[key] = nil
                    return nil
                }
                return lanes[key]!.removeFirst()
            }
        }
    }
}
