import CMicroHTTPD
import Glibc
import Sockets
import Synchronization

/// The listening socket of a plain-HTTP server and the thread that accepts on it, so that each
/// connection can be given to the daemon that suits it (`MHD_add_connection`).
///
/// An accepted connection waits, at most `sortingWindow`, until its first request's head is in;
/// its bytes are peeked, not read (`FirstRequest`). One that opens an event stream or a WebSocket
/// with a small head goes to the stream daemon, whose pool per connection is small; every other,
/// and one still silent at the end of the window, to the main daemon. Waiting connections count as
/// open (the server's limits see them); at `capacity` open connections the socket is not accepted
/// from, and the kernel's backlog holds new ones until one closes (`connectionClosed`).
///
/// Under TLS the head cannot be read before the handshake: libmicrohttpd listens itself then.
final class Acceptor: Sendable {
    /// What the server does with the connections.
    struct Hooks: Sendable {
        /// Open connections (the daemons' and those waiting here).
        let openConnections: @Sendable () -> Int
        /// A connection starts or stops waiting here (for the per-client counts).
        let waiting: @Sendable (_ peer: UnsafePointer<sockaddr>, _ started: Bool) -> Void
        /// Takes the socket (and closes it if it cannot serve it).
        let handOver: @Sendable (_ fd: Int32, _ peer: UnsafePointer<sockaddr>, _ length: socklen_t,
                                 _ verdict: FirstRequest.Verdict) -> Void
    }

    /// How long a connection may stay silent before it goes to the main daemon unsorted.
    static let sortingWindow = Duration.seconds(2)

    /// The bound port (the kernel's choice for port 0).
    let port: UInt16
    private let listenFD: Int32
    private let epollFD: Int32
    private let wakeFD: Int32
    private let capacity: Int
    private let poolBytes: Int
    private let hooks: Hooks
    private let thread = Mutex<pthread_t?>(nil)
    private let stopping = Atomic<Bool>(false)
    /// Not accepting: at capacity, or out of descriptors.
    private let paused = Atomic<Bool>(false)
    private let listenerClosed = Atomic<Bool>(false)

    private static let listenToken: UInt64 = 0
    private static let wakeToken: UInt64 = 1
    /// epoll data of a waiting connection: its descriptor plus this.
    private static let socketBase: UInt64 = 2

    /// Listens on `host` (an IPv4 or IPv6 literal without brackets, or "localhost") and `port`;
    /// `poolBytes` is the stream daemon's pool.
    init(host: String, port: UInt16, capacity: Int, poolBytes: Int, hooks: Hooks) throws(SocketError) {
        self.capacity = capacity
        self.poolBytes = poolBytes
        self.hooks = hooks
        // As libmicrohttpd listens: an IPv6 address takes IPv6 only; the kernel's largest backlog.
        (listenFD, self.port) = try TCPListener.open(host: host, port: port, backlog: SOMAXCONN, ipv6Only: true)
        epollFD = epoll_create1(Int32(EPOLL_CLOEXEC))
        wakeFD = eventfd(0, Int32(EFD_CLOEXEC) | Int32(EFD_NONBLOCK))
        guard epollFD >= 0, wakeFD >= 0 else {
            let code = errno
            for fd in [listenFD, epollFD, wakeFD] where fd >= 0 { Glibc.close(fd) }
            throw SocketError(call: "epoll_create1/eventfd", errno: code)
        }
        var event = epoll_event(events: EPOLLIN.rawValue, data: epoll_data_t(u64: Self.wakeToken))
        epoll_ctl(epollFD, EPOLL_CTL_ADD, wakeFD, &event)
        event = epoll_event(events: EPOLLIN.rawValue, data: epoll_data_t(u64: Self.listenToken))
        epoll_ctl(epollFD, EPOLL_CTL_ADD, listenFD, &event)
    }

    /// Starts the thread; until then nothing is accepted (the kernel queues connections).
    func start() throws(SocketError) {
        let started = Unmanaged.passRetained(self)
        var id = pthread_t()
        let result = pthread_create(&id, nil, { context in
            Unmanaged<Acceptor>.fromOpaque(context!).takeRetainedValue().run()
            return nil
        }, started.toOpaque())
        guard result == 0 else {
            started.release()
            closeListener()
            throw SocketError(call: "pthread_create", errno: result)
        }
        thread.withLock { $0 = id }
    }

    deinit {
        closeListener()
        Glibc.close(epollFD)
        Glibc.close(wakeFD)
    }

    private func closeListener() {
        if !listenerClosed.exchange(true, ordering: .relaxed) { Glibc.close(listenFD) }
    }

    /// A connection closed: if accepting paused at capacity, look again.
    func connectionClosed() {
        if paused.load(ordering: .relaxed) { eventfd_write(wakeFD, 1) }
    }

    /// Stops accepting, closes the connections still waiting and the socket's backlog with them;
    /// returns when the thread has ended.
    func shutDown() {
        stopping.store(true, ordering: .relaxed)
        eventfd_write(wakeFD, 1)
        if let id = thread.withLock({ $0.take() }) { pthread_join(id, nil) }
    }

    // MARK: The thread

    private struct Waiting {
        let fd: Int32
        var peer: sockaddr_storage
        let length: socklen_t
        let deadline: ContinuousClock.Instant
    }

