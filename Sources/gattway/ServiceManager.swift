import Dispatch
import Glibc
import Synchronization
import Threading

/// What gattway tells systemd (sd_notify(3)): each state is one datagram to the socket
/// NOTIFY_SOCKET names. A few lines of its own rather than libsystemd's `sd_notify`, which would
/// cost no memory (Debian's libdbus already maps libsystemd) but a system library target and
/// libsystemd-dev in every build, the image's too, for one `sendto`.
struct ServiceManager: Sendable {
    /// Where the states go; nil when systemd did not ask for them (not Type=notify, or not systemd).
    let socketPath: String?
    /// WatchdogSec=, when systemd watches this process.
    let watchdogInterval: Duration?

    /// From NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID, which are then removed from the
    /// environment: a process gattway starts (the simulator's dbus-daemon) must not speak for it.
    static func fromEnvironment() -> ServiceManager {
        func take(_ name: String) -> String? {
            defer { unsetenv(name) }
            return getenv(name).map { String(cString: $0) }
        }
        let socket = take("NOTIFY_SOCKET").flatMap { $0.isEmpty ? nil : $0 }
        let microseconds = take("WATCHDOG_USEC").flatMap { Int64($0) }.flatMap { $0 > 0 ? $0 : nil }
        // Set when the watchdog is meant for one process of several: then only that one.
        let forUs = take("WATCHDOG_PID").map { Int32($0) == getpid() } ?? true
        return ServiceManager(socketPath: socket,
                              watchdogInterval: socket != nil && forUs ? microseconds.map { .microseconds($0) } : nil)
    }

    /// Sends one state, such as "READY=1"; false when there is no socket or it refused.
    @discardableResult
    func notify(_ state: String) -> Bool {
        guard let socketPath else { return false }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var path = Array(socketPath.utf8)
        // "@name" is a socket in the abstract namespace: a name that starts with a NUL byte.
        let abstract = path.first == UInt8(ascii: "@")
        if abstract { path[0] = 0 }
        guard path.count < MemoryLayout.size(ofValue: address.sun_path) else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: path) }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + path.count + (abstract ? 0 : 1))
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        let bytes = Array(state.utf8)
        let sent = withUnsafePointer(to: &address) { address in
            address.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                bytes.withUnsafeBytes { sendto(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL), address, length) }
            }
        }
        return sent == bytes.count
    }
}

/// WATCHDOG=1 to systemd while what serves clients answers. Every third of WatchdogSec a beat
/// runs each check (the HTTP server answering a request of its own, the D-Bus connection's
/// thread running a job), each given half a beat; only when all passed does it send WATCHDOG=1.
/// So a gattway wedged for two beats in a row misses WatchdogSec, and systemd restarts it; one
/// slow beat is forgiven. The checks run on a thread of the watchdog's own, which blocks in them.
final class Watchdog: Sendable {
    struct Check: Sendable {
        /// What is checked, as the log says it ("the HTTP server").
        let name: String
        /// True when it answered within the time given.
        let passes: @Sendable (Duration) -> Bool
    }

    private let beat: Duration
    private let checks: [Check]
    private let manager: ServiceManager
    private let stopped = Atomic<Bool>(false)
    private let wake = DispatchSemaphore(value: 0)

    init(interval: Duration, manager: ServiceManager, checks: [Check]) {
        beat = interval / 3
        self.checks = checks
        self.manager = manager
    }

    /// The first beat at once, then one every third of the interval, until `stop`.
    func start() {
        Threads.start(name: "gattway-watchdog") { [self] in
            var next = ContinuousClock.now
            var failing: [String] = []
            while !stopped.load(ordering: .acquiring) {
                next += beat
                let failed = checks.filter { !$0.passes(beat / 2) }.map(\.name)
                if failed.isEmpty { manager.notify("WATCHDOG=1") }
                if failed != failing {
                    if failed.isEmpty {
                        log("watchdog: \(failing.joined(separator: " and ")) answer(s) again; WATCHDOG=1 resumed", .warning)
                    } else {
                        log("watchdog: \(failed.joined(separator: " and ")) did not answer within \(beat / 2);"
                            + " WATCHDOG=1 withheld (systemd restarts gattway when none came for WatchdogSec)", .error)
                    }
                    failing = failed
                }
                let left = ContinuousClock.now.duration(to: next)
                if left > .zero { _ = wake.wait(timeout: .now() + .nanoseconds(Int(left.inSeconds * 1e9))) }
            }
        }
    }

    /// No more beats (shutdown); a beat under way ends on its own.
    func stop() {
        stopped.store(true, ordering: .releasing)
        wake.signal()
    }
}

#if DEBUG
/// Faults for the watchdog's tests, in debug builds only: SIGUSR1 wedges the HTTP server's I/O
/// thread (at the next connection it opens or closes), SIGUSR2 the D-Bus connection's thread.
/// Neither comes back: the test kills gattway afterwards.
final class Stalls {
    private let sources: [DispatchSourceSignal]

    init(http: @escaping @Sendable () -> Void, bus: @escaping @Sendable () -> Void) {
        sources = [(SIGUSR1, http), (SIGUSR2, bus)].map { number, stall in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler {
                log("debug: signal \(number): stalling", .warning)
                stall()
            }
            source.resume()
            return source
        }
    }
}
#endif
