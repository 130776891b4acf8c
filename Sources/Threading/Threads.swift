import Glibc

/// Threads of their own, for loops that must never wait behind Swift's cooperative pool.
public enum Threads {
    private final class Body {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }

    /// Starts a detached thread that runs `body` and ends when it returns; `name` is for the
    /// message if it cannot start.
    public static func start(name: String, _ body: @escaping @Sendable () -> Void) {
        let context = Unmanaged.passRetained(Body(body)).toOpaque()
        var thread = pthread_t()
        let created = pthread_create(&thread, nil, { context in
            let body = Unmanaged<Body>.fromOpaque(context!).takeRetainedValue()
            body.run()
            return nil
        }, context)
        precondition(created == 0, "cannot start the thread \(name): \(String(cString: strerror(created)))")
        pthread_detach(thread)
    }
}
