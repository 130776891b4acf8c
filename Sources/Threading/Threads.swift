import Glibc

/// Threads of their own, for loops that must never wait behind Swift's cooperative pool.
public enum Threads {
    private final class Body {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }

    /// Starts a detached thread that runs `body` and ends when it returns. `name` is the thread's
    /// name as `top -H`, `perf` and gdb show it (cut to the 15 bytes Linux keeps) and is in the
    /// message if it cannot start.
    public static func start(name: String, _ body: @escaping @Sendable () -> Void) {
        let named: @Sendable () -> Void = {
            nameThisThread(name)
            body()
        }
        let context = Unmanaged.passRetained(Body(named)).toOpaque()
        var thread = pthread_t()
        let created = pthread_create(&thread, nil, { context in
            let body = Unmanaged<Body>.fromOpaque(context!).takeRetainedValue()
            body.run()
            return nil
        }, context)
        precondition(created == 0, "cannot start the thread \(name): \(String(cString: strerror(created)))")
        pthread_detach(thread)
    }

    /// pthread_setname_np needs _GNU_SOURCE, which Glibc's module does not define; the kernel's
    /// own file for it is as good.
    private static func nameThisThread(_ name: String) {
        let fd = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return }
        let bytes = Array(name.utf8.prefix(15))
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
    }
}
