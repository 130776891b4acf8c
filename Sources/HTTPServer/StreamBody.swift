import Synchronization
import Threading

/// The body of a response produced over time (Server-Sent Events), for `Response.stream`.
///
/// Producers write into a bounded buffer; the server sends from it. When the buffer is empty the
/// connection is suspended (no thread waits), and the next write or `close` resumes it. Overflow
/// policy is the producer's: `write` refuses what does not fit, and the producer drops the event or
/// closes the stream.
///
/// A suspended connection does not notice by itself that the client left; the server watches its
/// socket for the hang-up. A client that vanishes without closing (cable pulled) is found only
/// when a write fails, so send a heartbeat comment (`:\n\n`) every few seconds.
public final class StreamBody: Sendable {
    public let capacityBytes: Int

    /// Why `read` has nothing to give.
    enum Read: Sendable {
        case bytes(Int)
        /// Empty and open: suspend the connection.
        case empty(ServerCore, MHDHandle)
        /// Closed and drained: end the response.
        case end
        /// The client hung up while the connection was suspended: abort the response.
        case clientGone
    }

    fileprivate struct State {
        var buffer: [UInt8] = []
        /// Where the unsent bytes of `buffer` start.
        var head = 0
        var closed = false
        var clientGone = false
        /// The response is over; set once.
        var finished = false
        /// The connection is suspended waiting for bytes; the next write resumes it.
        var suspended = false
        /// The server and connection sending this body; set when the response is queued.
        var server: ServerCore?
        var connection: MHDHandle?
        var closeHandlers: [@Sendable () -> Void] = []
        /// A `write` was refused since the buffer last drained: tell `onWritable` when it has room.
        var refused = false

        var buffered: Int { buffer.count - head }

        /// The server to resume the connection through, if it is suspended waiting for bytes.
        mutating func takeSuspension() -> ServerCore? {
            guard suspended else { return nil }
            suspended = false
            return server
        }
    }

    private let state = Mutex(State())
    private let writable = HandlerSlot<Void>()

    /// - Parameter capacityBytes: the most bytes buffered and not yet sent.
    public init(capacityBytes: Int = 256 * 1024) {
        self.capacityBytes = max(1, capacityBytes)
    }

    /// Appends bytes; returns false (and appends nothing) if the buffer would exceed capacity
    /// or the stream is closed — the caller decides what to drop or whether to close. With
    /// `flush: false` a suspended connection is not woken until `flush()`, so that a producer
    /// with several events for many streams wakes each once.
    @discardableResult
    public func write(_ bytes: [UInt8], flush: Bool = true) -> Bool {
        write(count: bytes.count, flush: flush) { $0 += bytes }
    }

    /// Appends `count` bytes that `write` appends in place, under the body's lock (so it must
    /// only append); otherwise as `write(_:flush:)`.
    @discardableResult
    public func write(count: Int, flush: Bool = true, _ write: (inout [UInt8]) -> Void) -> Bool {
        let (accepted, resume) = state.withLock { state -> (Bool, ServerCore?) in
            guard !state.closed, !state.finished, state.buffered + count <= capacityBytes else {
                if !state.closed && !state.finished { state.refused = true }
                return (false, nil)
            }
            guard count > 0 else { return (true, nil) }
            if state.head > 0 && state.head * 2 >= state.buffer.count {
                state.buffer.removeFirst(state.head)
                state.head = 0
            }
            let start = state.buffer.count
            write(&state.buffer)
            precondition(state.buffer.count - start == count, "write(count:) wrote another length")
            return (true, flush ? state.takeSuspension() : nil)
        }
        resume?.resumeStream(self)
        return accepted
    }

    /// Wakes the connection for what `write(_:flush: false)` left.
    public func flush() {
        let resume = state.withLock { state -> ServerCore? in
            state.buffered > 0 ? state.takeSuspension() : nil
        }
        resume?.resumeStream(self)
    }

