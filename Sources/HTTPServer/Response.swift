/// What a handler answers. The server adds `Content-Length` and `Date` itself; a `Content-Length`
/// given here is ignored. `Connection: close` closes the connection after this response.
///
/// The body is a byte array, or, for responses made by `stream` and `webSocket`, produced over time
/// (`body` is then unused). `ServerCore.queue` is the one place all kinds become MHD responses.
public struct Response: Sendable {
    public var status: Int
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]
    /// Where the body comes from.
    var kind = Kind.bytes

    enum Kind: Sendable {
        /// `body`.
        case bytes
        /// Chunked, from a `StreamBody` (Server-Sent Events).
        case stream(StreamBody)
        /// 101, then the connection is a WebSocket.
        case webSocket(WebSocketUpgrade)
        /// An error for whoever holds the `errorResponder` (router or server) to render; its
        /// result gets this response's status and headers added.
        case error(ServerError)
    }

    public init(status: Int, headers: [(name: String, value: String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    init(status: Int, headers: [(name: String, value: String)], kind: Kind) {
        self.init(status: status, headers: headers)
        self.kind = kind
    }

    /// A response whose body the server takes from `body` as it is written, chunked on HTTP/1.1
    /// (no `Content-Length`), until `body` is closed or the client leaves. For Server-Sent Events
    /// give `Content-Type: text/event-stream`, `Cache-Control: no-cache` and
    /// `X-Accel-Buffering: no`. One `StreamBody` serves one response.
    public static func stream(
        status: Int = 200, headers: [(name: String, value: String)], body: StreamBody
    ) -> Response {
        Response(status: status, headers: headers, kind: .stream(body))
    }

    /// An error for the server's `errorResponder` to render (in the API's error shape), with its
    /// status and these headers added.
    public static func error(_ error: ServerError, headers: [(name: String, value: String)] = []) -> Response {
        Response(status: error.status, headers: headers, kind: .error(error))
    }

    /// `.error` rendered by `errorResponder`; any other response as it is.
    func rendered(by errorResponder: @Sendable (ServerError) -> Response) -> Response {
        guard case .error(let error) = kind else { return self }
        var rendered = errorResponder(error)
        rendered.status = status
        rendered.headers += headers
        return rendered
    }

    /// For a response that will never be sent: ends its stream, so that the producer learns.
    func abandon() {
        if case .stream(let body) = kind { body.finish() }
    }

    /// A response with `Content-Type: application/json`.
    public static func json(_ status: Int, _ body: [UInt8]) -> Response {
        Response(status: status, headers: [(name: "Content-Type", value: "application/json")], body: body)
    }

    /// The first value of a header field, by case-insensitive name.
    public func header(_ name: String) -> String? {
        let wanted = name.lowercased()
        return headers.first { $0.name.lowercased() == wanted }?.value
    }
}
