import CMicroHTTPD

/// An HTTP/1.1 server on libmicrohttpd, or HTTPS only (libmicrohttpd's GnuTLS).
///
/// One internal I/O thread (epoll; poll under TLS) reads requests. When a request is complete its connection is
/// suspended and `handler` runs in its own `Task`; when the handler returns, the connection is
/// resumed and the response sent. So a slow handler holds its connection, never the I/O thread, and
/// the number of handlers in flight is bounded by `connectionLimit`.
///
/// A streamed response (`Response.stream`) is sent by the same thread, its connection suspended
/// whenever its buffer is empty. Upgraded connections (`Response.webSocket`) leave MHD's thread for
/// a second one, started on first use, that does the socket I/O of all WebSockets (and watches
/// suspended streams for clients that hang up). Over plain HTTP a thread of the server's own
/// accepts, and a connection that opens a stream with a short head is served by a second MHD
/// daemon with small per-connection pools (`Acceptor`, `FirstRequest`).
public final class Server: Sendable {
    /// The host the server listens on, as given.
    public let host: String
    /// The bound port (the kernel's choice when `port` 0 was asked for).
    public let port: UInt16
    /// Whether it serves HTTPS.
    let servesTLS: Bool
    private let core: ServerCore

    /// Starts listening and serving at once.
    ///
    /// - Parameters:
    ///   - host: an IPv4 literal ("0.0.0.0" for all interfaces), "localhost", or an IPv6 literal.
    ///   - port: 0 for an ephemeral port; read the result from `port`.
    ///   - tls: serve HTTPS only, with this certificate. Upgraded connections (WebSockets) are
    ///     then relayed by libmicrohttpd through a socketpair, slowly: libmicrohttpd 0.9.75 moves
    ///     their bytes 4 at a time (its pool is used up by then; fixed in 0.9.77).
    ///   - maxBodyBytes: longer bodies are answered with `errorResponder(.bodyTooLarge)`.
    ///   - connectionLimit: open connections served. A request on a connection beyond it is
    ///     answered `errorResponder(.tooManyConnections)` (503, `Retry-After`) and the connection
    ///     closed; `connectionReserve` more are accepted for that, past which the kernel's
    ///     backlog holds new connections until some close.
    ///   - connectionsPerClient: open connections from one peer address. A request on one beyond
    ///     it is answered `errorResponder(.tooManyConnectionsFromClient)` (429, `Retry-After`)
    ///     and its connection closed. `Int.max`: no such limit.
    ///   - idleTimeoutSeconds: an idle connection (not one waiting for its handler) is closed after this.
    ///   - log: receives libmicrohttpd's error messages (client resets and the like), on its I/O
    ///     thread; it must not block. Nil drops them; start-up errors are thrown either way.
    ///   - errorResponder: renders requests answered without the handler; called on the I/O thread.
    ///   - onRefusal: told of each request the server refuses itself (a limit, a malformed
    ///     request) with the client's address, on the I/O thread; it must not block.
    ///   - handler: answers every complete request, usually `router.handle`.
    /// - Throws: `ServerStartError` when the host is not an address or the socket cannot be bound.
    public init(
        host: String,
        port: UInt16,
        tls: TLSCredentials? = nil,
        maxBodyBytes: Int = 64 * 1024,
        connectionLimit: Int = 1024,
        connectionReserve: Int = Server.defaultConnectionReserve,
        connectionsPerClient: Int = Int.max,
        idleTimeoutSeconds: Int = 60,
        log: (@Sendable (String) -> Void)? = nil,
        errorResponder: @escaping @Sendable (ServerError) -> Response,
        onRefusal: (@Sendable (ServerError, _ client: String) -> Void)? = nil,
        handler: @escaping Handler
    ) throws {
        guard let address = ListenAddress(host: host, port: port) else {
            throw ServerStartError(host: host, port: port, reason: "not an IPv4 or IPv6 address")
        }
        let core = ServerCore(
            maxBodyBytes: max(0, maxBodyBytes), log: log, errorResponder: errorResponder, onRefusal: onRefusal,
            handler: handler)
        self.host = host
        servesTLS = tls != nil
        self.port = try core.start(
            host: host, address: address, port: port, tls: tls,
            connectionLimit: max(1, connectionLimit), connectionReserve: max(1, connectionReserve),
            connectionsPerClient: max(1, connectionsPerClient), idleTimeoutSeconds: idleTimeoutSeconds)
        self.core = core
    }

    /// Connections accepted past `connectionLimit` only to be answered 503.
    public static let defaultConnectionReserve = 64

    /// Connections open now (streams, WebSockets and requests).
    public var openConnections: Int { core.openConnections }

    /// Raises the soft limit of open file descriptors (`ulimit -n`) toward `wanted`, as far as the
    /// hard limit allows, and returns the limit in force (each connection takes one).
    public static func raiseDescriptorLimit(to wanted: Int) -> Int {
        DescriptorLimit.raise(to: wanted)
    }

    /// Stops serving at once: connections waiting for a handler are resumed and closed (usually
    /// without a response; a 503 if MHD gets to them first), their handlers run on and their
    /// responses are dropped; open streams end (`onClose` runs); WebSockets get a close frame with
    /// 1001 and are closed without waiting for the answer; then the daemon and its threads stop
    /// and the port is released.
    /// Idempotent; also done on deinit. Must not be called from `errorResponder` or `log`, which
    /// run on the I/O thread this call waits for.
    public func stop() {
        core.stop()
    }

    #if DEBUG
    /// Wedges the I/O thread, for ever, at the next connection it opens or closes: a fault for
    /// the tests of a watchdog (debug builds only).
    public func stallForTesting() { core.stallForTesting() }
    #endif

    deinit {
        core.stop()
    }
}
