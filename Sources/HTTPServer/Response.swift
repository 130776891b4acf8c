/// What a handler answers. The server adds `Content-Length` and `Date` itself; a `Content-Length`
/// given here is ignored. `Connection: close` closes the connection after this response.
///
/// The body is a byte array for now; streamed bodies (Server-Sent Events) and protocol upgrades
/// (WebSocket) will come as further kinds of body next to it, turned into MHD responses in the one
/// place that turns this one (`ServerCore.queue`).
public struct Response: Sendable {
    public var status: Int
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]

    public init(status: Int, headers: [(name: String, value: String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
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
