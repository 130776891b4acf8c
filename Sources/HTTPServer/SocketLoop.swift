import CMicroHTTPD
import Glibc
import Synchronization

/// The one thread that does the socket I/O of all of a server's WebSockets, and watches the
/// sockets of suspended streams for a client that hangs up.
///
/// epoll, with an eventfd to wake it for commands from other threads. WebSocket sockets are
/// registered edge-triggered for input and output; reads go through `WebSocketInbound`, writes come
/// from each socket's bounded outgoing buffer. Per-socket protocol state (`LoopThread.Peer`) is
/// touched by this thread only; what other threads touch is behind `WebSocket`'s lock and the
/// command queue. Started by the first upgrade or stream suspension, ended by `Server.stop`.
final class SocketLoop: Sendable {
    /// A suspended stream's socket, watched for the client's hang-up.
    struct Watch: Sendable {
        let token: UInt64
        let fd: Int32
    }

    private enum Command {
        case add(WebSocket, fd: Int32, handle: UpgradeHandle, extra: [UInt8])
        /// A WebSocket has bytes to send or started closing.
        case attend(token: UInt64)
        case shutDown
    }

    private struct Commands {
        var queue: [Command] = []
        var shutDown = false
    }

    /// How long a closing socket waits for the client's close frame (and for its own to go out).
    static let closeTimeout = Duration.seconds(2)
    /// Bytes read from one socket per turn of the loop: sockets are edge-triggered, and a client
    /// that sends faster than it is parsed must not keep the thread from the others, from
    /// timers and from shutting down.
    static let readBudget = 256 * 1024
    /// epoll data of the eventfd; WebSocket tokens count up from 1, watch tokens have the top bit set.
    private static let wakeToken: UInt64 = 0
    private static let watchBit: UInt64 = 1 << 63

    private let epollFD: Int32
    private let wakeFD: Int32
    private let commands = Mutex(Commands())
    private let nextToken = Atomic<UInt64>(1)
    private let thread = Mutex<pthread_t?>(nil)
    private let onHangUp: @Sendable (_ token: UInt64) -> Void

    /// - Parameter onHangUp: called on the loop thread with the `Watch.token` of a watched socket
    ///   that hung up; it must `unwatch` it (the watch is level-triggered).
    init(onHangUp: @escaping @Sendable (_ token: UInt64) -> Void) throws(SocketLoopError) {
        self.onHangUp = onHangUp
        epollFD = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard epollFD >= 0 else { throw SocketLoopError(call: "epoll_create1", code: errno) }
        wakeFD = eventfd(0, Int32(EFD_CLOEXEC) | Int32(EFD_NONBLOCK))
        guard wakeFD >= 0 else {
            let code = errno
            Glibc.close(epollFD)
            throw SocketLoopError(call: "eventfd", code: code)
        }
        var event = epoll_event(events: EPOLLIN.rawValue, data: epoll_data_t(u64: Self.wakeToken))
        epoll_ctl(epollFD, EPOLL_CTL_ADD, wakeFD, &event)

        let started = Unmanaged.passRetained(self)
        var id = pthread_t()
        let result = pthread_create(&id, nil, { context in
            Unmanaged<SocketLoop>.fromOpaque(context!).takeRetainedValue().run()
            return nil
        }, started.toOpaque())
        guard result == 0 else {
            started.release()
            Glibc.close(wakeFD)
            Glibc.close(epollFD)
            throw SocketLoopError(call: "pthread_create", code: result)
        }
        thread.withLock { $0 = id }
    }

    deinit {
        Glibc.close(wakeFD)
        Glibc.close(epollFD)
    }

    // MARK: From any thread

    /// Takes over an upgraded socket; false once shut down (the caller closes it then).
    func add(_ socket: WebSocket, fd: Int32, handle: UpgradeHandle, extra: [UInt8]) -> Bool {
        post(.add(socket, fd: fd, handle: handle, extra: extra))
    }

    func makeToken() -> UInt64 {
        nextToken.wrappingAdd(1, ordering: .relaxed).oldValue
    }

    func attend(_ token: UInt64) {
        _ = post(.attend(token: token))
    }

