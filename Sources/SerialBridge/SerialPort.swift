import BLE
import Dispatch
import Glibc
import Sockets
import Synchronization
import Threading

/// A TCP port serving a device's UART the way ser2net serves a serial line: bytes in, bytes
/// out, nothing else on the wire, so that `socat`, `nc` and pyserial's `socket://` can open it.
///
/// The device is connected when a client attaches (as for `connect=auto`: disconnected once
/// idle after the last) and kept per `onLinkLoss`. One thread polls the listening socket and the
/// clients. Flow control is TCP's own both ways: a client's bytes are read only once its last
/// bytes are written to the device (so a fast sender is slowed by its socket's window, never by
/// losing bytes), and what the device sends waits in a bounded buffer per client (`maxBuffered`);
/// a client that does not read has its bytes dropped past it, counted and logged by the link.
package final class SerialPort: Sendable {
    package let configuration: Configuration
    /// The port it listens on (the configured one, or the kernel's pick for 0).
    package let port: UInt16
    private let links: SerialLinks
    private let wake: (read: Int32, write: Int32)
    private let stopped = Atomic<Bool>(false)
    private let done = DispatchSemaphore(value: 0)
    private let clients = Mutex<[Int32: TCPClient]>([:])
    private let counts = Mutex(Totals())
    private let log: @Sendable (String) -> Void

    struct Totals {
        var accepted = 0
        var refused = 0
    }

    /// Clients now, and since the port opened.
    package var clientCount: Int { clients.withLock { $0.count } }
    package var acceptedCount: Int { counts.withLock { $0.accepted } }
    /// The device's link while a client is attached (nil: none is).
    package var link: SerialLink? { links.link(configuration.device) }

    init(_ configuration: Configuration, links: SerialLinks, log: @escaping @Sendable (String) -> Void) throws(SocketError) {
        let (listener, port) = try TCPListener.open(host: configuration.host, port: configuration.port)
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else {
            let code = errno
            close(listener)
            throw SocketError(call: "pipe", errno: code)
        }
        for fd in ends {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        self.configuration = configuration
        self.port = port
        self.links = links
        self.log = log
        wake = (ends[0], ends[1])
        let done = self.done
        Threads.start(name: "serial-\(port)") { [self] in
            run(listener: listener)
            done.signal()
        }
    }

    /// Closes the port and its clients (their bytes not yet sent are dropped); returns once the
    /// thread is done.
    package func stop() {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        poke()
        done.wait()
    }

    /// Wakes the thread (a client has bytes to send, finished a write, or is to close).
    private func poke() {
        var byte: UInt8 = 1
        _ = Glibc.write(wake.write, &byte, 1)
    }

    // MARK: - The thread

    private func run(listener: Int32) {
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        while !stopped.load(ordering: .acquiring) {
            let current = clients.withLock { Array($0.values) }
            var fds = [pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: listener, events: Int16(POLLIN), revents: 0)]
            for client in current {
                var events: Int16 = 0
                let (readable, writable) = client.wants
                if readable { events |= Int16(POLLIN) }
                if writable { events |= Int16(POLLOUT) }
                fds.append(pollfd(fd: client.fd, events: events, revents: 0))
            }
            guard poll(&fds, nfds_t(fds.count), -1) >= 0 || errno == EINTR else {
                log("serial port \(port): poll: \(String(cString: strerror(errno))); the port stops")
                break
            }
            if fds[0].revents != 0 { while Glibc.read(wake.read, &buffer, buffer.count) > 0 {} }
            if fds[1].revents & Int16(POLLIN) != 0 { acceptAll(listener) }
            for (client, fd) in zip(current, fds.dropFirst(2)) {
                service(client, revents: fd.revents, buffer: &buffer)
            }
        }
        for client in clients.withLock({ s in defer { s = [:] }; return Array(s.values) }) { end(client, why: "the port closed") }
        close(listener)
        close(wake.read)
        close(wake.write)
    }

    private func acceptAll(_ listener: Int32) {
        while true {
            switch TCPListener.accept(listener) {
            case .none: return
            case .failed(let code):
                log("serial port \(port): accept: \(String(cString: strerror(code)))")
                return
            case .accepted(let fd, let peer):
                guard clientCount < configuration.maxClients else {
                    close(fd)
                    counts.withLock { $0.refused += 1 }
                    log("serial port \(port): \(peer) refused: \(configuration.maxClients) clients are attached already")
                    continue
                }
                let client = TCPClient(fd: fd, peer: peer, maxBuffered: configuration.maxBuffered, wake: { [weak self] in self?.poke() })
                clients.withLock { $0[fd] = client }
                counts.withLock { $0.accepted += 1 }
                attach(client)
            }
        }
    }

    /// Opens the client's session on the device's serial port (connecting it if needed): the
    /// writer if none is, else a reader (which is detached if it sends).
    private func attach(_ client: TCPClient) {
        let configuration = configuration
        let links = links
        let onLinkLoss = configuration.onLinkLoss
        let reader = SerialLink.Reader(bytes: { client.enqueue($0) },
                                       link: { change in if case .lost = change, onLinkLoss == .close { client.finish() } })
        Task {
            do throws(BLEError) {
                let session: SerialSession
                do throws(BLEError) {
                    session = try await links.open(configuration.device, profile: configuration.profile, reader: reader,
                                                   writer: true, onLinkLoss: onLinkLoss, connect: true)
                } catch where error.code == .cb(.connectionLimitReached) {
                    session = try await links.open(configuration.device, profile: configuration.profile, reader: reader,
                                                   writer: false, onLinkLoss: onLinkLoss, connect: true)
                }
                log("serial port \(port): \(client.peer) attached to \(configuration.device)"
                    + (session.isWriter ? "" : " to read (another client writes)"))
                client.opened(session)
            } catch {
                // Raw TCP has no way to say why: the log does, and the client is closed.
                log("serial port \(port): \(client.peer) closed: \(configuration.device): \(error.name): \(error.message)")
                client.finish()
            }
        }
    }

    private func service(_ client: TCPClient, revents: Int16, buffer: inout [UInt8]) {
        if revents & Int16(POLLOUT) != 0, !client.send() {
            return end(client, why: "its socket failed")
        }
        if revents & Int16(POLLIN) != 0 {
            let n = recv(client.fd, &buffer, buffer.count, 0)
            if n == 0 { return end(client, why: "it closed") }
            if n < 0 {
                guard errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR else { return end(client, why: "its socket failed") }
            } else if !client.write(Array(buffer[..<n]), options: configuration.writeOptions) {
                return end(client, why: "it sent bytes, but another client is the writer (one at a time)")
            }
        } else if revents & Int16(POLLERR | POLLHUP) != 0 {
            return end(client, why: "it hung up")
        }
        if client.isDone { end(client, why: "") }
    }

    private func end(_ client: TCPClient, why: String) {
        clients.withLock { $0[client.fd] = nil }
        if !why.isEmpty { log("serial port \(port): \(client.peer) detached: \(why)") }
        client.closeSocket()
    }
}

