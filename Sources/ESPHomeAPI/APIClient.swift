import Glibc
import Synchronization

/// What the door does with the clients' messages. Both calls come on the server's thread, one
/// client's in order: answer at once (`APIClient.send` may be called from there) or hand the
/// work to another thread; never block.
public protocol APIHandler: Sendable {
    /// A message from `client` (after its handshake). Types the module does not know come as
    /// `.other`.
    func received(_ message: ClientMessage, from client: APIClient)
    /// `client` is gone; `reason` is what the log says.
    func ended(_ client: APIClient, reason: String)
}

/// One connected client, as the door sees it: send to it from any thread, or end it.
///
/// What is sent is framed (and sealed, under Noise) at once, under the client's lock, in the
/// order of the calls, into a bounded buffer that the server's thread writes to the socket. A
/// client that does not read until the buffer is full is ended: a stalled reader must not hold
/// gattway's memory.
public final class APIClient: Sendable, Hashable {
    /// Unique for the server's lifetime.
    public let id: UInt64
    /// The client's address and port ("127.0.0.1:40312", "[::1]:40312").
    public let peer: String
    /// The `client_info` of its hello ("aioesphomeapi", "Home Assistant 2025.1.0"), once it came.
    public var info: String? { state.withLock { $0.info } }

    struct Outbox {
        var bytes: [UInt8] = []
        /// Where the next write starts.
        var start = 0
        /// nil until the handshake is over: nothing can be sent before.
        var sealer: Sealer?
        /// Why it is ending; once set, nothing more is taken and the server ends it when the
        /// buffer is written (or at once when `discard`).
        var closing: String?
        var discard = false
        var ended = false
        /// The server has been asked to look at this client and has not yet.
        var attention = false
        var info: String?

        var pending: Int { bytes.count - start }
    }

    let state = Mutex(Outbox())
    private let maxBuffered: Int
    /// Tells the server's thread to write or end this client.
    private let attend: @Sendable (UInt64) -> Void

    init(id: UInt64, peer: String, maxBuffered: Int, attend: @escaping @Sendable (UInt64) -> Void) {
        self.id = id
        self.peer = peer
        self.maxBuffered = maxBuffered
        self.attend = attend
    }

    public static func == (a: APIClient, b: APIClient) -> Bool { a.id == b.id }
    public func hash(into hasher: inout Hasher) { hasher.combine(id) }

    /// Sends `message`; false when the client is ending or gone (then the message is dropped).
    @discardableResult
    public func send(_ message: some APIMessage) -> Bool {
        send([message])
    }

    /// Sends `messages` together, in order; false when the client is ending or gone.
    @discardableResult
    public func send(_ messages: [any APIMessage]) -> Bool {
        let (accepted, wake) = state.withLock { box -> (Bool, Bool) in
            guard !box.ended, box.closing == nil, box.sealer != nil else { return (false, false) }
            for message in messages {
                let type = Swift.type(of: message).id
                guard let frame = box.sealer!.frame(type: type, payload: message.serialized()) else {
                    box.closing = "a message of type \(type) is too large for a frame (gattway's fault)"
                    box.discard = true
                    return (false, Self.needsAttention(&box))
                }
                guard box.pending + frame.count <= maxBuffered else {
                    box.closing = "does not read what it is sent (\(box.pending) bytes waiting, at most \(maxBuffered))"
                    box.discard = true
                    return (false, Self.needsAttention(&box))
                }
                box.bytes += frame
            }
            return (true, Self.needsAttention(&box))
        }
        if wake { attend(id) }
        return accepted
    }

    /// Bytes sent and not yet written to the socket: a door that may drop what it sends (the
    /// advertisements of a Bluetooth proxy) sends only while this is low, so that a slow reader
    /// loses those and is not ended for them.
    public var buffered: Int { state.withLock { $0.pending } }

    /// Ends the connection once what was sent is written (the server waits a little for a
    /// slow reader, then ends it anyway); `reason` goes to the log and to `APIHandler.ended`.
    public func close(reason: String) {
        let wake = state.withLock { box -> Bool in
            guard !box.ended, box.closing == nil else { return false }
            box.closing = reason
            return Self.needsAttention(&box)
        }
        if wake { attend(id) }
    }

    private static func needsAttention(_ box: inout Outbox) -> Bool {
        defer { box.attention = true }
        return !box.attention
    }

    // MARK: The server's thread

    /// Handshake bytes (and farewells): written before anything sent later, outside the bound.
    func queueRaw(_ bytes: [UInt8], ready: Sealer? = nil) {
        state.withLock { box in
            box.bytes += bytes
            if let ready { box.sealer = ready }
        }
    }

    func noteHello(_ info: String) {
        state.withLock { $0.info = info }
    }

    enum Flush {
        /// All written: with the reason when the client is ending.
        case done(closing: String?)
        case blocked(closing: String?)
        case failed(errno: Int32)
    }

    /// Writes what is waiting, until the socket takes no more.
    func flush(to fd: Int32) -> Flush {
        state.withLock { box -> Flush in
            box.attention = false
            if box.discard {
                box.bytes = []
                box.start = 0
                return .done(closing: box.closing)
            }
            while box.pending > 0 {
                let written = box.bytes.withUnsafeBytes { all in
                    Glibc.send(fd, all.baseAddress! + box.start, box.pending, Int32(MSG_NOSIGNAL))
                }
                if written > 0 {
                    box.start += written
                } else if written < 0 && errno == EINTR {
                    continue
                } else if written < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                    compact(&box)
                    return .blocked(closing: box.closing)
                } else {
                    return .failed(errno: written < 0 ? errno : EPIPE)
                }
            }
            box.bytes.removeAll(keepingCapacity: box.bytes.capacity <= 64 * 1024)
            box.start = 0
            return .done(closing: box.closing)
        }
    }

    private func compact(_ box: inout Outbox) {
        if box.start > box.bytes.count / 2 {
            box.bytes.removeFirst(box.start)
            box.start = 0
        }
    }

    /// Marks the client gone; the reason it was closing with, if it was.
    func markEnded() -> String? {
        state.withLock { box in
            box.ended = true
            box.bytes = []
            box.start = 0
            return box.closing
        }
    }

    var isReady: Bool { state.withLock { $0.sealer != nil } }
}
