import Access
import Dispatch
import GatewayCore
import Glibc
import Launch
import Synchronization
import Threading

/// SIGINT and SIGTERM, caught from the moment this is made until `wait` returns one. Made on the
/// main thread before anything starts (`SignalWatch`), so that a signal during start-up is never
/// lost and stops gattway cleanly.
final class TerminationSignals {
    private final class State: Sendable {
        let value = Mutex<(received: Int32?, waiting: CheckedContinuation<Int32, Never>?)>((nil, nil))
    }
    private let state = State()
    private let watch: SignalWatch

    init() {
        let state = self.state
        watch = SignalWatch([SIGINT, SIGTERM]) { number in
            let waiting = state.value.withLock { s -> CheckedContinuation<Int32, Never>? in
                if s.received == nil { s.received = number }
                return s.waiting.take()
            }
            waiting?.resume(returning: number)
        }
    }

    /// The first signal received, waiting for one if none came yet.
    func wait() async -> Int32 {
        let received = await withCheckedContinuation { (continuation: CheckedContinuation<Int32, Never>) in
            let early = state.value.withLock { s -> Int32? in
                if let r = s.received { return r }
                s.waiting = continuation
                return nil
            }
            if let early { continuation.resume(returning: early) }
        }
        watch.cancel()
        return received
    }
}

/// On SIGHUP, the token, sensor key and pairing key files are read again; a file that cannot be
/// used leaves what it gave as it was (and the log says why). The handler is set before anything
/// is served; `reload` is called once the gateway exists (a SIGHUP before then reloads the
/// tokens only).
final class HangUp {
    private final class Slot: Sendable {
        let gateway = Mutex<Gateway?>(nil)
    }
    private let slot = Slot()
    private let source: DispatchSourceSignal

    init(_ options: Options, _ access: AccessControl) {
        signal(SIGHUP, SIG_IGN)
        source = DispatchSource.makeSignalSource(signal: SIGHUP, queue: .global())
        let slot = self.slot
        source.setEventHandler {
            let tokens = access.reloadTokens(options.tokens, readFile: readFile)
            log(tokens.description, tokens.isRefused ? .warning : .info)
            guard let gateway = slot.gateway.withLock({ $0 }) else { return }
            if options.sensorKeysFile != nil { reloadSensorKeys(options, gateway) }
            if options.pairingKeysFile != nil { reloadPairingKeys(options, gateway) }
        }
        source.resume()
    }

    /// From now on SIGHUP also gives `gateway` the keys of the sensor and pairing keys files.
    func reload(keysOf gateway: Gateway) { slot.gateway.withLock { $0 = gateway } }

    func cancel() { source.cancel() }
}
