/// A request the server or the router answers without a handler. The `errorResponder` given to
/// `Server` and `Router` renders it (the gateway uses its JSON error shape).
public enum ServerError: Error, Sendable, Equatable {
    /// The body is longer than the server's `maxBodyBytes`.
    case bodyTooLarge(limit: Int)
    /// No route matches the path.
    case notFound(method: String, path: String)
    /// Routes match the path, none for this method. The router adds the `Allow` header.
    case methodNotAllowed(allowed: [String])
    /// The request cannot be read, e.g. malformed percent-encoding in the path or query.
    case badRequest(String)
    /// More connections are open than the server's `connectionLimit`: this one is answered and
    /// closed. The server adds `Retry-After`.
    case tooManyConnections(limit: Int)
    /// This client has `limit` connections open, as many as one client may: this one is
    /// answered 429 and closed. The server adds `Retry-After`.
    case tooManyConnectionsFromClient(limit: Int)
    /// No valid credentials (access control). `invalidToken`: some were given, and are wrong.
    case unauthorized(String, invalidToken: Bool)
    /// Credentials or origin that do not allow this request (access control).
    case forbidden(String)
    /// A body (or a declared one) in a media type the route does not take.
    case unsupportedMediaType(String)
    /// The client sends faster than it may; it may retry after `retryAfter` seconds.
    case tooManyRequests(String, retryAfter: Int)

    /// The case's name ("tooManyRequests"), for logs and counters.
    public var name: String {
        String(String(describing: self).prefix { $0 != "(" })
    }

    /// The HTTP status this error stands for.
    public var status: Int {
        switch self {
        case .bodyTooLarge: 413
        case .notFound: 404
        case .methodNotAllowed: 405
        case .badRequest: 400
        case .tooManyConnections: 503
        case .tooManyConnectionsFromClient, .tooManyRequests: 429
        case .unauthorized: 401
        case .forbidden: 403
        case .unsupportedMediaType: 415
        }
    }
}

/// Why `Server.init` could not start listening.
public struct ServerStartError: Error, Sendable, CustomStringConvertible {
    public let host: String
    public let port: UInt16
    /// What libmicrohttpd or the system said, e.g. "Failed to bind to port 8080: Address already in use".
    public let reason: String

    public var description: String { "cannot listen on \(host) port \(port): \(reason)" }
}
