import Dispatch
import Glibc
import Testing
import Threading

@Suite struct SignalWatchTests {
    /// Dispatch registers a signal source on its own thread, later; a signal sent before that
    /// was lost (SIG_IGN) or killed the process (SIG_DFL). Sent the moment the watch is made,
    /// it reaches the handler. SIGWINCH: whatever happens to it, it cannot end the test process.
    @Test func aSignalSentTheMomentTheWatchIsMadeIsHandled() {
        let received = DispatchSemaphore(value: 0)
        let watch = SignalWatch([SIGWINCH]) { number in
            if number == SIGWINCH { received.signal() }
        }
        defer { watch.cancel() }
        kill(getpid(), SIGWINCH)
        #expect(received.wait(timeout: .now() + 5) == .success)
    }
}
