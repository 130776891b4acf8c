import DBus
import Synchronization

/// Tasks waiting for a device's properties to reach a state (ServicesResolved, Connected=false).
/// The tree's observer calls `check` after each change; a waiter's condition answers true
/// (reached), false (can no longer be reached) or nil (keep waiting).
final class Waiters: Sendable {
    typealias Condition = @Sendable ([String: Value]?) -> Bool?
    private struct Waiter {
        let path: ObjectPath
        let condition: Condition
        let continuation: CheckedContinuation<Bool?, Never>
    }
    private let state = Mutex<(next: Int, waiters: [Int: Waiter])>((0, [:]))

    /// Waits until `condition` on the properties at `path` is decided, or `timeout` passes (nil).
    func wait(for path: ObjectPath, timeout: Duration, current: @escaping @Sendable (ObjectPath) -> [String: Value]?,
              _ condition: @escaping Condition) async -> Bool? {
        if let decided = condition(current(path)) { return decided }
        return await withCheckedContinuation { (continuation: CheckedContinuation<Bool?, Never>) in
            let id = state.withLock { s -> Int in
                s.next += 1
                s.waiters[s.next] = Waiter(path: path, condition: condition, continuation: continuation)
                return s.next
            }
            // A change between the first look and the registration must not be missed.
            if let decided = condition(current(path)) { resolve(id, decided) }
            Task { [weak self] in
                try? await Task.sleep(for: timeout)
                self?.resolve(id, nil)
            }
        }
    }

    /// Re-evaluates the waiters on `path` (all of them when nil).
    func check(path: ObjectPath? = nil, _ current: (ObjectPath) -> [String: Value]?) {
        let candidates = state.withLock { s in s.waiters.filter { path == nil || $0.value.path == path } }
        for (id, waiter) in candidates {
            if let decided = waiter.condition(current(waiter.path)) { resolve(id, decided) }
        }
    }

    private func resolve(_ id: Int, _ result: Bool?) {
        state.withLock { $0.waiters.removeValue(forKey: id) }?.continuation.resume(returning: result)
    }
}
