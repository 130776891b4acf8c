@testable import HTTPServer
import Synchronization
import Testing
@testable import Access

@Suite struct AccessControlTests {
    static let rw = "rw-token-0123456789abcdef"
    static let ro = "ro-token-0123456789abcdef"

    /// Answers 200 and counts what got through.
    final class Counter: Sendable {
        let calls = Atomic<Int>(0)
        var handler: Handler {
            { _ in
                self.calls.add(1, ordering: .relaxed)
                return Response(status: 200)
            }
        }
    }

    /// Routes that take a token in the URL, as the API names its streams.
    static let streams = ["/v1/events", "/v1/ws", "/v1/devices/{id}/serial"].map(PathPattern.init)

    static func guarded(tokens: String? = nil, origins: [String] = [], rate: Double = 0, burst: Double = 0,
                        log: @escaping @Sendable (String) -> Void = { _ in }) throws -> (Handler, Counter) {
        let set = try tokens.map { try TokenSet.parse(lines: $0, source: "t") } ?? TokenSet()
        let access = AccessControl(.init(tokens: set, origins: try OriginPolicy(allowing: origins),
                                         requestsPerSecond: rate, requestBurst: burst, openPaths: ["/v1/state"],
                                         queryTokenRoutes: streams), log: log)
        let counter = Counter()
        return (access.guarded(counter.handler, allowedMethods: { _ in ["GET", "HEAD", "POST"] }), counter)
    }

    static func request(_ method: String = "GET", _ path: String = "/v1/devices", headers: [String: String] = [:],
                        query: [(name: String, value: String)] = [], body: String = "") -> Request {
        Request(method: method, path: path, queryItems: query, headers: ["host": "127.0.0.1:8080"].merging(headers) { $1 },
                body: Array(body.utf8), remoteAddress: "127.0.0.1:5000")
    }

    @Test func tokensEveryCarrier() async throws {
        let (handler, counter) = try Self.guarded(tokens: "\(Self.rw)\nro:\(Self.ro)")
        #expect(await handler(Self.request()).status == 401)
        #expect(await handler(Self.request(headers: ["authorization": "Bearer wrong-token-0123456789"])).status == 401)
        #expect(await handler(Self.request(headers: ["authorization": "Basic \(Self.rw)"])).status == 401)
        #expect(await handler(Self.request(headers: ["authorization": "Bearer \(Self.rw)"])).status == 200)
        #expect(await handler(Self.request(headers: ["authorization": "bearer  \(Self.ro)"])).status == 200)
        #expect(await handler(Self.request("GET", "/v1/events", query: [("access_token", Self.ro)])).status == 200)
        #expect(await handler(Self.request(headers: ["sec-websocket-protocol": "gattway, bearer.\(Self.rw)"])).status == 200)
        // The query and subprotocol carriers are for GETs (streams) only.
        #expect(await handler(Self.request("POST", "/v1/events", query: [("access_token", Self.rw)])).status == 401)
        #expect(counter.calls.load(ordering: .relaxed) == 4)
    }

    /// `?access_token=` is taken by the streams only (a browser's EventSource and WebSocket cannot
    /// set headers); anywhere else it is refused, the answer saying where a token goes, even with
    /// a valid header beside it, and the log line has no token.
    @Test(arguments: [
        ("GET", "/v1/events", 200), ("GET", "/v1/ws", 200), ("GET", "/v1/devices/F0:00:00:00:00:0F/serial", 200),
        ("HEAD", "/v1/events", 200),
        ("GET", "/v1/devices", 401), ("GET", "/v1/devices/F0:00:00:00:00:0F", 401), ("GET", "/v1/events/x", 401),
        ("GET", "/v1/devices/F0:00:00:00:00:0F/serial/x", 401), ("GET", "/v1/state", 401), ("POST", "/v1/events", 401),
        ("DELETE", "/v1/scan", 401),
    ])
    func tokensInTheURLOnlyOnStreams(method: String, path: String, status: Int) async throws {
        let lines = Mutex<[String]>([])
        let (handler, counter) = try Self.guarded(tokens: Self.rw, log: { line in lines.withLock { $0.append(line) } })
        let response = await handler(Self.request(method, path, query: [("access_token", Self.rw)]))
        #expect(response.status == status)
        #expect(counter.calls.load(ordering: .relaxed) == (status == 200 ? 1 : 0))
        if status == 401 {
            guard case .error(.unauthorized(let text, invalidToken: false)) = response.kind else {
                Issue.record("not a refusal for want of a token: \(response.kind)")
                return
            }
            #expect(text.contains("Authorization: Bearer TOKEN") && text.contains("/v1/devices/{id}/serial"), "\(text)")
            #expect(lines.withLock { $0 } == ["refused (token in URL) 127.0.0.1: 401 \(method) \(path)?access_token=…"])
            let withHeader = await handler(Self.request(method, path, headers: ["authorization": "Bearer \(Self.rw)"],
                                                        query: [("access_token", Self.rw)]))
            #expect(withHeader.status == 401)
        }
        #expect(!lines.withLock { $0 }.joined().contains(Self.rw))
    }