    /// Reports the hang-up of `fd` to `onHangUp`. Unwatch before the connection is resumed: MHD may
    /// close the socket then.
    func watchHangUp(_ fd: Int32) -> Watch? {
        let watch = Watch(token: makeToken() | Self.watchBit, fd: fd)
        var event = epoll_event(events: EPOLLRDHUP.rawValue, data: epoll_data_t(u64: watch.token))
        return epoll_ctl(epollFD, EPOLL_CTL_ADD, fd, &event) == 0 ? watch : nil
    }

    func unwatch(_ watch: Watch) {
        epoll_ctl(epollFD, EPOLL_CTL_DEL, watch.fd, nil)
    }

    /// Closes every WebSocket (1001) and ends the thread; returns when it has. Not from the loop
    /// thread (close handlers never run there).
    func shutDown() {
        _ = post(.shutDown)
        if let id = thread.withLock({ $0.take() }) { pthread_join(id, nil) }
    }

    private func post(_ command: Command) -> Bool {
        let wake = commands.withLock { commands -> Bool? in
            guard !commands.shutDown else { return nil }
            if case .shutDown = command { commands.shutDown = true }
            commands.queue.append(command)
            return commands.queue.count == 1
        }
        guard let wake else { return false }
        if wake { eventfd_write(wakeFD, 1) }
        return true
    }

    // MARK: The loop thread

    private func run() {
        LoopThread(loop: self).run()
    }

    /// The state of the loop thread, touched by it only.
    private final class LoopThread {
        let loop: SocketLoop
        var peers: [UInt64: Peer] = [:]
        /// Peers that used up their read budget with bytes still waiting (no new edge will come).
        var ready: Set<UInt64> = []
        /// When a peer's ping or close deadline may be due first: the timers run then, not at every
        /// turn of the loop (they visit every peer). Deadlines only move later, except a new peer's
        /// and a close's, which lower it (`due`); one that moved later makes a check find nothing.
        var nextTimers: ContinuousClock.Instant?
        /// Where `recv` reads to.
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 1)

        init(loop: SocketLoop) {
            self.loop = loop
        }

        deinit { scratch.deallocate() }

        /// A WebSocket's protocol state.
        final class Peer {
            let socket: WebSocket
            let fd: Int32
            let handle: UpgradeHandle
            var inbound: WebSocketInbound
            var lastHeard = ContinuousClock.now
            var pinged = false
            /// Input is over: the client's close frame arrived, or it broke the protocol.
            var reading = true
            /// Close the connection as soon as the outgoing bytes are written.
            var closeWhenFlushed = false
            var closeDeadline: ContinuousClock.Instant?

            init(socket: WebSocket, fd: Int32, handle: UpgradeHandle) {
                self.socket = socket
                self.fd = fd
                self.handle = handle
                inbound = WebSocketInbound(maxMessageBytes: socket.settings.maxMessageBytes)
            }

            /// When the next ping is due or the silence becomes fatal, or nil without pings.
            var pingDeadline: ContinuousClock.Instant? {
                let interval = socket.settings.pingInterval
                guard interval > .zero else { return nil }
                return lastHeard + (pinged ? interval * 2 : interval)
            }
        }

