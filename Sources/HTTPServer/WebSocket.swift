import Synchronization
import Threading

/// A complete (reassembled) WebSocket message.
public enum WebSocketMessage: Sendable, Equatable {
    case text(String)
    case binary([UInt8])
}

/// What `Response.webSocket` asks for, carried to the upgrade.
struct WebSocketUpgrade: Sendable {
    let maxMessageBytes: Int
    let pingInterval: Duration
    let sendBufferBytes: Int
    let start: Start

    enum Start: Sendable {
        /// Runs in a task for as long as the socket is open, reading `messages`; the socket closes
        /// when it returns.
        case task(@Sendable (WebSocket) async -> Void)
        /// Called once on the server's I/O thread, before any message, to set `onMessage` and
        /// `onClose`; nothing waits while the socket is idle.
        case opened(@Sendable (WebSocket) -> Void)
    }
}

/// The server side of a WebSocket (RFC 6455) after an upgrade; see `Response.webSocket`.
///
/// The server's socket thread does all I/O: `send` only queues (bounded), incoming messages arrive
/// on `messages` (a socket with a handler task) or at `onMessage` (a socket opened with `onOpen`).
/// The connection is kept alive with pings, and closed when the handler returns or by `close`.
public final class WebSocket: Sendable {
    /// Complete messages from the client, in order; finishes when the socket closes. Holds up to
    /// `messageQueueLimit` messages and `messageQueueBytes` bytes waiting for the handler: one
    /// that falls further behind gets the socket closed with 1008 rather than holding unbounded
    /// memory. A socket opened with `onOpen` has none (an empty sequence): see `onMessage`.
    public var messages: Messages { Messages(socket: self, stream: stream ?? AsyncStream { $0.finish() }) }
    /// Only for a handler task: an idle socket of `onOpen` keeps neither.
    private let stream: AsyncStream<WebSocketMessage>?
    private let continuation: AsyncStream<WebSocketMessage>.Continuation?
    /// Messages delivered and not yet taken by the handler, and, without a handler task, the
    /// messages themselves and the task handling them.
    private let inbox = Mutex(Inbox())
    let settings: WebSocketUpgrade
    /// The socket loop's id for this socket.
    let token: UInt64
    private let loop: SocketLoop
    private let state = Mutex(State())
    private let writable = HandlerSlot<Void>()

    /// Messages waiting for the handler before the socket is closed with 1008.
    static let messageQueueLimit = 64
    /// What the queued messages may hold at most, whatever their count: with 64 KiB messages
    /// 64 waiting would pin 4 MiB per socket.
    static let messageQueueBytes = 256 * 1024

    /// `messages`: the handler's side of the queue, which gives back each message's place.
    public struct Messages: AsyncSequence, Sendable {
        public typealias Element = WebSocketMessage
        let socket: WebSocket
        let stream: AsyncStream<WebSocketMessage>

        public struct AsyncIterator: AsyncIteratorProtocol {
            let socket: WebSocket
            var base: AsyncStream<WebSocketMessage>.AsyncIterator

            public mutating func next() async -> WebSocketMessage? {
                let message = await base.next()
                if let message { socket.taken(message) }
                return message
            }
        }

        public func makeAsyncIterator() -> AsyncIterator {
            AsyncIterator(socket: socket, base: stream.makeAsyncIterator())
        }
    }

    enum Phase: Equatable {
        case open
        /// A close frame with this code is queued or sent; nothing else goes out.
        case closing(code: UInt16)
        case closed(code: UInt16)
    }

    struct State {
        var outgoing: [UInt8] = []
        /// Where the unsent bytes of `outgoing` start.
        var head = 0
        var phase = Phase.open
        /// An `attend` for this socket is queued at the loop.
        var attentionQueued = false
        /// A `send` was refused since the buffer last drained: tell `onWritable` when it has room.
        var refused = false
        /// The socket, while the loop has it: `flush()` writes to it directly.
        var fd: Int32 = -1
        var closeHandlers: [@Sendable (UInt16) -> Void] = []

        var buffered: Int { outgoing.count - head }

        /// An unmasked, unfragmented frame (control frames; messages go through `send`).
        mutating func append(_ frame: WebSocketFrame) {
            compact()
            WebSocketFrame.appendHeader(opcode: frame.opcode, length: frame.payload.count, to: &outgoing)
            outgoing += frame.payload
        }

