import Synchronization
import Testing
import Threading

/// What ran, in order.
private final class Log: Sendable {
    private let entries = Mutex<[String]>([])
    func add(_ entry: String) { entries.withLock { $0.append(entry) } }
    var all: [String] { entries.withLock { $0 } }
}

@Suite struct LanesTests {
    /// Handed in from one thread without waiting, run in that order, one at a time per key,
    /// while another key goes on.
    @Test func inTheOrderHandedInOneAtATimePerKey() async {
        let lanes = Lanes<String>()
        let log = Log()
        let gate = Gate()
        lanes.submit("a") { log.add("a1 start"); await gate.wait(); log.add("a1 end") }
        for i in 2...20 { lanes.submit("a") { log.add("a\(i)") } }
        lanes.submit("b") { log.add("b1") }
        #expect(await eventually { log.all.contains("b1") }, "another key does not wait for a")
        #expect(!log.all.contains("a2"), "a2 waits for a1")
        #expect(lanes.waiting("a") == 19)
        gate.open()
        #expect(await eventually { !lanes.isBusy("a") })
        let a = log.all.filter { $0.hasPrefix("a") }
        #expect(a == ["a1 start", "a1 end"] + (2...20).map { "a\($0)" })
        #expect(!lanes.isBusy("b"), "an idle key keeps nothing")
    }

    @Test func beyondTheBoundIsRefusedAtOnce() async {
        let lanes = Lanes<Int>(maxWaiting: 2)
        let gate = Gate()
        let ran = Mutex(0)
        #expect(lanes.submit(1) { await gate.wait() })
        #expect(lanes.submit(1) { ran.withLock { $0 += 1 } })
        #expect(lanes.submit(1) { ran.withLock { $0 += 1 } })
        #expect(!lanes.submit(1) { ran.withLock { $0 += 100 } }, "two wait already")
        gate.open()
        #expect(await eventually { !lanes.isBusy(1) })
        #expect(ran.withLock { $0 } == 2)
        #expect(lanes.submit(1) {}, "room again once drained")
    }
}

/// Polls `condition` (yielding) until it holds or `timeout` passes.
private func eventually(within timeout: Duration = .seconds(5), _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while !condition() {
        if ContinuousClock.now > deadline { return false }
        try? await Task.sleep(for: .milliseconds(2))
    }
    return true
}
