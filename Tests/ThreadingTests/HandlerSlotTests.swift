import Synchronization
import Testing
import Threading

/// The stack address of a local, to compare how deep two calls run.
@inline(never) func stackDepthMarker() -> Int {
    var local = 0
    return withUnsafeMutablePointer(to: &local) { Int(bitPattern: $0) }
}

@Suite struct HandlerSlotTests {
    /// The regression behind "gattway dies after ~15 000 events": each call through a closure kept
    /// in a `Mutex` ran one frame deeper. Counted by stack depth, not timed: 100 000 calls must
    /// run at the depth of the first (the old shape had grown by 64 KiB after 1 000 calls).
    @Test func callsDoNotNestDeeperOverTime() {
        let slot = HandlerSlot<Int>()
        let depths = Mutex<[Int: Int]>([:])
        slot.set { i in
            if i == 0 || i == 1_000 || i == 99_999 { depths.withLock { $0[i] = stackDepthMarker() } }
        }
        var calls = 0
        for i in 0..<100_000 {
            slot(i)
            calls += 1
            // Stop early if it grows, rather than overflowing the test's stack.
            if i == 1_000, let first = depths.withLock({ $0[0] }), let now = depths.withLock({ $0[1_000] }),
               abs(first - now) > 4096 { break }
        }
        let seen = depths.withLock { $0 }
        #expect(calls == 100_000)
        #expect(seen.count == 3)
        if let first = seen[0], let last = seen[99_999] {
            #expect(abs(first - last) < 1024, "the 100 000th call ran \(abs(first - last)) bytes deeper than the first")
        }
    }

    @Test func setReplaceAndClear() {
        let slot = HandlerSlot<String>()
        let seen = Mutex<[String]>([])
        #expect(slot("dropped") == false)
        slot.set { s in seen.withLock { $0.append("a:" + s) } }
        #expect(slot("1"))
        slot.set { s in seen.withLock { $0.append("b:" + s) } }
        slot("2")
        slot.set(nil)
        #expect(!slot.isSet)
        #expect(slot("3") == false)
        #expect(seen.withLock { $0 } == ["a:1", "b:2"])
    }
}
