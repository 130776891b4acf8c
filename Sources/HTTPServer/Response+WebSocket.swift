import CMicroHTTPD
import FoundationEssentials

extension Response {
    /// Answers a valid WebSocket upgrade request (GET on HTTP/1.1, `Upgrade: websocket`,
    /// `Connection: Upgrade`, `Sec-WebSocket-Version: 13`, a `Sec-WebSocket-Key` of 16 bytes)
    /// with 101 and then runs `handler` with the socket; the socket is closed (1000) when `handler`
    /// returns. An invalid request gets 400 from the errorResponder (`.badRequest`), a version
    /// other than 13 gets 426 with `Sec-WebSocket-Version: 13`. No extension (compression) is
    /// negotiated.
    ///
    /// - Parameters:
    ///   - subprotocol: the subprotocol chosen, one the client offered in
    ///     `Sec-WebSocket-Protocol` (browsers fail a handshake that names another); nil for none.
    ///   - maxMessageBytes: a longer message (fragments together) closes the socket with 1009.
    ///   - pingInterval: a client silent this long is pinged; silent for twice as long, it is
    ///     dropped (1006). `.zero` turns this off.
    ///   - sendBufferBytes: the most bytes `send` queues before refusing.
    public static func webSocket(
        _ request: Request,
        subprotocol: String? = nil,
        maxMessageBytes: Int = 1 << 20,
        pingInterval: Duration = .seconds(20),
        sendBufferBytes: Int = 1 << 20,
        handler: @escaping @Sendable (WebSocket) async -> Void
    ) -> Response {
        webSocket(request, subprotocol, maxMessageBytes, pingInterval, sendBufferBytes, .task(handler))
    }

    /// As `webSocket`, but without a task for the socket's life: `onOpen` runs once on the
    /// server's I/O thread (it must not block), before any message arrives, to set the socket's
    /// `onMessage` and `onClose`; the socket stays open until either side closes it. An idle
    /// socket then holds no task (about 2 KiB each, measured). A name of its own: with a trailing
    /// closure, an overload of `webSocket` would take a handler that does not await for this.
    public static func openWebSocket(
        _ request: Request,
        subprotocol: String? = nil,
        maxMessageBytes: Int = 1 << 20,
        pingInterval: Duration = .seconds(20),
        sendBufferBytes: Int = 1 << 20,
        onOpen: @escaping @Sendable (WebSocket) -> Void
    ) -> Response {
        webSocket(request, subprotocol, maxMessageBytes, pingInterval, sendBufferBytes, .opened(onOpen))
    }

    private static func webSocket(
        _ request: Request, _ subprotocol: String?, _ maxMessageBytes: Int, _ pingInterval: Duration,
        _ sendBufferBytes: Int, _ start: WebSocketUpgrade.Start
    ) -> Response {
        switch WebSocketHandshake.acceptKey(for: request) {
        case .failure(let refusal):
            return refusal.response
        case .success(let accept):
            let upgrade = WebSocketUpgrade(
                maxMessageBytes: max(0, maxMessageBytes), pingInterval: pingInterval,
                sendBufferBytes: max(126, sendBufferBytes), start: start)
            // MHD adds `Connection: Upgrade`.
            var headers = [(name: "Upgrade", value: "websocket"), (name: "Sec-WebSocket-Accept", value: accept)]
            if let subprotocol { headers.append((name: "Sec-WebSocket-Protocol", value: subprotocol)) }
            return Response(status: 101, headers: headers, kind: .webSocket(upgrade))
        }
    }

    /// The answer `webSocket` would give a request that is no valid upgrade, or nil for a valid
    /// one: for a route that must check the upgrade before it does anything for the socket.
    public static func webSocketRefusal(_ request: Request) -> Response? {
        guard case .failure(let refusal) = WebSocketHandshake.acceptKey(for: request) else { return nil }
        return refusal.response
    }
}

/// The opening handshake of RFC 6455 section 4.2, server side.
public enum WebSocketHandshake {
    enum Refusal: Error, Equatable {
        case badRequest(String)
        /// `Sec-WebSocket-Version` is not 13.
        case unsupportedVersion

        /// 400 from the errorResponder, or 426 with the version this server speaks.
        var response: Response {
            switch self {
            case .badRequest(let reason):
                Response(status: 400, headers: [], kind: .error(.badRequest(reason)))
            case .unsupportedVersion:
                Response(status: 426, headers: [(name: "Sec-WebSocket-Version", value: "13")],
                         kind: .error(.badRequest("unsupported WebSocket version; this server speaks 13")))
            }
        }
    }

    /// The `Sec-WebSocket-Accept` value for a valid upgrade request.
    static func acceptKey(for request: Request) -> Result<String, Refusal> {
        guard request.method == "GET" else { return .failure(.badRequest("a WebSocket upgrade must be a GET")) }
        guard request.httpVersion == "HTTP/1.1" else {
            return .failure(.badRequest("a WebSocket upgrade needs HTTP/1.1"))
        }
        guard tokens(request.header("Upgrade")).contains("websocket") else {
            return .failure(.badRequest("missing Upgrade: websocket"))
        }
        guard tokens(request.header("Connection")).contains("upgrade") else {
            return .failure(.badRequest("missing Connection: Upgrade"))
        }
        guard let version = request.header("Sec-WebSocket-Version") else {
            return .failure(.badRequest("missing Sec-WebSocket-Version"))
        }
        guard withoutSpaces(version) == "13" else { return .failure(.unsupportedVersion) }
        guard let key = request.header("Sec-WebSocket-Key").map(withoutSpaces), Data(base64Encoded: key)?.count == 16
        else { return .failure(.badRequest("Sec-WebSocket-Key must be 16 bytes in base64")) }
        return .success(acceptKey(for: key))
    }

    /// base64(SHA-1(key + the RFC's GUID)).
    static func acceptKey(for key: String) -> String {
        let input = Array((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").utf8)
        var digest = [UInt8](repeating: 0, count: 20)
        let status = gw_sha1(input, input.count, &digest)
        precondition(status == 0, "GnuTLS SHA-1 failed: \(status)")
        return Data(digest).base64EncodedString()
    }

    /// The subprotocols a request offers (`Sec-WebSocket-Protocol`), in its order, case kept.
    public static func offeredSubprotocols(_ request: Request) -> [String] {
        (request.header("Sec-WebSocket-Protocol") ?? "").split(separator: ",").map(withoutSpaces).filter { !$0.isEmpty }
    }

    /// The lower-cased comma-separated tokens of a header value.
    private static func tokens(_ value: String?) -> [String] {
        (value ?? "").split(separator: ",").map { withoutSpaces($0).lowercased() }
    }

    /// Tokens, versions and base64 have no inner spaces; surrounding ones are optional whitespace.
    private static func withoutSpaces(_ text: some StringProtocol) -> String {
        String(text.filter { !$0.isWhitespace })
    }
}