        /// Drops the sent bytes once they are half the buffer.
        mutating func compact() {
            if head > 0 && head * 2 >= outgoing.count {
                outgoing.removeFirst(head)
                head = 0
            }
        }

    }

    private struct Inbox {
        var count = 0
        var bytes = 0
        /// For `onMessage`, oldest first.
        var queued: [WebSocketMessage] = []
        var receiver: Receiver?
        /// A task is handling `queued`.
        var draining = false
        /// The socket closed while the task was at work: the close handlers, to run after it.
        var closing: Closing?
    }

    /// `onMessage`'s handler, boxed: the lock hands out the box, never the closure (`HandlerSlot`
    /// says why).
    private final class Receiver: Sendable {
        let handle: @Sendable (WebSocketMessage) async -> Void
        init(_ handle: @escaping @Sendable (WebSocketMessage) async -> Void) { self.handle = handle }
    }

    private final class Closing: Sendable {
        let handlers: [@Sendable (UInt16) -> Void]
        let code: UInt16
        init(_ handlers: [@Sendable (UInt16) -> Void], _ code: UInt16) { (self.handlers, self.code) = (handlers, code) }
        func run() { for handler in handlers { Task { handler(code) } } }
    }

    init(settings: WebSocketUpgrade, token: UInt64, loop: SocketLoop) {
        if case .task = settings.start {
            // Bounded by `deliver`, which counts what waits.
            let (stream, continuation) = AsyncStream.makeStream(of: WebSocketMessage.self, bufferingPolicy: .unbounded)
            (self.stream, self.continuation) = (stream, continuation)
        } else {
            (stream, continuation) = (nil, nil)
        }
        self.settings = settings
        self.token = token
        self.loop = loop
    }

    /// Queues a message; false if the socket is closed or the outgoing buffer (`sendBufferBytes`
    /// of `Response.webSocket`) would overflow — the caller decides what to drop or whether to close.
    @discardableResult
    public func send(_ message: WebSocketMessage) -> Bool {
        switch message {
        case .text(let text): send(.text, Array(text.utf8))
        case .binary(let bytes): send(.binary, bytes)
        }
    }

    /// Queues a text message whose payload is already UTF-8 (no copy into a `String` and back);
    /// otherwise as `send`. With `flush: false` the bytes wait for `flush()`, so that a producer
    /// with several messages for many sockets (the event fan-out) has them written in one
    /// system call per socket.
    @discardableResult
    public func sendText(utf8 payload: [UInt8], flush: Bool = true) -> Bool {
        send(.text, payload, flush: flush)
    }

    /// Queues a text message of `count` bytes of UTF-8 that `write` appends in place, under the
    /// socket's lock (so it must only append); otherwise as `sendText(utf8:flush:)`.
    @discardableResult
    public func sendText(count: Int, flush: Bool = true, _ write: (inout [UInt8]) -> Void) -> Bool {
        send(.text, count: count, flush: flush, write)
    }

    /// Writes what `sendText(utf8:flush: false)` queued, on the caller's thread (one system call,
    /// no hand-over to the socket thread, which would cost a wake-up per message); what the
    /// socket does not take now the socket thread writes when it has room.
    public func flush() {
        let attend = state.withLock { state -> Bool in
            guard state.buffered > 0 else { return false }
            guard state.fd >= 0, state.phase == .open, !state.attentionQueued else { return state.queueAttention() }
            switch state.write(to: state.fd) {
            case .done: return false
            case .blocked: return false  // the socket thread gets EPOLLOUT when there is room
            case .failed: return state.queueAttention()  // the socket thread finds out and ends it
            }
        }
        if attend { loop.attend(token) }
    }

    private func send(_ opcode: WebSocketFrame.Opcode, _ payload: [UInt8], flush: Bool = true) -> Bool {
        send(opcode, count: payload.count, flush: flush) { $0 += payload }
    }