extension SerialPort {
    package struct Configuration: Sendable, Equatable {
        /// An IPv4 or IPv6 literal, or "localhost".
        package var host: String
        /// 0: a free port (`SerialPort.port`).
        package var port: UInt16
        package var device: BluetoothAddress
        /// nil: the first known profile the device has.
        package var profile: SerialProfile?
        package var onLinkLoss: SerialLink.LinkLoss
        package var writeOptions: SerialLink.WriteOptions
        /// Clients attached at once: the first writes, the others read (one that sends is detached).
        package var maxClients = 4
        /// Bytes from the device waiting for one client to read them.
        package var maxBuffered = 256 * 1024

        package init(host: String = "127.0.0.1", port: UInt16, device: BluetoothAddress, profile: SerialProfile? = nil,
                    onLinkLoss: SerialLink.LinkLoss = .close, writeOptions: SerialLink.WriteOptions = .init()) {
            self.host = host
            self.port = port
            self.device = device
            self.profile = profile
            self.onLinkLoss = onLinkLoss
            self.writeOptions = writeOptions
        }
    }
}

/// One TCP client of a serial port: the socket (its thread's), the bytes waiting for it (any
/// thread adds), its session once open, and whether its last bytes are still being written.
private final class TCPClient: Sendable {
    let fd: Int32
    let peer: String
    private let maxBuffered: Int
    private let wake: @Sendable () -> Void

