import Synchronization

/// Answers one request; runs on the Swift concurrency pool, never on the server's I/O thread.
public typealias Handler = @Sendable (Request) async -> Response

/// Dispatches requests by method and path pattern (`PathPattern`); a `{name}` segment's value
/// lands in `Request.pathParameters`. When several
/// patterns match, the one with a literal at the first position where they differ wins
/// (`/devices/scan` before `/devices/{id}`), among the routes of the request's method.
public final class Router: Sendable {
    private let errorResponder: @Sendable (ServerError) -> Response
    private let routes = Mutex<[Route]>([])

    public init(errorResponder: @escaping @Sendable (ServerError) -> Response) {
        self.errorResponder = errorResponder
    }

    /// Registers a handler; do this before serving. A malformed pattern or a second handler for
    /// the same method and pattern is a programming error and traps.
    public func add(_ method: String, _ pattern: String, _ handler: @escaping Handler) {
        let route = Route(method: method.uppercased(), pattern: PathPattern(pattern), handler: handler)
        routes.withLock { routes in
            precondition(
                !routes.contains { $0.method == route.method && $0.pattern.shape == route.pattern.shape },
                "duplicate route \(route.method) \(pattern)")
            routes.append(route)
        }
    }

    /// Runs the matching handler. Unknown path: `.notFound`. Path known for other methods only:
    /// `.methodNotAllowed` with an `Allow` header. `HEAD` without its own route runs the `GET`
    /// route and drops the body. Errors a handler's response leaves to the router (a refused
    /// WebSocket upgrade) are rendered by `errorResponder`.
    public func handle(_ request: Request) async -> Response {
        let routes = self.routes.withLock { $0 }
        let matches = routes.compactMap { route in
            route.pattern.match(request.pathSegments).map { (route: route, parameters: $0) }
        }
        if matches.isEmpty {
            return errorResponder(.notFound(method: request.method, path: request.path))
        }
        if let response = await run(request, matches, method: request.method) {
            return response
        }
        if request.method == "HEAD", var response = await run(request, matches, method: "GET") {
            response.body = []
            return response
        }
        let allow = Self.allowed(matches.map(\.route.method))
        var response = errorResponder(.methodNotAllowed(allowed: allow))
        if response.header("Allow") == nil {
            response.headers.append((name: "Allow", value: allow.joined(separator: ", ")))
        }
        return response
    }

    /// The methods routed for the request's path (`HEAD` where `GET` is), sorted; empty for an
    /// unknown path. CORS preflight answers list them.
    public func allowedMethods(_ request: Request) -> [String] {
        let routes = self.routes.withLock { $0 }
        return Self.allowed(routes.filter { $0.pattern.matches(request) }.map(\.method))
    }

    /// The methods of some routes, with `HEAD` where `GET` is, sorted.
    private static func allowed(_ methods: [String]) -> [String] {
        var allowed = Set(methods)
        if allowed.contains("GET") { allowed.insert("HEAD") }
        return allowed.sorted()
    }

    /// Runs the most specific of the matching routes for `method`, if there is one.
    private func run(
        _ request: Request, _ matches: [(route: Route, parameters: [String: String])], method: String
    ) async -> Response? {
        let candidates = matches.filter { $0.route.method == method }
        guard let best = candidates.min(by: { $0.route.pattern.isMoreSpecific(than: $1.route.pattern) }) else { return nil }
        var routed = request
        routed.pathParameters = best.parameters
        return await best.route.handler(routed).rendered(by: errorResponder)
    }
}

private struct Route: Sendable {
    let method: String
    let pattern: PathPattern
    let handler: Handler
}
