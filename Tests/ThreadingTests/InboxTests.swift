import Testing
import Threading

/// Time is what `wait` is about: a wait that must end early has a long deadline (10 s) and must
/// return well before it; one that must not be woken has a short one (100 ms) and must last it.
/// Serialized: each blocks a thread of the cooperative pool while it waits.
@Suite(.serialized) struct InboxTests {
    private func waited(_ inbox: Inbox<[Int]>, _ deadline: Duration) -> Duration {
        let start = ContinuousClock.now
        inbox.wait(until: start + deadline)
        return ContinuousClock.now - start
    }

    /// A burst of posts wakes the thread once; it finds them all.
    @Test func aBurstOfPostsIsOneWakeUp() {
        let inbox = Inbox<[Int]>([])
        for i in 1...3 { inbox.post { $0.append(i); return true } }
        #expect(waited(inbox, .seconds(10)) < .seconds(5))
        #expect(waited(inbox, .milliseconds(100)) >= .milliseconds(90))
        #expect(inbox.take { c in defer { c = [] }; return c } == [1, 2, 3])
    }

    /// Once the thread has taken its inbox, the next post wakes it again.
    @Test func aPostAfterTheTakeWakesAgain() {
        let inbox = Inbox<[Int]>([])
        inbox.post { $0.append(1); return true }
        inbox.wait()
        _ = inbox.take { c in defer { c = [] }; return c }
        inbox.post { $0.append(2); return true }
        #expect(waited(inbox, .seconds(10)) < .seconds(5))
        #expect(inbox.take { $0 } == [2])
    }

    /// A post that does not ask for it changes the contents and wakes nobody.
    @Test func aPostThatDoesNotAskWakesNobody() {
        let inbox = Inbox<[Int]>([])
        inbox.post { $0.append(1); return false }
        #expect(waited(inbox, .milliseconds(100)) >= .milliseconds(90))
        #expect(inbox.take { $0 } == [1])
    }
}
