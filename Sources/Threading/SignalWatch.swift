import Dispatch
import Glibc

/// Signals handled on a Dispatch queue, none lost from the moment `init` starts.
///
/// On Linux, Dispatch installs its own handler and a signalfd for a signal source later, on its
/// manager thread (milliseconds after `resume`, tens of them on a busy machine). A signal sent
/// before that met the old disposition: SIG_IGN threw it away (gattway-sim then never stopped),
/// SIG_DFL ended the process. So `init` first blocks the signals in the calling thread, whose
/// mask every thread started afterwards inherits (a blocked signal stays pending whatever its
/// disposition, and Dispatch's signalfd takes it once there), and returns only once Dispatch has
/// registered every source. Make it on the main thread before any other thread starts: until it
/// returns, a thread that does not block the signals would take them the default way.
public final class SignalWatch: @unchecked Sendable {  // unchecked: Dispatch's sources may be cancelled from any thread
    private let sources: [any DispatchSourceSignal]

    /// Calls `handler` with the signal's number, on a global queue, for each of `numbers` received.
    public init(_ numbers: [Int32], handler: @escaping @Sendable (Int32) -> Void) {
        var blocked = sigset_t()
        sigemptyset(&blocked)
        for number in numbers { sigaddset(&blocked, number) }
        pthread_sigmask(SIG_BLOCK, &blocked, nil)
        let registered = DispatchSemaphore(value: 0)
        sources = numbers.map { number in
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { handler(number) }
            source.setRegistrationHandler { registered.signal() }
            source.resume()
            return source
        }
        // Bounded, should Dispatch never get to it: the signals then stay pending in the kernel
        // (blocked here and in the threads started after) until it does.
        let deadline = DispatchTime.now() + .seconds(5)
        for _ in numbers { _ = registered.wait(timeout: deadline) }
    }

    /// No more handler calls.
    public func cancel() { sources.forEach { $0.cancel() } }
}
