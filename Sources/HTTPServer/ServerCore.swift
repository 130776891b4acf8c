import CMicroHTTPD
import Glibc
import Sockets
import Synchronization

/// Bytes read and dropped after a body passed `maxBodyBytes`, so that a client that sends its
/// whole body before reading (most do) still gets the 413. Past this the connection is closed.
let discardAllowance = 1 << 20

/// What the I/O thread (through the callbacks' `cls`) and the handler tasks share.
///
/// Locking, in one paragraph: `lifecycle` holds the daemon pointers, the stopping flag, the socket
/// loop and the connections that are suspended (waiting for a handler, or a stream waiting for
/// bytes). `MHD_suspend_connection`, `MHD_resume_connection` and the hand-over of the daemon to
/// `MHD_stop_daemon` happen only while holding it, so a resume never races the stop, every
/// suspended connection is resumed exactly once, and none is left suspended when the daemon stops
/// (MHD aborts then). The order is `lifecycle` → `StreamBody.state` and `lifecycle` → MHD's
/// internal mutex; MHD may call NOTIFY_COMPLETED, the logger and the stream free callback with
/// that mutex held, so those callbacks take no lock but leaves (`startupMessages`,
/// `StreamBody.state`). `RequestContext.state`, `StreamBody.state`, `acceptor` and the WebSocket locks
/// are leaves: never held while taking another lock.
///
/// Plain HTTP runs two daemons, fed by an `Acceptor` that reads the start of each connection: the
/// main one, and one whose pool per connection is small, for connections that open an event
/// stream or a WebSocket (an idle stream holds its pool for hours; see `FirstRequest`). Under
/// TLS there is one daemon, listening itself.
final class ServerCore: Sendable {
    let maxBodyBytes: Int
    let log: (@Sendable (String) -> Void)?
    let errorResponder: @Sendable (ServerError) -> Response
    let onRefusal: (@Sendable (ServerError, _ client: String) -> Void)?
    let handler: Handler

    private struct Lifecycle {
        /// The main daemon first, then the stream daemon if there is one.
        var daemons: [MHDHandle] = []
        var stopping = false
        /// By the `RequestContext` or `StreamBody` that suspended the connection.
        var suspended: [ObjectIdentifier: Suspension] = [:]
        /// Started by the first upgrade or stream suspension; nil again once stopping.
        var loop: SocketLoop?
    }

    private struct Suspension {
        let connection: MHDHandle
        /// A stream waiting for bytes, with the socket loop's hang-up watch on its connection.
        var stream: StreamBody?
        var watch: SocketLoop.Watch?
    }

    /// MHD's memory pool per connection (`MHD_OPTION_CONNECTION_MEMORY_LIMIT`).
    static let connectionMemoryBytes = 8 * 1024
    /// The pool per connection of the stream daemon: an idle event stream or WebSocket holds it for
    /// as long as it is open (an idle stream took 11.6 KiB with the main pool, 4.5 with this).
    /// `FirstRequest` sends it only heads that fit, with their response.
    static let streamPoolBytes = 1792

    /// The buffer of a stream response that MHD fills by calling the reader: used only on HTTP/1.0
    /// (close-delimited); chunked, MHD has the reader write into the connection's pool.
    static func streamBlockBytes(http10: Bool) -> Int { http10 ? 1024 : 64 }

    private let lifecycle = Mutex(Lifecycle())
    /// Connections MHD has open (counted by its connection notifications).
    private let connections = Atomic<Int>(0)
    /// Set by `start`: past it a request is answered 503 and its connection closed.
    private let limit = Atomic<Int>(Int.max)
    /// Set by `start`: past it a request is answered 429 and its connection closed.
    private let perClientLimit = Atomic<Int>(Int.max)
    /// Open connections by peer address. A leaf lock: taken in MHD's connection notifications.
    private let perClient = Mutex<[ClientKey: Int]>([:])
    /// Messages MHD logs while starting (the reason a bind failed); nil once started.
    private let startupMessages = Mutex<[String]?>(nil)
    /// Plain HTTP's listener; told when a connection closes (it may be waiting for room).
    private let acceptor = Mutex<Acceptor?>(nil)
    /// The stream daemon's pointer (0 without one): its responses close the connection after them.
    private let streamDaemon = Atomic<UInt>(0)