    private struct State {
        var session: SerialSession?
        var out: [UInt8] = []
        var head = 0
        /// A write to the device is under way: the socket is not read meanwhile.
        var writing = false
        /// To be closed once what waits for it is sent.
        var finishing = false
        var closed = false
    }
    private let state = Mutex(State())

    init(fd: Int32, peer: String, maxBuffered: Int, wake: @escaping @Sendable () -> Void) {
        self.fd = fd
        self.peer = peer
        self.maxBuffered = maxBuffered
        self.wake = wake
    }

    /// Whether to read the socket (open, not writing), and to write it (bytes wait).
    var wants: (readable: Bool, writable: Bool) {
        state.withLock { s in (s.session != nil && !s.writing && !s.finishing, s.out.count > s.head) }
    }

    var isDone: Bool { state.withLock { $0.finishing && $0.out.count == $0.head && !$0.writing } }

    func opened(_ session: SerialSession) {
        let closed = state.withLock { s -> Bool in
            if !s.closed { s.session = session }
            return s.closed
        }
        if closed { Task { await session.close() } } else { wake() }
    }

    /// Bytes from the device; false when they find no room.
    func enqueue(_ bytes: [UInt8]) -> Bool {
        let taken = state.withLock { s -> Bool in
            guard !s.closed, s.out.count - s.head + bytes.count <= maxBuffered else { return false }
            if s.head > 0 && s.head == s.out.count { s.out.removeAll(keepingCapacity: true); s.head = 0 }
            s.out += bytes
            return true
        }
        if taken { wake() }
        return taken
    }

    /// Writes what waits; false when the socket failed.
    func send() -> Bool {
        state.withLock { s -> Bool in
            guard s.out.count > s.head else { return true }
            let n = s.out.withUnsafeBytes { raw in
                Glibc.send(fd, raw.baseAddress! + s.head, s.out.count - s.head, Int32(MSG_NOSIGNAL))
            }
            if n < 0 { return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR }
            s.head += n
            if s.head == s.out.count { s.out.removeAll(keepingCapacity: true); s.head = 0 }
            // Bytes sent make room: compact now and then, so a long session's buffer stays small.
            if s.head > 64 * 1024 { s.out.removeFirst(s.head); s.head = 0 }
            return true
        }
    }

    /// Writes bytes read from the socket to the device, reading no more until that is done;
    /// false when this client only reads.
    func write(_ bytes: [UInt8], options: SerialLink.WriteOptions) -> Bool {
        guard let session = state.withLock({ s -> SerialSession? in
            guard let session = s.session, session.isWriter else { return nil }
            s.writing = true
            return session
        }) else { return false }
        Task {
            var failed = false
            do throws(BLEError) {
                try await session.write(bytes, options: options)
            } catch {
                // The link counted and logged the bytes; the client goes, as a serial line that failed.
                failed = true
            }
            state.withLock { s in
                s.writing = false
                if failed { s.finishing = true }
            }
            wake()
        }
        return true
    }

    /// To be closed once its waiting bytes are sent (the link is gone, or it could not open).
    func finish() {
        state.withLock { $0.finishing = true }
        wake()
    }

    /// Closes the socket and lets go of the device's serial port.
    func closeSocket() {
        let (open, session) = state.withLock { s -> (Bool, SerialSession?) in
            guard !s.closed else { return (false, nil) }
            s.closed = true
            s.out = []
            s.head = 0
            defer { s.session = nil }
            return (true, s.session)
        }
        guard open else { return }
        close(fd)
        if let session { Task { await session.close() } }
    }
}