        func run() {
            var events = [epoll_event](repeating: epoll_event(), count: 64)
            var running = true
            while running {
                let count = epoll_wait(loop.epollFD, &events, Int32(events.count), ready.isEmpty ? timeoutMilliseconds() : 0)
                guard count >= 0 else {
                    if errno == EINTR { continue }
                    fatalError("epoll_wait: \(String(cString: strerror(errno)))")
                }
                for event in events[..<Int(count)] {
                    let token = event.data.u64
                    if token == SocketLoop.wakeToken {
                        running = runCommands()
                    } else if token & SocketLoop.watchBit != 0 {
                        loop.onHangUp(token)
                    } else if let peer = peers[token] {
                        if event.events & (EPOLLIN.rawValue | EPOLLRDHUP.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0 {
                            receive(peer)
                        }
                        if peers[token] != nil && event.events & EPOLLOUT.rawValue != 0 {
                            flush(peer)
                        }
                    }
                }
                for token in ready {
                    if let peer = peers[token] { receive(peer) } else { ready.remove(token) }
                }
                if let next = nextTimers, ContinuousClock.now >= next { checkTimers() }
            }
        }

        /// Runs the queued commands; false after `shutDown`.
        private func runCommands() -> Bool {
            var value: eventfd_t = 0
            _ = eventfd_read(loop.wakeFD, &value)
            let queued = loop.commands.withLock { commands in
                defer { commands.queue = [] }
                return commands.queue
            }
            for command in queued {
                switch command {
                case .add(let socket, let fd, let handle, let extra):
                    let peer = Peer(socket: socket, fd: fd, handle: handle)
                    var event = epoll_event(
                        events: EPOLLIN.rawValue | EPOLLOUT.rawValue | EPOLLRDHUP.rawValue | EPOLLET.rawValue,
                        data: epoll_data_t(u64: socket.token))
                    guard epoll_ctl(loop.epollFD, EPOLL_CTL_ADD, fd, &event) == 0 else {
                        _ = gw_mhd_upgrade_close(handle.pointer)
                        socket.finish(code: WebSocketCloseCode.abnormal)
                        continue
                    }
                    peers[socket.token] = peer
                    if let deadline = peer.pingDeadline { due(deadline) }
                    socket.attach(fd: fd)
                    peer.inbound.append(extra)
                    process(peer)
                    receive(peer)
                    if peers[socket.token] != nil { flush(peer) }
                case .attend(let token):
                    guard let peer = peers[token] else { continue }
                    if case .closing = peer.socket.takeAttention() { startCloseTimer(peer) }
                    flush(peer)
                case .shutDown:
                    for peer in peers.values {
                        _ = peer.socket.beginClosing(
                            code: WebSocketCloseCode.goingAway, frame: .close(code: WebSocketCloseCode.goingAway))
                        _ = peer.socket.flush(to: peer.fd)  // one try; nobody waits for a slow client now
                        end(peer)
                    }
                    return false
                }
            }
            return true
        }

        /// Reads what the socket has and acts on it.
        private func receive(_ peer: Peer) {
            let token = peer.socket.token
            var budget = SocketLoop.readBudget
            ready.remove(token)
            while peer.reading {
                guard budget > 0 else {
                    ready.insert(token)
                    break
                }
                switch SocketIO.receive(peer.fd, into: scratch) {
                case .transferred(let count):
                    budget -= count
                    peer.lastHeard = .now
                    peer.pinged = false
                    peer.inbound.append(UnsafeRawBufferPointer(rebasing: scratch[..<count]))
                    process(peer)
                case .wouldBlock:
                    flush(peer)
                    return
                case .endOfStream, .failed:
                    // Without a close frame from the client (reading stops at one) this is abnormal.
                    if peer.socket.phase == .open {
                        peer.socket.finish(code: WebSocketCloseCode.abnormal)
                    }
                    end(peer)
                    return
                }
            }
            if peers[token] != nil { flush(peer) }
        }

        /// Acts on the complete frames read so far.
        private func process(_ peer: Peer) {
            while peer.reading {
                let event: WebSocketInbound.Event?
                do {
                    event = try peer.inbound.next()
                } catch {
                    fail(peer, code: error.code, reason: error.reason)
                    return
                }
                switch event {
                case nil:
                    return
                case .message(let message):
                    if peer.socket.phase == .open && !peer.socket.deliver(message) {
                        fail(peer, code: WebSocketCloseCode.policyViolation, reason: "messages are not being consumed")
                    }
                case .ping(let payload):
                    peer.socket.sendControl(WebSocketFrame(.pong, payload))
                case .pong:
                    break
                case .close(let code, _):
                    // Echo the client's code; if we started closing, this answers us.
                    _ = peer.socket.beginClosing(code: code, frame: .close(code: code))
                    peer.reading = false
                    peer.closeWhenFlushed = true
                    startCloseTimer(peer)
                }
            }
        }

        /// The client broke the protocol: send a close frame with `code`, then close without waiting
        /// for the answer (RFC 6455 section 7.1.7).
        private func fail(_ peer: Peer, code: UInt16, reason: String) {
            _ = peer.socket.beginClosing(code: code, frame: .close(code: code, reason: reason))
            peer.reading = false
            peer.closeWhenFlushed = true
            startCloseTimer(peer)
        }

        private func flush(_ peer: Peer) {
            switch peer.socket.flush(to: peer.fd) {
            case .done:
                if peer.closeWhenFlushed { end(peer) }
            case .blocked:
                break
            case .failed:
                if peer.socket.phase == .open { peer.socket.finish(code: WebSocketCloseCode.abnormal) }
                end(peer)
            }
        }

        /// Closes the connection (through MHD, the only way) and reports the socket closed with the
        /// code of its closing phase, unless it was reported already.
        private func end(_ peer: Peer) {
            epoll_ctl(loop.epollFD, EPOLL_CTL_DEL, peer.fd, nil)
            peer.socket.detach()  // no other thread writes to the descriptor from now on
            _ = gw_mhd_upgrade_close(peer.handle.pointer)
            peers[peer.socket.token] = nil
            ready.remove(peer.socket.token)
            if case .closing(let code) = peer.socket.phase {
                peer.socket.finish(code: code)
            } else {
                peer.socket.finish(code: WebSocketCloseCode.abnormal)
            }
        }

        /// A closing peer waits `closeTimeout` at most (from the first reason to close).
        private func startCloseTimer(_ peer: Peer) {
            let deadline = peer.closeDeadline ?? ContinuousClock.now + SocketLoop.closeTimeout
            peer.closeDeadline = deadline
            due(deadline)
        }

        private func due(_ deadline: ContinuousClock.Instant) {
            if nextTimers.map({ deadline < $0 }) ?? true { nextTimers = deadline }
        }

        /// Pings quiet clients, drops silent ones and closing ones that took too long; then finds
        /// the nearest deadline.
        private func checkTimers() {
            defer { nextTimers = peers.values.compactMap { $0.closeDeadline ?? $0.pingDeadline }.min() }
            let now = ContinuousClock.now
            for peer in Array(peers.values) {
                if let deadline = peer.closeDeadline {
                    if now >= deadline { end(peer) }
                    continue
                }
                guard let deadline = peer.pingDeadline, now >= deadline else { continue }
                if peer.pinged {
                    peer.socket.finish(code: WebSocketCloseCode.abnormal)
                    end(peer)
                } else {
                    peer.pinged = true
                    peer.socket.sendControl(WebSocketFrame(.ping))
                    flush(peer)
                }
            }
        }

        /// Until the nearest timer, -1 for none.
        private func timeoutMilliseconds() -> Int32 {
            nextTimers.map(epollTimeout(until:)) ?? -1
        }
    }
}