    @Test func withoutTokensTheQueryIsNoMatter() async throws {
        let (handler, counter) = try Self.guarded()
        #expect(await handler(Self.request(query: [("access_token", Self.rw)])).status == 200)
        #expect(counter.calls.load(ordering: .relaxed) == 1)
    }

    @Test func readOnlyTokensReadOnly() async throws {
        let (handler, counter) = try Self.guarded(tokens: "ro:\(Self.ro)")
        let auth = ["authorization": "Bearer \(Self.ro)", "content-type": "application/json"]
        #expect(await handler(Self.request(headers: auth)).status == 200)
        #expect(await handler(Self.request("HEAD", headers: auth)).status == 200)
        for method in ["POST", "PUT", "DELETE", "PATCH"] {
            #expect(await handler(Self.request(method, headers: auth, body: "{}")).status == 403)
        }
        #expect(counter.calls.load(ordering: .relaxed) == 2)
    }

    @Test func openPathNeedsNoToken() async throws {
        let (handler, _) = try Self.guarded(tokens: Self.rw)
        #expect(await handler(Self.request("GET", "/v1/state")).status == 200)
        #expect(await handler(Self.request("GET", "/v1/state/")).status == 401)
    }

    @Test(arguments: [
        ("POST", "text/plain", "{}", 415), ("POST", "application/x-www-form-urlencoded", "a=b", 415),
        ("POST", "multipart/form-data; boundary=x", "", 415), ("POST", nil, "{}", 415), ("PUT", "text/plain", "{}", 415),
        ("POST", "application/json", "{}", 200), ("POST", "Application/JSON; charset=utf-8", "{}", 200),
        ("POST", nil, "", 200), ("DELETE", nil, "", 200), ("GET", "text/plain", "x", 200),
    ] as [(String, String?, String, Int)])
    func stateChangingBodiesAreJSON(method: String, contentType: String?, body: String, status: Int) async throws {
        let (handler, _) = try Self.guarded()
        let headers = contentType.map { ["content-type": $0] } ?? [:]
        #expect(await handler(Self.request(method, headers: headers, body: body)).status == status)
    }

    @Test func foreignOriginsRefusedAllowedOnesGetCORS() async throws {
        let (handler, counter) = try Self.guarded(origins: ["http://dash.example:8123"])
        #expect(await handler(Self.request(headers: ["origin": "https://evil.example"])).status == 403)
        #expect(await handler(Self.request(headers: ["origin": "null"])).status == 403)
        let same = await handler(Self.request(headers: ["origin": "http://127.0.0.1:8080"]))
        #expect(same.status == 200 && same.header("Access-Control-Allow-Origin") == nil)
        let listed = await handler(Self.request(headers: ["origin": "http://DASH.example:8123"]))
        #expect(listed.status == 200)
        #expect(listed.header("Access-Control-Allow-Origin") == "http://DASH.example:8123")
        #expect(listed.header("Vary") == "Origin")
        #expect(counter.calls.load(ordering: .relaxed) == 2)
    }

    @Test func preflights() async throws {
        let (handler, counter) = try Self.guarded(tokens: Self.rw, origins: ["http://dash.example"])
        let ok = await handler(Self.request("OPTIONS", headers: [
            "origin": "http://dash.example", "access-control-request-method": "POST",
            "access-control-request-headers": "authorization, content-type"]))
        #expect(ok.status == 204)
        #expect(ok.header("Access-Control-Allow-Origin") == "http://dash.example")
        #expect(ok.header("Access-Control-Allow-Methods") == "GET, HEAD, POST, OPTIONS")
        #expect(ok.header("Access-Control-Allow-Headers")?.contains("Authorization") == true)
        let wrongMethod = await handler(Self.request("OPTIONS", headers: [
            "origin": "http://dash.example", "access-control-request-method": "DELETE"]))
        #expect(wrongMethod.status == 403)
        let foreign = await handler(Self.request("OPTIONS", headers: [
            "origin": "http://evil.example", "access-control-request-method": "GET"]))
        #expect(foreign.status == 403 && foreign.header("Access-Control-Allow-Origin") == nil)
        let plain = await handler(Self.request("OPTIONS"))
        #expect(plain.status == 204 && plain.header("Allow") == "GET, HEAD, POST, OPTIONS")
        #expect(counter.calls.load(ordering: .relaxed) == 0)
    }

