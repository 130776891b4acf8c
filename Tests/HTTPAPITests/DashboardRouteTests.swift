import Dashboard
import HTTPServer
import Testing
@testable import GatewayCore
import GatewayTesting
@testable import HTTPAPI

@Suite struct DashboardRouteTests {
    let router = Gateway(central: FakeCentral(), version: "test").router()

    func get(_ path: String, _ headers: [String: String] = [:]) async -> Response {
        await router.handle(Request(method: "GET", path: path, headers: headers))
    }

    @Test(arguments: [
        ("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", true),   // a browser navigating
        ("TEXT/HTML", true),
        ("application/json", false),
        ("*/*", false),
        ("text/html;q=0, application/json", false),
        ("text/html; q=0.0", false),
        ("text/htmlx", false),
    ])
    func pageOrIndexByAccept(accept: String, page: Bool) async {
        let response = await get("/", ["accept": accept])
        #expect(response.status == 200)
        #expect(response.header("content-type") == (page ? "text/html; charset=utf-8" : "application/json"))
        #expect(response.header("vary") == "Accept")
    }

    @Test func withoutAcceptTheIndex() async {
        #expect(await get("/").header("content-type") == "application/json")
    }

    @Test func everyFileHasItsTypeAndAValidatorAndThePolicy() async throws {
        for (path, asset) in Dashboard.assets {
            let response = await get(path)
            #expect(response.status == 200, "\(path)")
            #expect(response.body == asset.bytes)
            #expect(response.header("content-type") == asset.contentType)
            #expect(response.header("content-security-policy") == Dashboard.contentSecurityPolicy)
            let etag = try #require(response.header("etag"))
            let again = await get(path, ["if-none-match": "\"0000000000000000\", " + etag])
            #expect(again.status == 304 && again.body.isEmpty)
            #expect(again.header("etag") == etag)
        }
        #expect(Set(Dashboard.assets.values.map(\.etag)).count == Dashboard.assets.count)
    }

    @Test func anotherNameIsNotFound() async {
        #expect(await get("/ui/secret.txt").status == 404)
        #expect(await get("/ui/app.js", ["if-none-match": "\"stale\""]).status == 200)
    }

    @Test func onlyTheDashboardAndTheHealthCheckAreOpen() {
        #expect(API.openPaths == ["/", "/v1/state", "/ui/app.js", "/ui/style.css", "/ui/names.json", "/ui/icon.svg"])
    }

    /// The routes that take `?access_token=` are the streams, each routed for GET.
    @Test func onlyTheStreamsTakeATokenInTheURL() {
        #expect(API.queryTokenRoutes.map(\.description) == ["/v1/events", "/v1/ws", "/v1/devices/{id}/serial"])
        for route in API.queryTokenRoutes {
            let path = route.description.replacingOccurrences(of: "{id}", with: "F0:00:00:00:00:0F")
            #expect(router.allowedMethods(Request(method: "GET", path: path)) == ["GET", "HEAD"], "\(path)")
        }
    }
}
