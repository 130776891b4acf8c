import FuzzSupport
@testable import HTTPServer

// The receiving half of the WebSocket (RFC 6455): what a client's bytes become. Input: a byte
// choosing the message limit, a byte choosing how the bytes are cut into reads, the bytes.
//
// Properties:
// - the events and the failure do not depend on how the bytes arrive (whole, or in reads of any
//   size), and after a failure nothing more is read;
// - every event keeps the limits: messages within the limit, text valid UTF-8 (a `String`),
//   control payloads of at most 125 bytes, close codes that may be sent (or 1005 with no reason);
//   a failure closes with 1002, 1007 or 1009;
// - while waiting for more, no more is buffered than one frame the limits allow;
// - every frame parsed comes back the same from its serialization, masked;
// - a close frame the server makes (reason cut to fit) is read back as that code and reason.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var input = FuzzInput(data, size)
    let limitChoice = input.byte()
    // Small limits reach "too big" cheaply; the high bit picks the server's own 64 KiB.
    let limit = limitChoice & 0x80 != 0 ? 1 << 16 : Int(limitChoice) * 8
    let readSize = 1 + Int(input.byte())
    let bytes = input.rest()

    let whole = receive([bytes[...]], limit: limit)
    let cut = stride(from: 0, to: bytes.count, by: readSize).map { bytes[$0..<min($0 + readSize, bytes.count)] }
    let pieces = receive(cut, limit: limit)
    require(whole.events == pieces.events && whole.failure == pieces.failure,
            "the same bytes gave \(whole) whole and \(pieces) in reads of \(readSize)")
    for event in whole.events { checkLimits(event, limit: limit) }
    if let failure = whole.failure {
        require([WebSocketCloseCode.protocolError, WebSocketCloseCode.invalidPayload, WebSocketCloseCode.messageTooBig].contains(failure.code),
                "failure with close code \(failure.code)")
    }

    roundTripFrames(bytes)
    closeFrameReadsBack(bytes)
    return 0
}

struct Received: CustomStringConvertible {
    var events: [WebSocketInbound.Event] = []
    var failure: WebSocketInbound.Failure?
    var description: String { "\(events.count) events, failure \(failure.map { "\($0.code) \($0.reason)" } ?? "none")" }
}

/// Feeds `reads` one by one, taking every event after each, until the end or a failure.
func receive(_ reads: [ArraySlice<UInt8>], limit: Int) -> Received {
    var inbound = WebSocketInbound(maxMessageBytes: limit)
    var received = Received()
    for read in reads {
        read.withUnsafeBytes { inbound.append($0) }
        do {
            while let event = try inbound.next() { received.events.append(event) }
        } catch {
            received.failure = error
            return received
        }
        // An incomplete frame is judged by its header as soon as that is complete: what waits
        // is at most a maximal header and the payload the limit allows.
        let frameLimit = 14 + max(125, limit)
        require(inbound.pendingBytes <= frameLimit, "\(inbound.pendingBytes) bytes buffered with a limit of \(limit)")
    }
    return received
}

func checkLimits(_ event: WebSocketInbound.Event, limit: Int) {
    switch event {
    case .message(.text(let text)):
        require(text.utf8.count <= limit, "a text message of \(text.utf8.count) bytes passed the limit \(limit)")
    case .message(.binary(let bytes)):
        require(bytes.count <= limit, "a binary message of \(bytes.count) bytes passed the limit \(limit)")
    case .ping(let payload), .pong(let payload):
        require(payload.count <= 125, "a control payload of \(payload.count) bytes")
    case .close(let code, let reason):
        if code == WebSocketCloseCode.noStatus {
            require(reason.isEmpty, "a reason without a code")
        } else {
            require(WebSocketCloseCode.isSendable(code), "close code \(code) accepted")
            require(reason.utf8.count <= 123, "a close reason of \(reason.utf8.count) bytes")
        }
    }
}

/// Every frame at the start of the remaining bytes, masked or not, serialized again with a
/// masking key derived from the input: the same frame, from exactly the serialized bytes.
func roundTripFrames(_ bytes: [UInt8]) {
    var rest = bytes[...]
    while case .frame(let frame, _, let length) = WebSocketFrame.parse(rest, maxPayloadBytes: 1 << 16, requireMasked: false) {
        require(length > 0 && length <= rest.count, "a frame of \(length) bytes from \(rest.count)")
        let key = (0..<4).map { UInt8(truncatingIfNeeded: length &* 31 &+ $0) }
        let wire = frame.serialized(maskingKey: key)
        require(WebSocketFrame.parse(wire[...], maxPayloadBytes: 1 << 16, requireMasked: true) == .frame(frame, masked: true, length: wire.count),
                "frame \(frame.opcode) of \(frame.payload.count) bytes does not read back from its serialization")
        rest = rest.dropFirst(length)
    }
}

/// The server's close frame for a code and reason from the input: at most 125 bytes, the
/// reason cut at a character boundary, read back by the client side of the same parser.
func closeFrameReadsBack(_ bytes: [UInt8]) {
    guard bytes.count >= 2 else { return }
    let code = UInt16(bytes[0]) << 8 | UInt16(bytes[1])
    guard WebSocketCloseCode.isSendable(code) else { return }
    let reason = String(decoding: bytes.dropFirst(2), as: UTF8.self)
    let frame = WebSocketFrame.close(code: code, reason: reason)
    require(frame.payload.count <= 125, "a close frame of \(frame.payload.count) bytes")
    var inbound = WebSocketInbound(maxMessageBytes: 0)
    inbound.append(frame.serialized(maskingKey: [1, 2, 3, 4]))
    guard case .close(let readCode, let readReason)? = try? inbound.next() else {
        require(false, "the server's close frame for \(code) does not read back")
        return
    }
    // The reason is the longest run of whole characters from the start that fits in 123 bytes.
    let kept = readReason.utf8.count
    require(readCode == code && reason.utf8.starts(with: readReason.utf8), "close \(code) read back as \(readCode) \"\(readReason)\"")
    if kept < reason.utf8.count {
        let next = reason[reason.utf8.index(reason.startIndex, offsetBy: kept)...].first.map { String($0).utf8.count } ?? 0
        require(kept + next > 123, "the close reason was cut to \(kept) bytes before a character of \(next)")
    }
}