    @Test func dnsRebindingGuardWithoutTokens() async throws {
        let (open, _) = try Self.guarded(origins: ["http://dash.example:8123"])
        for host in ["127.0.0.1:8080", "localhost:8080", "[::1]:8080", "192.168.1.20", "dash.example:8080"] {
            #expect(await open(Self.request(headers: ["host": host])).status == 200, "\(host)")
        }
        // Names that only look like addresses are names (127.0.0.1.nip.io resolves to 127.0.0.1).
        for host in ["attacker.example:8080", "127.0.0.1.nip.io:8080", "1.2.3.4.5", "256.1.1.1", "10.0.0", "1e100.net"] {
            #expect(await open(Self.request(headers: ["host": host])).status == 403, "\(host)")
        }
        let (tokens, _) = try Self.guarded(tokens: Self.rw)
        #expect(await tokens(Self.request(headers: ["host": "gattway.home.arpa", "authorization": "Bearer \(Self.rw)"])).status == 200)
    }

    @Test func rateLimitAnswers429AndLogsOnce() async throws {
        let lines = Mutex<[String]>([])
        let (handler, _) = try Self.guarded(rate: 1, burst: 3, log: { line in lines.withLock { $0.append(line) } })
        for _ in 0..<3 { #expect(await handler(Self.request()).status == 200) }
        let refused = await handler(Self.request())
        #expect(refused.status == 429)
        for _ in 0..<5 { #expect(await handler(Self.request()).status == 429) }
        let logged = lines.withLock { $0 }
        #expect(logged.count == 1)
        #expect(logged.first?.contains("refused (rate) 127.0.0.1") == true)
    }
}

@Suite struct RateLimiterTests {
    @Test func bucketsRefillAndStayBounded() {
        let limiter = RateLimiter(perSecond: 2, burst: 2, maxClients: 3)
        let start = ContinuousClock.now
        #expect(limiter.take("a", now: start) == nil)
        #expect(limiter.take("a", now: start) == nil)
        #expect(limiter.take("a", now: start) == 1)
        #expect(limiter.take("a", now: start + .milliseconds(500)) == nil)
        for client in ["b", "c", "d", "e"] { _ = limiter.take(client, now: start + .seconds(10)) }
        #expect(limiter.clientCount <= 3)
    }
}

@Suite struct OriginPolicyTests {
    @Test(arguments: [
        ("http://Example.com:80", "http://example.com"), ("https://a.b:443", "https://a.b"), ("https://a.b:8443", "https://a.b:8443"),
        ("http://[::1]:8080", "http://[::1]:8080"), ("http://[::1]:80", "http://[::1]"),
    ])
    func normalized(origin: String, expected: String) {
        #expect(OriginPolicy.normalize(origin) == expected)
    }

    @Test(arguments: ["null", "example.com", "http://a.b/path", "http://user@a.b", "http://", "://a.b"])
    func notOrigins(text: String) {
        #expect(OriginPolicy.normalize(text) == nil)
        #expect(throws: OriginError.self) { try OriginPolicy(allowing: [text]) }
    }

    @Test func sameOriginIsTheHostAskedFor() throws {
        let policy = try OriginPolicy(allowing: [])
        #expect(policy.verdict(origin: "http://10.0.0.2:8080", host: "10.0.0.2:8080") == .sameOrigin)
        #expect(policy.verdict(origin: "http://10.0.0.2", host: "10.0.0.2:80") == .sameOrigin)
        #expect(policy.verdict(origin: "http://10.0.0.2:8081", host: "10.0.0.2:8080") == .refused("http://10.0.0.2:8081"))
        #expect(policy.verdict(origin: nil, host: "x") == .noOrigin)
        #expect(try OriginPolicy(allowing: ["*"]).verdict(origin: "http://any.where", host: "x") == .allowed("http://any.where"))
    }
}