    /// Ends the response once the buffered bytes are sent. Later writes are refused.
    public func close() {
        let resume = state.withLock { state -> ServerCore? in
            state.closed = true
            return state.takeSuspension()
        }
        resume?.resumeStream(self)
    }

    /// Runs `handler` (on the server's I/O thread; it must not block) each time the buffer, after
    /// refusing a `write`, has drained to half its capacity: a producer that keeps a queue of its
    /// own writes again then, without polling.
    public func onWritable(_ handler: @escaping @Sendable () -> Void) {
        writable.set { _ in handler() }
    }

    /// True once closed by either side: `close()`, the client gone, or the server stopped.
    public var isClosed: Bool {
        state.withLock { $0.closed || $0.finished }
    }

    /// Bytes written and not yet handed to the connection.
    public var bufferedBytes: Int {
        state.withLock { $0.buffered }
    }

    /// Runs `handler` once, when the response is over: everything sent after `close()`, the client
    /// gone, or the server stopped; at once if that already happened. Handlers run as tasks of
    /// their own, never on the server's I/O thread.
    public func onClose(_ handler: @escaping @Sendable () -> Void) {
        let finished = state.withLock { state in
            if !state.finished { state.closeHandlers.append(handler) }
            return state.finished
        }
        if finished { handler() }
    }

    // MARK: For ServerCore

    /// Binds the body to its connection; false if it already serves one.
    func attach(to server: ServerCore, connection: MHDHandle) -> Bool {
        state.withLock { state in
            guard state.server == nil, !state.finished else { return false }
            state.server = server
            state.connection = connection
            return true
        }
    }

    /// Moves buffered bytes into `destination` (on the I/O thread).
    func read(into destination: UnsafeMutableRawBufferPointer) -> Read {
        let (read, drained) = state.withLock { state -> (Read, Bool) in
            let read = state.read(into: destination)
            guard case .bytes = read, state.refused, state.buffered <= capacityBytes / 2 else { return (read, false) }
            state.refused = false
            return (read, true)
        }
        if drained { writable(()) }
        return read
    }
}

extension StreamBody.State {
    /// Moves buffered bytes into `destination`.
    fileprivate mutating func read(into destination: UnsafeMutableRawBufferPointer) -> StreamBody.Read {
        if clientGone { return .clientGone }
        if finished { return .end }
        guard buffered > 0 else {
            guard !closed, let server, let connection else { return .end }
            return .empty(server, connection)
        }
        let count = min(destination.count, buffered)
        let start = head
        buffer.withUnsafeBytes { source in
            destination.copyMemory(from: UnsafeRawBufferPointer(rebasing: source[start..<start + count]))
        }
        head += count
        if head == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            head = 0
        }
        return .bytes(count)
    }
}

extension StreamBody {

    /// Marks the connection suspended if there is still nothing to send; false if there is (or
    /// the stream ended meanwhile): read again instead. Called with the server's lifecycle lock
    /// held, so that a write cannot resume before the suspension is registered.
    func markSuspendedIfEmpty() -> Bool {
        state.withLock { state in
            guard state.buffered == 0, !state.closed, !state.finished, !state.clientGone else { return false }
            state.suspended = true
            return true
        }
    }

    /// The client hung up while suspended (the server resumes the connection next).
    func markClientGone() {
        state.withLock { state in
            state.clientGone = true
            state.suspended = false
        }
    }

    /// The response is over (MHD freed it, or it will never be sent): closed for good, handlers run.
    func finish() {
        let handlers = state.withLock { state -> [@Sendable () -> Void] in
            guard !state.finished else { return [] }
            state.finished = true
            state.suspended = false
            state.server = nil
            state.connection = nil
            state.buffer = []
            state.head = 0
            state.refused = false
            defer { state.closeHandlers = [] }
            return state.closeHandlers
        }
        writable.set(nil)
        for handler in handlers { Task { handler() } }
    }
}
