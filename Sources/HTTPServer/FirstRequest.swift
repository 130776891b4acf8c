/// What the first bytes of a connection say about it: whether it opens a long-lived stream with a
/// head small enough for the stream daemon's pool (`ServerCore.streamPoolBytes`).
///
/// libmicrohttpd 0.9.75 keeps a connection's whole pool for as long as the connection lives, and
/// an idle event stream or WebSocket lives for hours; its pool holds (measured in its sources):
/// the request head, 64 bytes per header line, query argument and cookie, a copy of the `Cookie`
/// value, then the response's headers and the chunk being sent. Heads that would not fit go to
/// the main daemon, whose pool takes any head up to its limit, so no request is refused for this.
enum FirstRequest {
    /// Room kept for the response's headers (a stream's are about 250 bytes; a 101 with a
    /// subprotocol, or a refusal with `WWW-Authenticate` or `Retry-After`, under 400) and for
    /// the pool's alignment.
    static let responseReserve = 512
    /// What libmicrohttpd allocates per header line, query argument or cookie (a 56-byte record
    /// rounded up to 16).
    static let perEntryBytes = 64

    enum Verdict: Equatable {
        /// A GET that asks for an event stream (`Accept: text/event-stream`) or a WebSocket
        /// (`Upgrade: websocket`), whose head fits the stream daemon's pool.
        case stream
        /// Anything else, or a stream whose head does not fit.
        case ordinary
        /// The head is not complete in these bytes (and they do not already rule it out).
        case incomplete
    }

    static func verdict(_ bytes: UnsafeRawBufferPointer, poolBytes: Int) -> Verdict {
        guard let end = headEnd(bytes) else {
            // Past what the pool could hold, or not a GET: no more bytes change the answer.
            return bytes.count >= poolBytes || !startsWithGET(bytes) ? .ordinary : .incomplete
        }
        guard startsWithGET(bytes) else { return .ordinary }
        var lines = Array(bytes[..<end]).split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
            .map { $0.last == UInt8(ascii: "\r") ? $0.dropLast() : $0 }
        let requestLine = lines.removeFirst()
        var entries = lines.count + arguments(in: requestLine)
        var cookieBytes = 0
        var opensStream = false
        for line in lines {
            // A folded line (obsolete, RFC 9112 section 5.2) is rewritten in the pool: not worth counting.
            guard let first = line.first, first != UInt8(ascii: " "), first != UInt8(ascii: "\t"),
                  let colon = line.firstIndex(of: UInt8(ascii: ":"))
            else { return .ordinary }
            let name = String(decoding: line[..<colon], as: UTF8.self).lowercased()
            let value = String(decoding: line[(colon + 1)...], as: UTF8.self).lowercased()
            switch name {
            case "accept": opensStream = opensStream || value.contains("text/event-stream")
            case "upgrade": opensStream = opensStream || value.contains("websocket")
            case "cookie":
                cookieBytes += value.utf8.count + 1
                entries += value.utf8.count { $0 == UInt8(ascii: ";") } + 1
            default: break
            }
        }
        let cost = end + 4 + entries * perEntryBytes + cookieBytes + responseReserve
        return opensStream && cost <= poolBytes ? .stream : .ordinary
    }

    /// Where the blank line that ends the head starts, if it is in `bytes`.
    private static func headEnd(_ bytes: UnsafeRawBufferPointer) -> Int? {
        guard bytes.count >= 4 else { return nil }
        for i in 0...(bytes.count - 4)
        where bytes[i] == 13 && bytes[i + 1] == 10 && bytes[i + 2] == 13 && bytes[i + 3] == 10 {
            return i
        }
        return nil
    }

    private static func startsWithGET(_ bytes: UnsafeRawBufferPointer) -> Bool {
        let get: [UInt8] = Array("GET ".utf8)
        return bytes.count < get.count ? bytes.elementsEqual(get.prefix(bytes.count)) : bytes.prefix(4).elementsEqual(get)
    }

    /// Query arguments of the request line's target (each is an entry in the pool).
    private static func arguments(in requestLine: ArraySlice<UInt8>) -> Int {
        guard let question = requestLine.firstIndex(of: UInt8(ascii: "?")) else { return 0 }
        let query = requestLine[(question + 1)...].prefix { $0 != UInt8(ascii: " ") }
        return query.count { $0 == UInt8(ascii: "&") } + 1
    }
}
