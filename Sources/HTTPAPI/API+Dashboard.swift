import GatewayCore
import Dashboard
import HTTPServer

/// The dashboard: `GET /` answers a browser (`Accept: text/html`) with the page and anything else
/// with the JSON index; `GET /ui/{file}` its scripts, styles and the UUID names. The page uses
/// only the public API, with the token its user types in when tokens are on.
extension API {
    /// Served without a token, like the health check: the page must load to ask for one, and it
    /// holds nothing but the dashboard's own code (see docs/security.md).
    public static let openPaths: Set<String> = Set(["/v1/state", Dashboard.index.path] + Dashboard.assets.keys)

    func addDashboardRoutes(to router: Router) {
        let index = handle { _ in Index(name: "gattway", version: self.gateway.version, documentation: "openapi.yaml") }
        router.add("GET", "/") { request in
            guard Self.wantsHTML(request) else {
                var response = await index(request)
                response.headers.append((name: "Vary", value: "Accept"))
                return response
            }
            return Self.serve(Dashboard.index, request, vary: true)
        }
        router.add("GET", "/ui/{file}") { request in
            guard let asset = Dashboard.assets[request.path] else {
                return API.errorResponder(.notFound(method: request.method, path: request.path))
            }
            return Self.serve(asset, request, vary: false)
        }
    }

    /// Whether the client asks for HTML (a browser navigating) rather than the JSON index.
    static func wantsHTML(_ request: Request) -> Bool {
        guard let accept = request.headers["accept"] else { return false }
        return accept.split(separator: ",").contains { range in
            let parameters = range.split(separator: ";").map { $0.filter { $0 != " " && $0 != "\t" }.lowercased() }
            // `q=0` says "not this".
            return parameters.first == "text/html" && !parameters.dropFirst().contains { $0 == "q=0" || $0 == "q=0.0" }
        }
    }

    /// `asset`, or 304 when the client's copy is current. Browsers revalidate every time
    /// (`no-cache`), so a new gattway's page is never mixed with an old one's script.
    static func serve(_ asset: Dashboard.Asset, _ request: Request, vary: Bool) -> Response {
        var headers: [(name: String, value: String)] = [
            (name: "ETag", value: asset.etag),
            (name: "Cache-Control", value: "no-cache"),
            (name: "Content-Security-Policy", value: Dashboard.contentSecurityPolicy),
            (name: "X-Content-Type-Options", value: "nosniff"),
            (name: "Referrer-Policy", value: "no-referrer"),
        ]
        if vary { headers.append((name: "Vary", value: "Accept")) }
        if let known = request.headers["if-none-match"],
           known.split(separator: ",").map({ $0.filter { $0 != " " } }).contains(where: { $0 == asset.etag || $0 == "*" }) {
            return Response(status: 304, headers: headers)
        }
        return Response(status: 200, headers: [(name: "Content-Type", value: asset.contentType)] + headers, body: asset.bytes)
    }
}