    /// A frame whose payload `write` appends in place, under the lock.
    private func send(_ opcode: WebSocketFrame.Opcode, count: Int, flush: Bool, _ write: (inout [UInt8]) -> Void) -> Bool {
        let (accepted, attend) = state.withLock { state -> (Bool, Bool) in
            // The frame header adds at most 10 bytes.
            guard state.phase == .open, state.buffered + count + 10 <= settings.sendBufferBytes else {
                if state.phase == .open { state.refused = true }
                return (false, false)
            }
            state.compact()
            WebSocketFrame.appendHeader(opcode: opcode, length: count, to: &state.outgoing)
            let start = state.outgoing.count
            write(&state.outgoing)
            precondition(state.outgoing.count - start == count, "a frame's payload was not the length announced")
            return (true, flush && state.queueAttention())
        }
        if attend { loop.attend(token) }
        return accepted
    }

    /// Runs `handler` (on the socket thread; it must not block) each time the outgoing buffer,
    /// after refusing a `send`, has drained to half its size: a producer that keeps a queue of its
    /// own writes again then, without polling.
    public func onWritable(_ handler: @escaping @Sendable () -> Void) {
        writable.set { _ in handler() }
    }

    /// Starts the closing handshake: sends a close frame and waits briefly for the client's before
    /// closing the connection. A code that may not be sent (1005, 1006, 1015, out of range) is sent
    /// as 1000. The reason is cut to 123 bytes. Nothing happens if already closing.
    public func close(code: UInt16 = 1000, reason: String = "") {
        let code = WebSocketCloseCode.isSendable(code) ? code : WebSocketCloseCode.normal
        if state.withLock({ $0.beginClosing(code: code, frame: .close(code: code, reason: reason)) }) {
            loop.attend(token)
        }
    }

    /// True once closing started from either side; `send` then refuses.
    public var isClosed: Bool {
        state.withLock { $0.phase != .open }
    }

    /// Bytes queued and not yet written to the socket.
    public var bufferedBytes: Int {
        state.withLock { $0.buffered }
    }

    /// What `send` may queue at most (`sendBufferBytes` of `Response.webSocket`).
    public var sendBufferCapacity: Int { settings.sendBufferBytes }

    /// For a socket opened with `onOpen` (set it there): runs `handler` for each complete message
    /// from the client, one at a time and in order, in a task that exists only while messages
    /// wait. The bounds of `messages` apply: a client whose messages wait beyond them is closed
    /// with 1008. `onClose` handlers run after the messages that came before the close.
    public func onMessage(_ handler: @escaping @Sendable (WebSocketMessage) async -> Void) {
        let receiver = Receiver(handler)
        inbox.withLock { $0.receiver = receiver }
    }

    /// Runs `handler` once with the close code when the connection is gone: the code of the close
    /// handshake (the client's, or the one given to `close`, or 1002/1007/1009 for a client that
    /// broke the protocol), 1001 when the server stops, 1006 when the connection dropped or stopped
    /// answering without a close frame. At once if already closed. Handlers run as tasks of their
    /// own, never on the socket thread.
    public func onClose(_ handler: @escaping @Sendable (UInt16) -> Void) {
        let closedCode = state.withLock { state -> UInt16? in
            guard case .closed(let code) = state.phase else {
                state.closeHandlers.append(handler)
                return nil
            }
            return code
        }
        if let closedCode { handler(closedCode) }
    }

    // MARK: For the socket loop

    /// The loop has the socket now.
    func attach(fd: Int32) { state.withLock { $0.fd = fd } }

    /// The loop is about to close the socket: nobody else may write to it.
    func detach() { state.withLock { $0.fd = -1 } }

    var phase: Phase { state.withLock { $0.phase } }

    /// The loop takes the queued attention request and looks at the phase.
    func takeAttention() -> Phase {
        state.withLock { state in
            state.attentionQueued = false
            return state.phase
        }
    }

    /// Queues a ping or pong while open, unless the buffer is full (the client is not reading;
    /// a missing pong is then the least of its problems).
    func sendControl(_ frame: WebSocketFrame) {
        state.withLock { state in
            guard state.phase == .open, state.buffered < settings.sendBufferBytes else { return }
            state.append(frame)
        }
    }

    /// Moves to `closing(code)` with `frame` queued; false if not open.
    func beginClosing(code: UInt16, frame: WebSocketFrame) -> Bool {
        state.withLock { $0.beginClosing(code: code, frame: frame) }
    }

