import CMicroHTTPD
import Glibc

// The C callbacks MHD calls, and the options that hand them over (`ServerCore.start`). They
// capture nothing; `cls` is the ServerCore (or, for a stream's reader, its StreamBody).

typealias UnescapeCallback = @convention(c) (
    UnsafeMutableRawPointer?, OpaquePointer?, UnsafeMutablePointer<CChar>?
) -> Int

/// An option taking a callback and its `cls`; MHD reads the callback from the `intptr_t` field.
func callbackOption<Callback>(
    _ option: MHD_OPTION, _ callback: Callback, _ cls: UnsafeMutableRawPointer
) -> MHD_OptionItem {
    precondition(MemoryLayout<Callback>.size == MemoryLayout<Int>.size)
    return MHD_OptionItem(option: option, value: unsafeBitCast(callback, to: Int.self), ptr_value: cls)
}

/// The certificate and key options, for `body` to start the daemon with: MHD copies both
/// during start.
func withTLSOptions<Result>(_ tls: TLSCredentials?, _ body: ([MHD_OptionItem]) -> Result) -> Result {
    guard let tls else { return body([]) }
    return tls.certificatePEM.withCString { certificate in
        tls.keyPEM.withCString { key in
            body([
                MHD_OptionItem(option: .HTTPS_MEM_CERT, value: 0, ptr_value: UnsafeMutableRawPointer(mutating: certificate)),
                MHD_OptionItem(option: .HTTPS_MEM_KEY, value: 0, ptr_value: UnsafeMutableRawPointer(mutating: key)),
            ])
        }
    }
}

func accessHandler(
    cls: UnsafeMutableRawPointer?, connection: OpaquePointer?, url: UnsafePointer<CChar>?,
    method: UnsafePointer<CChar>?, version: UnsafePointer<CChar>?, upload: UnsafePointer<CChar>?,
    uploadSize: UnsafeMutablePointer<Int>?, slot: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> MHD_Result {
    guard let cls, let connection, let uploadSize, let slot else { return .NO }
    return Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue().access(
        connection: connection, url: url, method: method, version: version, upload: upload, uploadSize: uploadSize,
        slot: slot)
}

/// Counts connections as MHD opens and closes them (atomically: may run with MHD's mutex held).
func connectionNotified(
    cls: UnsafeMutableRawPointer?, connection: OpaquePointer?, socketContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?,
    code: MHD_ConnectionNotificationCode
) {
    guard let cls else { return }
    Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue().connectionChanged(
        connection, opened: code.rawValue == 0)  // MHD_CONNECTION_NOTIFY_STARTED
}

/// Releases the request's context. Called with MHD's mutex held: takes no lock.
func requestCompleted(
    cls: UnsafeMutableRawPointer?, connection: OpaquePointer?,
    slot: UnsafeMutablePointer<UnsafeMutableRawPointer?>?, reason: MHD_RequestTerminationCode
) {
    guard let slot, let context = slot.pointee else { return }
    slot.pointee = nil
    Unmanaged<RequestContext>.fromOpaque(context).release()
}

/// MHD's content reader for a `StreamBody` (`cls`, retained): bytes if there are any; otherwise
/// suspend and return 0 (the producer resumes), never 0 without suspending (MHD would spin).
func streamReader(
    cls: UnsafeMutableRawPointer?, position: UInt64, buffer: UnsafeMutablePointer<CChar>?, max: Int
) -> Int {
    guard let cls, let buffer else { return GW_MHD_CONTENT_READER_END_WITH_ERROR }
    let body = Unmanaged<StreamBody>.fromOpaque(cls).takeUnretainedValue()
    let destination = UnsafeMutableRawBufferPointer(start: buffer, count: max)
    while true {
        switch body.read(into: destination) {
        case .bytes(let count):
            return count
        case .end:
            return GW_MHD_CONTENT_READER_END_OF_STREAM
        case .clientGone:
            // Ending the stream normally: MHD's "application error" would log every client that
            // closes its event stream, the usual way for one to end.
            return GW_MHD_CONTENT_READER_END_OF_STREAM
        case .empty(let server, let connection):
            switch server.suspendStream(body, connection: connection) {
            case .suspended: return 0
            case .readAgain: continue
            case .stopping: return GW_MHD_CONTENT_READER_END_OF_STREAM
            }
        }
    }
}

/// MHD is done with a stream response (sent, client gone, or daemon stopped). May run with MHD's
/// mutex held: `finish` takes only the stream's leaf lock.
func streamFreed(cls: UnsafeMutableRawPointer?) {
    guard let cls else { return }
    let body = Unmanaged<StreamBody>.fromOpaque(cls).takeRetainedValue()
    body.finish()
}

/// MHD sent the 101: the connection's socket is ours (non-blocking); `extraIn` holds bytes
/// already read past the request, the start of the first frame.
func upgraded(
    cls: UnsafeMutableRawPointer?, connection: OpaquePointer?, requestContext: UnsafeMutableRawPointer?,
    extraIn: UnsafePointer<CChar>?, extraInSize: Int, socket: Int32, handle: OpaquePointer?
) {
    guard let cls, let handle else { return }
    let upgrade = requestContext.flatMap { Unmanaged<RequestContext>.fromOpaque($0).takeUnretainedValue().takeWebSocketUpgrade() }
    let extra = extraIn.map { Array(UnsafeRawBufferPointer(start: $0, count: extraInSize)) } ?? []
    Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue().adopt(
        fd: socket, transport: connection.map(gw_mhd_connection_fd) ?? socket, handle: UpgradeHandle(pointer: handle),
        extra: extra, upgrade: upgrade)
}

func keepEscaped(
    cls: UnsafeMutableRawPointer?, connection: OpaquePointer?, text: UnsafeMutablePointer<CChar>?
) -> Int {
    text.map { strlen($0) } ?? 0
}

func logMessage(cls: UnsafeMutableRawPointer?, format: UnsafePointer<CChar>?, arguments: CVaListPointer?) {
    guard let cls, let format, let arguments else { return }
    var buffer = [CChar](repeating: 0, count: 512)
    let message = buffer.withUnsafeMutableBufferPointer { buffer in
        _ = vsnprintf(buffer.baseAddress, buffer.count, format, arguments)
        return String(cString: buffer.baseAddress!)
    }
    let trimmed = message.hasSuffix("\n") ? String(message.dropLast()) : message
    Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue().record(trimmed)
}
