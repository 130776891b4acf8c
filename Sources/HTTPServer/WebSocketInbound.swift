/// The receiving half of a server-side WebSocket: bytes from the client in, events out.
/// Reassembles fragmented messages and enforces what RFC 6455 asks of a server; no I/O.
struct WebSocketInbound {
    enum Event: Equatable {
        case message(WebSocketMessage)
        case ping([UInt8])
        case pong([UInt8])
        /// The client's close frame: its code (1005 when it had none) and reason.
        case close(code: UInt16, reason: String)
    }

    /// Why the connection must be failed: the close code to send and a reason.
    struct Failure: Error, Equatable {
        var code: UInt16
        var reason: String
    }

    let maxMessageBytes: Int
    private var buffer: [UInt8] = []
    /// Where the unread bytes of `buffer` start.
    private var start = 0
    /// The opcode and the payload so far of a fragmented message.
    private var fragmented: (opcode: WebSocketFrame.Opcode, payload: [UInt8])?

    init(maxMessageBytes: Int) {
        self.maxMessageBytes = maxMessageBytes
    }

    /// Bytes read and not yet taken by a complete frame.
    var pendingBytes: Int { buffer.count - start }

    mutating func append(_ bytes: UnsafeRawBufferPointer) {
        if start > 0 && start == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            start = 0
        } else if start >= 1 << 16 && start * 2 >= buffer.count {
            buffer.removeFirst(start)
            start = 0
        }
        buffer.append(contentsOf: bytes)
    }

    mutating func append(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { append($0) }
    }

    /// The next event, nil when more bytes are needed. After a failure the state is undefined:
    /// stop reading.
    mutating func next() throws(Failure) -> Event? {
        while true {
            let sofar = fragmented?.payload.count ?? 0
            let parsed = WebSocketFrame.parse(
                buffer[start...], maxPayloadBytes: maxMessageBytes - sofar, requireMasked: true)
            switch parsed {
            case .incomplete:
                return nil
            case .invalid(let code, let reason):
                throw Failure(code: code, reason: reason)
            case .frame(let frame, _, let length):
                start += length
                if let event = try take(frame) { return event }
            }
        }
    }

    /// A frame's event, or nil for a fragment that does not complete its message.
    private mutating func take(_ frame: WebSocketFrame) throws(Failure) -> Event? {
        switch frame.opcode {
        case .ping:
            return .ping(frame.payload)
        case .pong:
            return .pong(frame.payload)
        case .close:
            return try Self.closeEvent(frame.payload)
        case .text, .binary:
            guard fragmented == nil else {
                throw Failure(code: WebSocketCloseCode.protocolError, reason: "new message inside a fragmented one")
            }
            if frame.fin { return .message(try Self.message(frame.opcode, frame.payload)) }
            fragmented = (frame.opcode, frame.payload)
            return nil
        case .continuation:
            guard var message = fragmented else {
                throw Failure(code: WebSocketCloseCode.protocolError, reason: "continuation without a message")
            }
            fragmented = nil  // so that the append below does not copy
            message.payload += frame.payload
            guard frame.fin else {
                fragmented = message
                return nil
            }
            return .message(try Self.message(message.opcode, message.payload))
        }
    }

    private static func message(_ opcode: WebSocketFrame.Opcode, _ payload: [UInt8]) throws(Failure) -> WebSocketMessage {
        guard opcode == .text else { return .binary(payload) }
        guard let text = String(validating: payload, as: UTF8.self) else {
            throw Failure(code: WebSocketCloseCode.invalidPayload, reason: "text is not UTF-8")
        }
        return .text(text)
    }

    private static func closeEvent(_ payload: [UInt8]) throws(Failure) -> Event {
        if payload.isEmpty { return .close(code: WebSocketCloseCode.noStatus, reason: "") }
        guard payload.count >= 2 else {
            throw Failure(code: WebSocketCloseCode.protocolError, reason: "close frame with a 1-byte payload")
        }
        let code = UInt16(payload[0]) << 8 | UInt16(payload[1])
        guard WebSocketCloseCode.isSendable(code) else {
            throw Failure(code: WebSocketCloseCode.protocolError, reason: "invalid close code \(code)")
        }
        guard let reason = String(validating: payload[2...], as: UTF8.self) else {
            throw Failure(code: WebSocketCloseCode.invalidPayload, reason: "close reason is not UTF-8")
        }
        return .close(code: code, reason: reason)
    }
}