    init(
        maxBodyBytes: Int, log: (@Sendable (String) -> Void)?,
        errorResponder: @escaping @Sendable (ServerError) -> Response,
        onRefusal: (@Sendable (ServerError, _ client: String) -> Void)?, handler: @escaping Handler
    ) {
        self.maxBodyBytes = maxBodyBytes
        self.log = log
        self.errorResponder = errorResponder
        self.onRefusal = onRefusal
        self.handler = handler
    }

    // MARK: Start and stop

    /// Starts the daemon and returns the bound port. `self` is the callbacks' `cls`, unretained:
    /// `Server` keeps `self` alive and stops the daemon before letting go of it.
    func start(
        host: String, address: ListenAddress, port: UInt16, tls: TLSCredentials?, connectionLimit: Int,
        connectionReserve: Int, connectionsPerClient: Int, idleTimeoutSeconds: Int
    ) throws -> UInt16 {
        limit.store(connectionLimit, ordering: .relaxed)
        perClientLimit.store(connectionsPerClient, ordering: .relaxed)
        let capacity = connectionLimit + connectionReserve
        let settings = DaemonSettings(
            address: address, tls: tls, connectionLimit: capacity, idleTimeoutSeconds: idleTimeoutSeconds)
        guard tls == nil else {
            let daemon = try startDaemon(host: host, port: port, settings, poolBytes: Self.connectionMemoryBytes, listening: true)
            lifecycle.withLock { $0.daemons = [daemon] }
            return gw_mhd_bound_port(daemon.pointer)
        }
        let main = try startDaemon(host: host, port: port, settings, poolBytes: Self.connectionMemoryBytes, listening: false)
        lifecycle.withLock { $0.daemons = [main] }
        do {
            let stream = try startDaemon(host: host, port: port, settings, poolBytes: Self.streamPoolBytes, listening: false)
            lifecycle.withLock { $0.daemons.append(stream) }
            streamDaemon.store(UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(stream.pointer))), ordering: .relaxed)
            let listener = try Acceptor(
                host: address.literal, port: port, capacity: capacity, poolBytes: Self.streamPoolBytes,
                hooks: Acceptor.Hooks(
                    openConnections: { [unowned self] in connections.load(ordering: .relaxed) },
                    waiting: { [unowned self] peer, started in count(ClientKey(peer), opened: started) },
                    handOver: { [unowned self] fd, peer, length, verdict in
                        // MHD closes the socket if it cannot take it.
                        if MHD_add_connection((verdict == .stream ? stream : main).pointer, fd, peer, length) == .NO {
                            log?("a connection could not be handed to libmicrohttpd: \(String(cString: strerror(errno)))")
                        }
                    }))
            acceptor.withLock { $0 = listener }
            try listener.start()
            return listener.port
        } catch {
            stop()
            if let error = error as? SocketError { throw ServerStartError(host: host, port: port, reason: error.description) }
            throw error
        }
    }

    private struct DaemonSettings {
        let address: ListenAddress
        let tls: TLSCredentials?
        let connectionLimit: Int
        let idleTimeoutSeconds: Int
    }

    /// Starts a daemon: listening on the address itself (under TLS), or fed by the acceptor.
    private func startDaemon(
        host: String, port: UInt16, _ settings: DaemonSettings, poolBytes: Int, listening: Bool
    ) throws(ServerStartError) -> MHDHandle {
        let cls = Unmanaged.passUnretained(self).toOpaque()
        var flags = MHD_USE_INTERNAL_POLLING_THREAD.rawValue
            | MHD_ALLOW_SUSPEND_RESUME.rawValue | MHD_ALLOW_UPGRADE.rawValue | MHD_USE_ERROR_LOG.rawValue
        if settings.address.isIPv6 { flags |= MHD_USE_IPv6.rawValue }
        // Fed by the acceptor, a connection has its request waiting already: libmicrohttpd 0.9.75
        // then misses the first readiness now and then (its edge-triggered epoll; 256 of 10 000
        // streams hung in one of two runs), unless TURBO has it read at once. TURBO also skips
        // shutdown(SHUT_WR) before close, which close does anyway.
        if !listening { flags |= MHD_USE_NO_LISTEN_SOCKET.rawValue | MHD_USE_TURBO.rawValue }
        // Under TLS, poll: MHD relays upgraded connections through TLS itself, and in epoll mode
        // 6 of 200 WebSocket closes over TLS left the connection open (poll: 0 of 200; data, SSE
        // and WebSocket 200 of 200 in both). poll(2) costs more with many connections.
        flags |= settings.tls == nil ? MHD_USE_EPOLL.rawValue : MHD_USE_TLS.rawValue | MHD_USE_POLL.rawValue
        startupMessages.withLock { $0 = [] }
        let (daemon, startErrno) = settings.address.withSockaddrPointer { sockaddr in
            withTLSOptions(settings.tls) { tlsOptions in
                var options = [
                    // First, so that start-up messages come here too.
                    callbackOption(.EXTERNAL_LOGGER, logMessage as MHD_LogCallback, cls),
                    callbackOption(.NOTIFY_COMPLETED, requestCompleted as MHD_RequestCompletedCallback, cls),
                    callbackOption(.NOTIFY_CONNECTION, connectionNotified as MHD_NotifyConnectionCallback, cls),
                    // Path and query arrive still percent-encoded; Request decodes them per segment.
                    callbackOption(.UNESCAPE_CALLBACK, keepEscaped as UnescapeCallback, cls),
                    // The reserve beyond the limit is accepted only to be told 503 (see `admit`);
                    // past it nothing is accepted (by MHD or the acceptor): clients wait in the backlog.
                    MHD_OptionItem(option: .CONNECTION_LIMIT, value: settings.connectionLimit, ptr_value: nil),
                    MHD_OptionItem(option: .CONNECTION_TIMEOUT, value: max(0, settings.idleTimeoutSeconds), ptr_value: nil),
                    // Per connection: the request head (up to about 7.5 KB of headers in the main
                    // daemon's 8 KiB) and the response's headers. MHD's default, 32 KiB, made 10 000
                    // idle streams cost 340 MB; 8 KiB, 134 MB; the stream daemon's 1.75 KiB, 61 MB.
                    MHD_OptionItem(option: .CONNECTION_MEMORY_LIMIT, value: poolBytes, ptr_value: nil),
                ] + tlsOptions
                if listening { options.append(MHD_OptionItem(option: .SOCK_ADDR, value: 0, ptr_value: sockaddr)) }
                options.append(MHD_OptionItem(option: .END, value: 0, ptr_value: nil))
                let daemon = gw_mhd_start(flags, listening ? port : 0, accessHandler, cls, &options)
                return (daemon, errno)
            }
        }
        let messages = startupMessages.withLock { messages in
            defer { messages = nil }
            return messages ?? []
        }
        guard let daemon else {
            let reason = messages.isEmpty ? String(cString: strerror(startErrno)) : messages.joined(separator: "; ")
            throw ServerStartError(host: host, port: port, reason: reason)
        }
        return MHDHandle(pointer: daemon)
    }

    func stop() {
        // First no new connections: the acceptor hands them to the daemons.
        acceptor.withLock { $0 }?.shutDown()
        let (daemons, loop) = lifecycle.withLock { state -> ([MHDHandle], SocketLoop?) in
            guard !state.stopping else { return ([], nil) }
            state.stopping = true
            for suspension in state.suspended.values {
                if let watch = suspension.watch { state.loop?.unwatch(watch) }
                MHD_resume_connection(suspension.connection.pointer)
            }
            state.suspended.removeAll()
            defer { (state.daemons, state.loop) = ([], nil) }
            return (state.daemons, state.loop)
        }
        // Outside the lock: these join threads that may be waiting for it. WebSockets are closed
        // (1001) before the daemons stop, as MHD wants upgraded connections closed first.
        loop?.shutDown()
        for daemon in daemons { MHD_stop_daemon(daemon.pointer) }
        streamDaemon.store(0, ordering: .relaxed)
        acceptor.withLock { $0 = nil }
    }

    /// The socket loop, started on first use; nil once stopping or if it cannot start.
    private func socketLoop(_ state: inout Lifecycle) -> SocketLoop? {
        guard !state.stopping else { return nil }
        if state.loop == nil {
            do {
                state.loop = try SocketLoop { [weak self] token in self?.clientHungUp(token) }
            } catch {
                log?("cannot start the WebSocket/stream I/O thread: \(error)")
            }
        }
        return state.loop
    }

    // MARK: The access handler, on the I/O thread

    /// One call of MHD's access handler: first with the headers (no context yet), then once per
    /// piece of body, then with nothing when the request is complete, and once more after a
    /// resume.
    func access(
        connection: OpaquePointer, url: UnsafePointer<CChar>?, method: UnsafePointer<CChar>?,
        version: UnsafePointer<CChar>?, upload: UnsafePointer<CChar>?, uploadSize: UnsafeMutablePointer<Int>,
        slot: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    ) -> MHD_Result {
        guard let existing = slot.pointee else {
            let context = RequestContext(connection: MHDHandle(pointer: connection))
            slot.pointee = Unmanaged.passRetained(context).toOpaque()  // released in requestCompleted
            return admit(connection: connection, context: context)
        }
        let context = Unmanaged<RequestContext>.fromOpaque(existing).takeUnretainedValue()
        if uploadSize.pointee > 0 {
            guard let upload else { return .NO }
            let chunk = UnsafeRawBufferPointer(start: upload, count: uploadSize.pointee)
            uploadSize.pointee = 0
            return context.receive(chunk, limit: maxBodyBytes) ? .YES : .NO
        }
        switch context.takeNextStep() {
        case .send(let response):
            return queue(response, on: connection, http10: version.map { strcmp($0, "HTTP/1.0") == 0 } ?? false)
        case .bodyTooLarge:
            return queue(refusal(.bodyTooLarge(limit: maxBodyBytes), connection), on: connection)
        case .shuttingDown:
            return queue(Self.shuttingDown, on: connection)
        case .run(let body):
            let request: Request
            switch readRequest(connection: connection, url: url, method: method, version: version, body: body) {
            case .success(let read): request = read
            case .failure(let error): return queue(refusal(error, connection), on: connection)
            }
            guard suspend(context) else { return queue(Self.shuttingDown, on: connection) }
            Task {
                let response = await handler(request)
                complete(context, with: response)
            }
            return .YES
        }
    }

    /// The headers are in: refuse a declared body over the limit before it is read when the client
    /// waits for `100 Continue` or the body is beyond what we are willing to drain (MHD then closes
    /// the connection); otherwise let it come and drop it.
    private func admit(connection: OpaquePointer, context: RequestContext) -> MHD_Result {
        let limit = limit.load(ordering: .relaxed)
        if connections.load(ordering: .relaxed) > limit {
            var response = refusal(.tooManyConnections(limit: limit), connection)
            response.headers += [(name: "Retry-After", value: "5"), (name: "Connection", value: "close")]
            return queue(response, on: connection)
        }
        let perClientLimit = perClientLimit.load(ordering: .relaxed)
        if perClientLimit < Int.max, let key = gw_mhd_client_address(connection).flatMap(ClientKey.init),
            perClient.withLock({ $0[key] ?? 0 }) > perClientLimit {
            var response = refusal(.tooManyConnectionsFromClient(limit: perClientLimit), connection)
            response.headers += [(name: "Retry-After", value: "5"), (name: "Connection", value: "close")]
            return queue(response, on: connection)
        }
        guard let declared = headerValue(connection, "Content-Length").flatMap({ Int($0) }),
            declared > maxBodyBytes
        else { return .YES }
        let waitsForContinue = headerValue(connection, "Expect")?.lowercased() == "100-continue"
        if waitsForContinue || declared - maxBodyBytes > discardAllowance {
            return queue(refusal(.bodyTooLarge(limit: maxBodyBytes), connection), on: connection)
        }
        context.markOverLimit()
        return .YES
    }

    /// A request the server answers itself: told to `onRefusal` (with the peer's address, no
    /// port), then rendered.
    private func refusal(_ error: ServerError, _ connection: OpaquePointer) -> Response {
        if let onRefusal {
            let peer = gw_mhd_client_address(connection).map(describePeer) ?? ""
            onRefusal(error, Request.clientAddress(of: peer))
        }
        return errorResponder(error)
    }

    /// Suspends the connection while its handler runs; false once stopping.
    private func suspend(_ context: RequestContext) -> Bool {
        lifecycle.withLock { state in
            guard !state.stopping else { return false }
            MHD_suspend_connection(context.connection.pointer)
            state.suspended[ObjectIdentifier(context)] = Suspension(connection: context.connection)
            return true
        }
    }

    /// From the handler's task: store the response and resume the connection, unless `stop`
    /// already resumed it (then the response is dropped).
    private func complete(_ context: RequestContext, with response: Response) {
        context.answer(response)
        let resumed = lifecycle.withLock { state in
            guard state.suspended.removeValue(forKey: ObjectIdentifier(context)) != nil else { return false }
            MHD_resume_connection(context.connection.pointer)
            return true
        }
        if !resumed { response.abandon() }
    }

    // MARK: Streams and upgrades

    enum StreamSuspension {
        case suspended
        /// Bytes arrived or the stream ended meanwhile.
        case readAgain
        case stopping
    }

    /// On the I/O thread, from the stream reader: the buffer is empty, so suspend the connection
    /// and watch for the client's hang-up, unless bytes arrived meanwhile or the server is stopping.
    func suspendStream(_ body: StreamBody, connection: MHDHandle) -> StreamSuspension {
        lifecycle.withLock { state in
            guard !state.stopping else { return .stopping }
            guard body.markSuspendedIfEmpty() else { return .readAgain }
            MHD_suspend_connection(connection.pointer)
            let fd = gw_mhd_connection_fd(connection.pointer)
            let watch = fd >= 0 ? socketLoop(&state)?.watchHangUp(fd) : nil
            state.suspended[ObjectIdentifier(body)] = Suspension(connection: connection, stream: body, watch: watch)
            return .suspended
        }
    }

    /// From a producer: resume the stream's connection, unless `stop` already did.
    func resumeStream(_ body: StreamBody) {
        lifecycle.withLock { state in
            guard let suspension = state.suspended.removeValue(forKey: ObjectIdentifier(body)) else { return }
            if let watch = suspension.watch { state.loop?.unwatch(watch) }
            MHD_resume_connection(suspension.connection.pointer)
        }
    }

    /// From the socket loop: the client of a suspended stream hung up. The resumed reader then
    /// aborts the response and MHD closes the connection.
    private func clientHungUp(_ token: UInt64) {
        lifecycle.withLock { state in
            guard let (key, suspension) = state.suspended.first(where: { $0.value.watch?.token == token }) else {
                return
            }
            state.suspended[key] = nil
            if let watch = suspension.watch { state.loop?.unwatch(watch) }
            suspension.stream?.markClientGone()
            MHD_resume_connection(suspension.connection.pointer)
        }
    }

    /// On the I/O thread, from MHD's upgrade callback: hands the socket to the socket loop and
    /// starts the handler, which owns the socket until it returns. `transport` is the
    /// connection's TCP socket: `fd` itself, or under TLS the one MHD writes the records to
    /// (`fd` is then our end of a socketpair).
    func adopt(fd: Int32, transport: Int32, handle: UpgradeHandle, extra: [UInt8], upgrade: WebSocketUpgrade?) {
        guard let upgrade, let loop = lifecycle.withLock({ socketLoop(&$0) }) else {
            _ = gw_mhd_upgrade_close(handle.pointer)
            return
        }
        // Small frames go out at once: with Nagle, a reply followed by an event waited for the
        // peer's delayed ACK (about 40 ms per round trip, measured, with and without TLS).
        var one: Int32 = 1
        setsockopt(transport, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        let socket = WebSocket(settings: upgrade, token: loop.makeToken(), loop: loop)
        // Before the loop has the socket: no message comes before `onMessage` is set.
        if case .opened(let opened) = upgrade.start { opened(socket) }
        guard loop.add(socket, fd: fd, handle: handle, extra: extra) else {
            _ = gw_mhd_upgrade_close(handle.pointer)
            socket.finish(code: WebSocketCloseCode.abnormal)
            return
        }
        if case .task(let handler) = upgrade.start {
            Task {
                await handler(socket)
                socket.close()
            }
        }
    }

    private static let shuttingDown = Response(status: 503, headers: [(name: "Connection", value: "close")])

    /// Hands a response to MHD. The one place a `Response` becomes an MHD response. `http10`: the
    /// request's version, which a stream response needs.
    private func queue(_ response: Response, on connection: OpaquePointer, http10: Bool = false) -> MHD_Result {
        let response = response.rendered(by: errorResponder)
        var status = response.status
        let created: OpaquePointer?
        switch response.kind {
        case .bytes, .error:
            if !(200...999).contains(status) {
                log?("response status \(status) is not sendable; sending 500")
                status = 500
            }
            created = response.body.withUnsafeBytes { bytes in
                MHD_create_response_from_buffer(
                    bytes.count, UnsafeMutableRawPointer(mutating: bytes.baseAddress), .RESPMEM_MUST_COPY)
            }
        case .stream(let body):
            guard (200...999).contains(status) else {
                log?("stream response status \(status) is not sendable; sending 500")
                response.abandon()
                return queue(Response(status: 500), on: connection)
            }
            guard body.attach(to: self, connection: MHDHandle(pointer: connection)) else {
                log?("a StreamBody serves one response, this one is used; sending 500")
                return queue(Response(status: 500), on: connection)
            }
            // MHD_SIZE_UNKNOWN: chunked on HTTP/1.1, close-delimited on 1.0; no Content-Length.
            let cls = Unmanaged.passRetained(body).toOpaque()  // released in streamFreed
            created = MHD_create_response_from_callback(
                GW_MHD_SIZE_UNKNOWN, Self.streamBlockBytes(http10: http10), streamReader, cls, streamFreed)
            if created == nil { streamFreed(cls: cls) }
        case .webSocket:
            // The upgrade callback finds the handler in the request's context (its `answered` response).
            status = 101
            created = MHD_create_response_for_upgrade(upgraded, Unmanaged.passUnretained(self).toOpaque())
        }
        guard let mhdResponse = created else { return .NO }
        defer { MHD_destroy_response(mhdResponse) }
        var headers = response.headers
        if closesAfterResponse(connection, response) { headers.append((name: "Connection", value: "close")) }
        for (name, value) in headers where name.lowercased() != "content-length" {
            // MHD refuses names or values with CR, LF or tab: no header injection.
            if MHD_add_response_header(mhdResponse, name, value) == .NO {
                log?("response header \(name) refused")
            }
        }
        return MHD_queue_response(connection, UInt32(status), mhdResponse)
    }

    /// On the stream daemon, a connection serves one request: its pool has no room for a larger
    /// head than the first (an upgrade ends the HTTP anyway).
    private func closesAfterResponse(_ connection: OpaquePointer, _ response: Response) -> Bool {
        if case .webSocket = response.kind { return false }
        let stream = streamDaemon.load(ordering: .relaxed)
        guard stream != 0, let daemon = gw_mhd_connection_daemon(connection),
              UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(daemon))) == stream
        else { return false }
        return !response.headers.contains { $0.name.lowercased() == "connection" }
    }

    var openConnections: Int { connections.load(ordering: .relaxed) }

    #if DEBUG
    /// Set by `stallForTesting`: the I/O thread stops at the next connection it opens or closes.
    private let stalled = Atomic<Bool>(false)
    func stallForTesting() { stalled.store(true, ordering: .relaxed) }
    #endif

    func connectionChanged(_ connection: OpaquePointer?, opened: Bool) {
        #if DEBUG
        while stalled.load(ordering: .relaxed) { sleep(3600) }
        #endif
        count(connection.flatMap(gw_mhd_client_address).flatMap(ClientKey.init), opened: opened)
        if !opened { acceptor.withLock { $0 }?.connectionClosed() }
    }

    /// One connection more or less, in all and from `key`'s address.
    private func count(_ key: @autoclosure () -> ClientKey?, opened: Bool) {
        connections.add(opened ? 1 : -1, ordering: .relaxed)
        guard perClientLimit.load(ordering: .relaxed) < Int.max, let key = key() else { return }
        perClient.withLock { counts in
            let count = (counts[key] ?? 0) + (opened ? 1 : -1)
            counts[key] = count > 0 ? count : nil
        }
    }

    func record(_ message: String) {
        startupMessages.withLock { messages in
            if messages != nil && messages!.count < 8 { messages!.append(message) }
        }
        log?(message)
    }
}

/// An MHD daemon or connection pointer. Sendable because the only calls made on it off the I/O
/// thread, `MHD_resume_connection` and `MHD_stop_daemon`, are thread-safe, and `lifecycle`
/// guarantees that the pointee is alive when they are made.
struct MHDHandle: @unchecked Sendable {
    let pointer: OpaquePointer
}
