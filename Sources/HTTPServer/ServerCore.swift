import CMicroHTTPD
import Glibc
import Synchronization

/// Bytes read and dropped after a body passed `maxBodyBytes`, so that a client that sends its
/// whole body before reading (most do) still gets the 413. Past this the connection is closed.
let discardAllowance = 1 << 20

/// What the I/O thread (through the callbacks' `cls`) and the handler tasks share.
///
/// Locking, in one paragraph: `lifecycle` holds the daemon pointer, the stopping flag and the
/// requests whose connection is suspended. `MHD_suspend_connection`, `MHD_resume_connection` and
/// the hand-over of the daemon to `MHD_stop_daemon` happen only while holding it, so a resume
/// never races the stop, every suspended connection is resumed exactly once, and none is left
/// suspended when the daemon stops (MHD aborts then). The order is `lifecycle` → MHD's internal
/// mutex; MHD may call NOTIFY_COMPLETED and the logger with that mutex held, so those two callbacks
/// take no lock but the leaf `startupMessages`. `RequestContext.state` is never held while taking
/// another lock.
final class ServerCore: Sendable {
    let maxBodyBytes: Int
    let log: (@Sendable (String) -> Void)?
    let errorResponder: @Sendable (ServerError) -> Response
    let handler: Handler

    private struct Lifecycle {
        var daemon: MHDHandle?
        var stopping = false
        var suspended: [ObjectIdentifier: RequestContext] = [:]
    }

    private let lifecycle = Mutex(Lifecycle())
    /// Messages MHD logs while starting (the reason a bind failed); nil once started.
    private let startupMessages = Mutex<[String]?>(nil)

    init(
        maxBodyBytes: Int, log: (@Sendable (String) -> Void)?,
        errorResponder: @escaping @Sendable (ServerError) -> Response, handler: @escaping Handler
    ) {
        self.maxBodyBytes = maxBodyBytes
        self.log = log
        self.errorResponder = errorResponder
        self.handler = handler
    }

    // MARK: Start and stop

    /// Starts the daemon and returns the bound port. `self` is the callbacks' `cls`, unretained:
    /// `Server` keeps `self` alive and stops the daemon before letting go of it.
    func start(
        host: String, address: ListenAddress, port: UInt16, connectionLimit: Int, idleTimeoutSeconds: Int
    ) throws -> UInt16 {
        let cls = Unmanaged.passUnretained(self).toOpaque()
        var flags = MHD_USE_INTERNAL_POLLING_THREAD.rawValue | MHD_USE_EPOLL.rawValue
            | MHD_ALLOW_SUSPEND_RESUME.rawValue | MHD_ALLOW_UPGRADE.rawValue | MHD_USE_ERROR_LOG.rawValue
        if address.isIPv6 { flags |= MHD_USE_IPv6.rawValue }
        startupMessages.withLock { $0 = [] }
        let (daemon, startErrno) = address.withSockaddrPointer { sockaddr in
            var options = [
                // First, so that start-up messages come here too.
                callbackOption(.EXTERNAL_LOGGER, logMessage as MHD_LogCallback, cls),
                callbackOption(.NOTIFY_COMPLETED, requestCompleted as MHD_RequestCompletedCallback, cls),
                // Path and query arrive still percent-encoded; Request decodes them per segment.
                callbackOption(.UNESCAPE_CALLBACK, keepEscaped as UnescapeCallback, cls),
                MHD_OptionItem(option: .CONNECTION_LIMIT, value: max(1, connectionLimit), ptr_value: nil),
                MHD_OptionItem(option: .CONNECTION_TIMEOUT, value: max(0, idleTimeoutSeconds), ptr_value: nil),
                MHD_OptionItem(option: .SOCK_ADDR, value: 0, ptr_value: sockaddr),
                MHD_OptionItem(option: .END, value: 0, ptr_value: nil),
            ]
            let daemon = gw_mhd_start(flags, port, accessHandler, cls, &options)
            return (daemon, errno)
        }
        let messages = startupMessages.withLock { messages in
            defer { messages = nil }
            return messages ?? []
        }
        guard let daemon else {
            let reason = messages.isEmpty ? String(cString: strerror(startErrno)) : messages.joined(separator: "; ")
            throw ServerStartError(host: host, port: port, reason: reason)
        }
        lifecycle.withLock { $0.daemon = MHDHandle(pointer: daemon) }
        return gw_mhd_bound_port(daemon)
    }

    func stop() {
        let daemon = lifecycle.withLock { state -> MHDHandle? in
            guard !state.stopping else { return nil }
            state.stopping = true
            for context in state.suspended.values {
                MHD_resume_connection(context.connection.pointer)
            }
            state.suspended.removeAll()
            let daemon = state.daemon
            state.daemon = nil
            return daemon
        }
        // Outside the lock: this joins the I/O thread, which may be waiting for it.
        if let daemon { MHD_stop_daemon(daemon.pointer) }
    }

    // MARK: The access handler, on the I/O thread