    private func run() {
        var waiting: [Int32: Waiting] = [:]
        var events = [epoll_event](repeating: epoll_event(), count: 64)
        let peek = UnsafeMutableRawBufferPointer.allocate(byteCount: poolBytes, alignment: 1)
        defer {
            peek.deallocate()
            for connection in Array(waiting.values) { close(connection, &waiting) }
            closeListener()  // the port is free once `shutDown` returns
        }
        /// When accepting, paused for want of descriptors, is tried again.
        var retryAccept: ContinuousClock.Instant?
        while !stopping.load(ordering: .relaxed) {
            let next = [waiting.values.lazy.map(\.deadline).min(), retryAccept].compactMap { $0 }.min()
            let count = epoll_wait(epollFD, &events, Int32(events.count), next.map(epollTimeout(until:)) ?? -1)
            guard count >= 0 else {
                if errno == EINTR { continue }
                fatalError("epoll_wait: \(String(cString: strerror(errno)))")
            }
            for event in events[..<Int(count)] {
                switch event.data.u64 {
                case Self.wakeToken:
                    var value: eventfd_t = 0
                    _ = eventfd_read(wakeFD, &value)
                    if retryAccept == nil { acceptAll(&waiting, &retryAccept) }
                case Self.listenToken:
                    acceptAll(&waiting, &retryAccept)
                case let token:
                    let fd = Int32(token - Self.socketBase)
                    if waiting[fd] != nil { sort(fd, peek, &waiting) }
                }
            }
            let now = ContinuousClock.now
            if let retry = retryAccept, now >= retry {
                retryAccept = nil
                acceptAll(&waiting, &retryAccept)
            }
            for connection in waiting.values.filter({ $0.deadline <= now }) {
                handOver(connection, .ordinary, &waiting)
            }
        }
    }

    /// Accepts while there is room; pauses (listening socket out of epoll) when there is none.
    private func acceptAll(_ waiting: inout [Int32: Waiting], _ retryAccept: inout ContinuousClock.Instant?) {
        while true {
            guard hooks.openConnections() < capacity else {
                pause(true)
                // A close in between may have come before `paused` was set: look once more.
                if hooks.openConnections() < capacity { pause(false); continue }
                return
            }
            var peer = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let fd = withUnsafeMutableBytes(of: &peer) {
                accept(listenFD, $0.baseAddress!.assumingMemoryBound(to: sockaddr.self), &length)
            }
            guard fd >= 0 else {
                switch errno {
                case EINTR, ECONNABORTED, EPROTO: continue
                case EMFILE, ENFILE, ENOBUFS, ENOMEM:
                    // Out of descriptors or memory: try again shortly rather than spin.
                    pause(true)
                    retryAccept = .now + .milliseconds(100)
                    return
                default:
                    pause(false)
                    return  // EAGAIN: nothing more
                }
            }
            // libmicrohttpd makes it non-blocking; accept4, which would do both, is not in Glibc's module.
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            let connection = Waiting(fd: fd, peer: peer, length: length, deadline: .now + Self.sortingWindow)
            // Edge-triggered: peeked bytes stay unread, and only new ones wake the thread again.
            var event = epoll_event(events: EPOLLIN.rawValue | EPOLLRDHUP.rawValue | EPOLLET.rawValue,
                                    data: epoll_data_t(u64: UInt64(fd) + Self.socketBase))
            guard epoll_ctl(epollFD, EPOLL_CTL_ADD, fd, &event) == 0 else {
                withPeer(connection) { hooks.handOver(fd, $0, length, .ordinary) }
                continue
            }
            waiting[fd] = connection
            withPeer(connection) { hooks.waiting($0, true) }
        }
    }

    private func pause(_ on: Bool) {
        guard paused.exchange(on, ordering: .relaxed) != on else { return }
        var event = epoll_event(events: on ? 0 : EPOLLIN.rawValue, data: epoll_data_t(u64: Self.listenToken))
        epoll_ctl(epollFD, EPOLL_CTL_MOD, listenFD, &event)
    }

    /// Reads what has come without taking it, and hands the connection over once its head says
    /// where it goes.
    private func sort(_ fd: Int32, _ peek: UnsafeMutableRawBufferPointer, _ waiting: inout [Int32: Waiting]) {
        guard let connection = waiting[fd] else { return }
        let count = recv(fd, peek.baseAddress, peek.count, Int32(MSG_PEEK) | Int32(MSG_DONTWAIT))
        if count == 0 || (count < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            close(connection, &waiting)  // gone before it asked for anything
            return
        }
        guard count > 0 else { return }
        let verdict = FirstRequest.verdict(UnsafeRawBufferPointer(rebasing: peek[..<count]), poolBytes: poolBytes)
        if verdict != .incomplete { handOver(connection, verdict, &waiting) }
    }

    private func handOver(_ connection: Waiting, _ verdict: FirstRequest.Verdict, _ waiting: inout [Int32: Waiting]) {
        forget(connection, &waiting)
        withPeer(connection) { hooks.handOver(connection.fd, $0, connection.length, verdict) }
    }

    private func close(_ connection: Waiting, _ waiting: inout [Int32: Waiting]) {
        forget(connection, &waiting)
        Glibc.close(connection.fd)
    }

    private func forget(_ connection: Waiting, _ waiting: inout [Int32: Waiting]) {
        guard waiting.removeValue(forKey: connection.fd) != nil else { return }
        epoll_ctl(epollFD, EPOLL_CTL_DEL, connection.fd, nil)
        withPeer(connection) { hooks.waiting($0, false) }
    }

    private func withPeer<R>(_ connection: Waiting, _ body: (UnsafePointer<sockaddr>) -> R) -> R {
        var peer = connection.peer
        return withUnsafeBytes(of: &peer) { body($0.baseAddress!.assumingMemoryBound(to: sockaddr.self)) }
    }
}
