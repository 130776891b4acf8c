import Synchronization

/// The simulator's running tasks (timers, delayed replies), so that `Simulator.stop()` can cancel
/// them all from any thread. A finished task removes itself, so the bag holds only live work.
final class TaskBag: Sendable {
    private struct State {
        var next = 0
        var tasks: [Int: Task<Void, Never>] = [:]
        /// Ids of tasks that finished before they were stored (they run as soon as they are made).
        var finishedEarly: Set<Int> = []
        var closed = false
    }
    private let state = Mutex(State())

    /// Runs `body` in a new task unless the bag is closed.
    func spawn(_ body: @escaping @Sendable () async -> Void) {
        guard let id = state.withLock({ s -> Int? in
            guard !s.closed else { return nil }
            s.next += 1
            return s.next
        }) else { return }
        let task = Task {
            await body()
            self.finished(id)
        }
        let cancel = state.withLock { s -> Bool in
            if s.closed { return true }
            if s.finishedEarly.remove(id) == nil { s.tasks[id] = task }
            return false
        }
        if cancel { task.cancel() }
    }

    /// Runs `body` after `milliseconds` (at once for 0), unless cancelled first.
    func after(milliseconds: Int, _ body: @escaping @Sendable () async -> Void) {
        spawn {
            if milliseconds > 0 {
                do { try await Task.sleep(for: .milliseconds(milliseconds)) } catch { return }
            }
            await body()
        }
    }

    /// Runs `body` every `milliseconds` until it answers false or the bag is closed.
    func every(milliseconds: Int, _ body: @escaping @Sendable () async -> Bool) {
        let interval = Duration.milliseconds(max(milliseconds, 1))
        spawn {
            // Ticks on a schedule, so that a 1 ms notifier gives about 1 000 a second; after a
            // stall it starts afresh rather than catching up in a burst.
            var next = ContinuousClock.now
            while true {
                next += interval
                if next < .now - interval { next = .now }
                do { try await Task.sleep(until: next, clock: .continuous) } catch { return }
                guard await body() else { return }
            }
        }
    }

    private func finished(_ id: Int) {
        state.withLock { s in
            if s.tasks.removeValue(forKey: id) == nil, !s.closed { s.finishedEarly.insert(id) }
        }
    }

    /// Cancels every task and refuses new ones.
    func close() {
        let tasks = state.withLock { s -> [Task<Void, Never>] in
            s.closed = true
            defer { s.tasks.removeAll(); s.finishedEarly.removeAll() }
            return Array(s.tasks.values)
        }
        for task in tasks { task.cancel() }
    }

    var count: Int { state.withLock { $0.tasks.count } }
}