    /// One call of MHD's access handler: first with the headers (no context yet), then once per
    /// piece of body, then with nothing when the request is complete, and once more after a
    /// resume.
    func access(
        connection: OpaquePointer, url: UnsafePointer<CChar>?, method: UnsafePointer<CChar>?,
        upload: UnsafePointer<CChar>?, uploadSize: UnsafeMutablePointer<Int>,
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
            return queue(response, on: connection)
        case .bodyTooLarge:
            return queue(errorResponder(.bodyTooLarge(limit: maxBodyBytes)), on: connection)
        case .shuttingDown:
            return queue(Self.shuttingDown, on: connection)
        case .run(let body):
            let request: Request
            switch readRequest(connection: connection, url: url, method: method, body: body) {
            case .success(let read): request = read
            case .failure(let error): return queue(errorResponder(error), on: connection)
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
        guard let declared = headerValue(connection, "Content-Length").flatMap({ Int($0) }),
            declared > maxBodyBytes
        else { return .YES }
        let waitsForContinue = headerValue(connection, "Expect")?.lowercased() == "100-continue"
        if waitsForContinue || declared - maxBodyBytes > discardAllowance {
            return queue(errorResponder(.bodyTooLarge(limit: maxBodyBytes)), on: connection)
        }
        context.markOverLimit()
        return .YES
    }

    /// Suspends the connection while its handler runs; false once stopping.
    private func suspend(_ context: RequestContext) -> Bool {
        lifecycle.withLock { state in
            guard !state.stopping else { return false }
            MHD_suspend_connection(context.connection.pointer)
            state.suspended[ObjectIdentifier(context)] = context
            return true
        }
    }

    /// From the handler's task: store the response and resume the connection, unless `stop`
    /// already resumed it.
    private func complete(_ context: RequestContext, with response: Response) {
        context.answer(response)
        lifecycle.withLock { state in
            guard state.suspended.removeValue(forKey: ObjectIdentifier(context)) != nil else { return }
            MHD_resume_connection(context.connection.pointer)
        }
    }

    private static let shuttingDown = Response(status: 503, headers: [(name: "Connection", value: "close")])

    /// Hands a response to MHD. The one place a `Response` becomes an MHD response; streamed
    /// bodies and upgrades will branch here.
    private func queue(_ response: Response, on connection: OpaquePointer) -> MHD_Result {
        var status = response.status
        if !(200...999).contains(status) {
            log?("response status \(status) is not sendable; sending 500")
            status = 500
        }
        let created = response.body.withUnsafeBytes { bytes in
            MHD_create_response_from_buffer(
                bytes.count, UnsafeMutableRawPointer(mutating: bytes.baseAddress), .RESPMEM_MUST_COPY)
        }
        guard let mhdResponse = created else { return .NO }
        defer { MHD_destroy_response(mhdResponse) }
        for (name, value) in response.headers where name.lowercased() != "content-length" {
            // MHD refuses names or values with CR, LF or tab: no header injection.
            if MHD_add_response_header(mhdResponse, name, value) == .NO {
                log?("response header \(name) refused")
            }
        }
        return MHD_queue_response(connection, UInt32(status), mhdResponse)
    }

    fileprivate func record(_ message: String) {
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

// MARK: C callbacks. They capture nothing; `cls` is the ServerCore.

private typealias UnescapeCallback = @convention(c) (
    UnsafeMutableRawPointer?, OpaquePointer?, UnsafeMutablePointer<CChar>?
) -> Int

/// An option taking a callback and its `cls`; MHD reads the callback from the `intptr_t` field.
private func callbackOption<Callback>(
    _ option: MHD_OPTION, _ callback: Callback, _ cls: UnsafeMutableRawPointer
) -> MHD_OptionItem {
    precondition(MemoryLayout<Callback>.size == MemoryLayout<Int>.size)
    return MHD_OptionItem(option: option, value: unsafeBitCast(callback, to: Int.self), ptr_value: cls)
}

private func accessHandler(
    cls: UnsafeMutableRawPointer?, connection: OpaquePointer?, url: UnsafePointer<CChar>?,
    method: UnsafePointer<CChar>?, version: UnsafePointer<CChar>?, upload: UnsafePointer<CChar>?,
    uploadSize: UnsafeMutablePointer<Int>?, slot: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> MHD_Result {
    guard let cls, let connection, let uploadSize, let slot else { return .NO }
    return Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue().access(
        connection: connection, url: url, method: method, upload: upload, uploadSize: uploadSize, slot: slot)
}

/// Releases the request's context. Called with MHD's mutex held: takes no lock.
private func requestCompleted(
    cls: UnsafeMutableRawPointer?, connection: OpaquePointer?,
    slot: UnsafeMutablePointer<UnsafeMutableRawPointer?>?, reason: MHD_RequestTerminationCode
) {
    guard let slot, let context = slot.pointee else { return }
    slot.pointee = nil
    Unmanaged<RequestContext>.fromOpaque(context).release()
}

private func keepEscaped(
    cls: UnsafeMutableRawPointer?, connection: OpaquePointer?, text: UnsafeMutablePointer<CChar>?
) -> Int {
    text.map { strlen($0) } ?? 0
}

private func logMessage(cls: UnsafeMutableRawPointer?, format: UnsafePointer<CChar>?, arguments: CVaListPointer?) {
    guard let cls, let format, let arguments else { return }
    var buffer = [CChar](repeating: 0, count: 512)
    let message = buffer.withUnsafeMutableBufferPointer { buffer in
        _ = vsnprintf(buffer.baseAddress, buffer.count, format, arguments)
        return String(cString: buffer.baseAddress!)
    }
    let trimmed = message.hasSuffix("\n") ? String(message.dropLast()) : message
    Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue().record(trimmed)
}
