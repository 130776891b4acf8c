import HTTPServer
import Synchronization

/// Who may do what, in front of the routes: origins (and the DNS-rebinding guard), CORS
/// preflights, the request rate per client, bearer tokens and their roles, and the media type of
/// bodies. A refused request is answered here, in the server's error shape, with one log line.
///
/// Order: a refused origin or host (403) → a preflight (answered without a token, as browsers
/// send none) → the client's rate (429) → a token in the URL outside the routes that take one
/// (401) → the token (401; a read-only token on a request that changes something, 403) → the
/// body's media type (415) → the route.
public final class AccessControl: Sendable {
    public struct Configuration: Sendable {
        public var tokens: TokenSet
        public var origins: OriginPolicy
        /// Requests per second and client address on average (0: no limit), and at once.
        public var requestsPerSecond: Double
        public var requestBurst: Double
        /// Paths served without a token (a health check).
        public var openPaths: Set<String>
        /// Routes that take a token in the URL (`?access_token=`): the streams a browser opens with
        /// `EventSource` or `WebSocket`, which cannot set headers. A URL ends up in proxies' logs and
        /// shells' histories, so anywhere else a token in it is refused.
        public var queryTokenRoutes: [PathPattern]

        public init(tokens: TokenSet = TokenSet(), origins: OriginPolicy, requestsPerSecond: Double = 0,
                    requestBurst: Double = 0, openPaths: Set<String> = [], queryTokenRoutes: [PathPattern] = []) {
            self.tokens = tokens
            self.origins = origins
            self.requestsPerSecond = requestsPerSecond
            self.requestBurst = requestBurst
            self.openPaths = openPaths
            self.queryTokenRoutes = queryTokenRoutes
        }
    }

    private let tokens: Mutex<TokenSet>
    private let origins: OriginPolicy
    private let limiter: RateLimiter?
    private let openPaths: Set<String>
    private let queryTokenRoutes: [PathPattern]
    public let refusals: RefusalLog

    public init(_ configuration: Configuration, log: @escaping @Sendable (String) -> Void) {
        tokens = Mutex(configuration.tokens)
        origins = configuration.origins
        limiter = configuration.requestsPerSecond > 0
            ? RateLimiter(perSecond: configuration.requestsPerSecond,
                          burst: max(configuration.requestBurst, configuration.requestsPerSecond))
            : nil
        openPaths = configuration.openPaths
        queryTokenRoutes = configuration.queryTokenRoutes
        refusals = RefusalLog(log: log)
    }

    /// The tokens in force from now on (SIGHUP reloads them).
    public func replaceTokens(_ set: TokenSet) { tokens.withLock { $0 = set } }

    public var requiresTokens: Bool { tokens.withLock { !$0.isEmpty } }

    /// Methods that never change anything; everything else needs a read-write token.
    static let readMethods: Set<String> = ["GET", "HEAD", "OPTIONS"]
    /// Headers a cross-origin page may send (answered to preflights).
    static let allowedRequestHeaders = "Authorization, Content-Type, Last-Event-ID"

    /// The role of the request's credentials: `.readWrite` when no tokens are configured, nil
    /// when tokens are and the request has none that is valid.
    public func role(of request: Request) -> Role? {
        let set = tokens.withLock { $0 }
        guard !set.isEmpty else { return .readWrite }
        return credential(of: request).flatMap { set.role(of: $0) }
    }

    /// The query parameter that carries a token on `queryTokenRoutes`.
    static let queryTokenName = "access_token"

    /// Whether the request may carry its token in the URL: a GET of one of `queryTokenRoutes`.
    private func takesTokenInQuery(_ request: Request) -> Bool {
        (request.method == "GET" || request.method == "HEAD") && queryTokenRoutes.contains { $0.matches(request) }
    }

    /// The bearer token a request carries: `Authorization: Bearer …`; for what a browser cannot
    /// give headers to (EventSource, WebSocket), `?access_token=…` on a GET of one of
    /// `queryTokenRoutes`, or a WebSocket subprotocol `bearer.…` offered with the real one.
    func credential(of request: Request) -> Substring? {
        if let authorization = request.headers["authorization"] {
            let parts = authorization.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
            if parts.count == 2, parts[0].lowercased() == "bearer" { return parts[1].trimmingWhitespace }
            return nil
        }
        if request.method == "GET" || request.method == "HEAD" {
            if takesTokenInQuery(request), let query = request.query[Self.queryTokenName] { return Substring(query) }
            if let offered = WebSocketHandshake.offeredSubprotocols(request).first(where: { $0.hasPrefix(Self.bearerSubprotocolPrefix) }) {
                return Substring(offered.dropFirst(Self.bearerSubprotocolPrefix.count))
            }
        }
        return nil
    }

    /// The prefix of a WebSocket subprotocol that carries a token: `bearer.TOKEN`.
    public static let bearerSubprotocolPrefix = "bearer."