/// epoll_wait's timeout until `instant`: milliseconds, rounded up, 0 once past.
func epollTimeout(until instant: ContinuousClock.Instant) -> Int32 {
    let (seconds, attoseconds) = (instant - .now).components
    let milliseconds = seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
    return Int32(clamping: max(0, milliseconds))
}

struct SocketLoopError: Error, CustomStringConvertible {
    let call: String
    let code: Int32
    var description: String { "\(call): \(String(cString: strerror(code)))" }
}

/// MHD's handle of an upgraded connection. Sendable because MHD_upgrade_action may be called
/// from any thread; the loop calls it once per handle.
struct UpgradeHandle: @unchecked Sendable {
    let pointer: OpaquePointer
}

/// `send` and `recv` on non-blocking sockets, with errno mapped.
enum SocketIO {
    case transferred(Int)
    case wouldBlock
    /// The peer closed (recv returned 0).
    case endOfStream
    case failed(errno: Int32)

    static func send(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> SocketIO {
        map { Glibc.send(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL)) }
    }

    static func receive(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) -> SocketIO {
        map { recv(fd, buffer.baseAddress, buffer.count, 0) }
    }

    private static func map(_ call: () -> Int) -> SocketIO {
        while true {
            let result = call()
            if result > 0 { return .transferred(result) }
            if result == 0 { return .endOfStream }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return .wouldBlock
            default: return .failed(errno: errno)
            }
        }
    }
}