    /// Hands a message to the handler; false if its queue is full.
    func deliver(_ message: WebSocketMessage) -> Bool {
        let size = Self.size(message)
        let queued = continuation == nil
        // nil: refused; true: no task handles `onMessage`'s queue, so one must start.
        let start = inbox.withLock { w -> Bool? in
            // One message always fits, however large (up to maxMessageBytes).
            guard w.count == 0 || (w.count < Self.messageQueueLimit && w.bytes + size <= Self.messageQueueBytes) else {
                return nil
            }
            w.count += 1
            w.bytes += size
            guard queued else { return false }
            w.queued.append(message)
            defer { w.draining = true }
            return !w.draining
        }
        guard let start else { return false }
        continuation?.yield(message)
        if start { Task { await drain() } }
        return true
    }

    /// The handler took a message: its place is free.
    fileprivate func taken(_ message: WebSocketMessage) {
        let size = Self.size(message)
        inbox.withLock { $0.count -= 1; $0.bytes -= size }
    }

    /// Hands `onMessage` the queued messages until none is left; then runs the close handlers if
    /// the socket closed meanwhile.
    private func drain() async {
        while true {
            // Emptiness and `draining` change under one lock: a later `deliver` starts a new task.
            let next = inbox.withLock { w -> (WebSocketMessage, Receiver?)? in
                guard !w.queued.isEmpty else {
                    w.draining = false
                    return nil
                }
                let message = w.queued.removeFirst()
                w.count -= 1
                w.bytes -= Self.size(message)
                return (message, w.receiver)
            }
            guard let (message, receiver) = next else { break }
            await receiver?.handle(message)
        }
        let closing = inbox.withLock { w -> Closing? in
            guard !w.draining, let closing = w.closing else { return nil }
            w.closing = nil
            w.receiver = nil
            return closing
        }
        closing?.run()
    }

    private static func size(_ message: WebSocketMessage) -> Int {
        switch message {
        case .text(let text): text.utf8.count
        case .binary(let bytes): bytes.count
        }
    }

    enum Flush {
        /// Everything written.
        case done
        /// The socket buffer is full: wait for EPOLLOUT.
        case blocked
        case failed
    }

    /// Writes queued bytes to the non-blocking socket `fd`.
    func flush(to fd: Int32) -> Flush {
        let (result, drained) = state.withLock { state -> (Flush, Bool) in
            let result = state.write(to: fd)
            guard result != .failed, state.refused, state.phase == .open,
                  state.buffered <= settings.sendBufferBytes / 2 else { return (result, false) }
            state.refused = false
            return (result, true)
        }
        if drained { writable(()) }
        return result
    }

    /// The connection is gone: ends `messages` and runs the close handlers.
    func finish(code: UInt16) {
        let handlers = state.withLock { state -> [@Sendable (UInt16) -> Void] in
            if case .closed = state.phase { return [] }
            state.phase = .closed(code: code)
            state.refused = false
            state.outgoing = []
            state.head = 0
            defer { state.closeHandlers = [] }
            return state.closeHandlers
        }
        continuation?.finish()
        writable.set(nil)
        let closing = Closing(handlers, code)
        // With `onMessage`: after the messages that came before; the handler is let go (it
        // usually holds the socket).
        let now = inbox.withLock { w -> Bool in
            guard w.draining else {
                w.receiver = nil
                return true
            }
            w.closing = closing
            return false
        }
        if now { closing.run() }
    }
}

extension WebSocket.State {
    fileprivate mutating func write(to fd: Int32) -> WebSocket.Flush {
        while buffered > 0 {
            let result = outgoing.withUnsafeBytes { bytes in
                SocketIO.send(fd, UnsafeRawBufferPointer(rebasing: bytes[head...]))
            }
            switch result {
            case .transferred(let count): head += count
            case .wouldBlock: return .blocked
            case .endOfStream, .failed: return .failed
            }
        }
        outgoing.removeAll(keepingCapacity: outgoing.capacity <= 1 << 16)
        head = 0
        return .done
    }

    /// Marks that the loop must look at this socket; true if nobody asked it yet.
    fileprivate mutating func queueAttention() -> Bool {
        defer { attentionQueued = true }
        return !attentionQueued
    }

    fileprivate mutating func beginClosing(code: UInt16, frame: WebSocketFrame) -> Bool {
        guard phase == .open else { return false }
        phase = .closing(code: code)
        append(frame)
        return true
    }
}