    /// `handler` behind the checks. `allowedMethods` lists the methods routed for a request's
    /// path (empty when unknown), for preflight answers.
    public func guarded(_ handler: @escaping Handler, allowedMethods: @escaping @Sendable (Request) -> [String]) -> Handler {
        { request in
            // Header names are lower case in `headers`: looked up as they are, per request.
            let host = request.headers["host"]
            let tokens = self.tokens.withLock { $0 }
            let cors: [(name: String, value: String)]
            switch self.origins.verdict(origin: request.headers["origin"], host: host) {
            case .refused(let origin):
                return self.refuse(request, "origin", .forbidden(
                    "pages from \(origin) may not use this gateway; start it with --allow-origin \(origin) to let them"))
            case .allowed(let origin):
                cors = [(name: "Access-Control-Allow-Origin", value: origin), (name: "Vary", value: "Origin"),
                        (name: "Access-Control-Expose-Headers", value: "Retry-After, WWW-Authenticate")]
            case .noOrigin, .sameOrigin:
                cors = []
            }
            if tokens.isEmpty, let host, !OriginPolicy.isAddressOrLocalhost(host),
                !self.origins.lists(host: host) {
                // Without tokens a page could rebind its own name to this address: then its
                // requests are "same-origin" and only the name in Host gives it away.
                return self.refuse(request, "host", .forbidden(
                    "without tokens (--tokens) this gateway answers only requests for an IP address or localhost, not \(host)"))
            }
            if request.method == "OPTIONS" {
                return Self.withHeaders(cors, self.preflight(request, allowedMethods(request), cors: !cors.isEmpty))
            }
            if let limiter = self.limiter, let retryAfter = limiter.take(request.clientAddress) {
                return Self.withHeaders(cors, self.refuse(request, "rate", .tooManyRequests(
                    "more than \(Self.describe(limiter.perSecond)) requests per second from \(request.clientAddress) (--rate-limit); retry in \(retryAfter) s",
                    retryAfter: retryAfter)))
            }
            if !tokens.isEmpty, request.query[Self.queryTokenName] != nil, !self.takesTokenInQuery(request) {
                return Self.withHeaders(cors, self.refuseTokenInQuery(request))
            }
            if !self.openPaths.contains(request.path) {
                if let refusal = self.authorize(request, tokens) { return Self.withHeaders(cors, refusal) }
            }
            if let refusal = self.checkMediaType(request) { return Self.withHeaders(cors, refusal) }
            return Self.withHeaders(cors, await handler(request))
        }
    }

    private func authorize(_ request: Request, _ set: TokenSet) -> Response? {
        guard !set.isEmpty else { return nil }
        guard let credential = credential(of: request) else {
            return refuse(request, "token", .unauthorized(
                "this gateway needs a token: Authorization: Bearer TOKEN (or ?access_token= for event streams)", invalidToken: false))
        }
        guard let role = set.role(of: credential) else {
            return refuse(request, "token", .unauthorized("the token is not valid here", invalidToken: true))
        }
        if role == .readOnly && !Self.readMethods.contains(request.method) {
            return refuse(request, "read-only", .forbidden("a read-only token may only GET and open event streams"))
        }
        return nil
    }

    /// A request that changes something and has a body (or says it has) must send JSON: the
    /// media types a page's plain `fetch` or form may send without a preflight (text/plain,
    /// form encodings) are refused, so a page can never slip a request past CORS.
    private func checkMediaType(_ request: Request) -> Response? {
        guard !Self.readMethods.contains(request.method) else { return nil }
        let declared = request.headers["content-type"]
        guard !request.body.isEmpty || declared != nil else { return nil }
        let mediaType = declared?.split(separator: ";").first.map { $0.trimmingWhitespace.lowercased() }
        guard mediaType != "application/json" else { return nil }
        return refuse(request, "media type", .unsupportedMediaType(
            "send the body as Content-Type: application/json, not \(declared ?? "without a Content-Type")"))
    }

    /// The answer to OPTIONS: a CORS preflight when the page's origin is allowed and the method
    /// is routed; otherwise the methods of the path (`Allow`).
    private func preflight(_ request: Request, _ methods: [String], cors: Bool) -> Response {
        guard !methods.isEmpty else { return .error(.notFound(method: request.method, path: request.path)) }
        let allowed = methods + ["OPTIONS"]
        guard cors, let asked = request.headers["access-control-request-method"] else {
            return Response(status: 204, headers: [(name: "Allow", value: allowed.joined(separator: ", "))])
        }
        guard methods.contains(asked.uppercased()) else {
            return refuse(request, "preflight", .forbidden(
                "\(asked) is not a method of \(request.path); its methods are \(methods.joined(separator: ", "))"))
        }
        return Response(status: 204, headers: [
            (name: "Allow", value: allowed.joined(separator: ", ")),
            (name: "Access-Control-Allow-Methods", value: allowed.joined(separator: ", ")),
            (name: "Access-Control-Allow-Headers", value: Self.allowedRequestHeaders),
            (name: "Access-Control-Max-Age", value: "600"),
        ])
    }

    private func refuse(_ request: Request, _ kind: String, _ error: ServerError, query: String = "") -> Response {
        refusals.refused(kind, client: request.clientAddress, "\(error.status) \(request.method) \(request.path)\(query)")
        return .error(error)
    }

    /// A token in the URL of a route that takes none there: the client learns where it goes, the
    /// log says which route was asked so, without the token.
    private func refuseTokenInQuery(_ request: Request) -> Response {
        let routes = queryTokenRoutes.map(\.description).joined(separator: ", ")
        let message = "send the token in the header Authorization: Bearer TOKEN, not in the URL, which ends up in logs and histories; "
            + (routes.isEmpty ? "no route takes ?\(Self.queryTokenName)="
               : "only the event streams take ?\(Self.queryTokenName)=, for browsers that cannot set headers there: GET \(routes)")
        return refuse(request, "token in URL", .unauthorized(message, invalidToken: false), query: "?\(Self.queryTokenName)=…")
    }

    private static func withHeaders(_ headers: [(name: String, value: String)], _ response: Response) -> Response {
        guard !headers.isEmpty else { return response }
        var response = response
        response.headers += headers
        return response
    }

    private static func describe(_ rate: Double) -> String {
        rate == rate.rounded() ? String(Int(rate)) : String(rate)
    }
}
