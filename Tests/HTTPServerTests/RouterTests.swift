import Testing

@testable import HTTPServer

/// A handler that answers with its own name and the parameters it got.
func named(_ name: String) -> Handler {
    { request in
        let parameters = request.pathParameters.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
        return Response(status: 200, body: Array(([name] + parameters).joined(separator: " ").utf8))
    }
}

func route(_ router: Router, _ method: String, _ path: String) async -> (status: Int, body: String, allow: String?) {
    let response = await router.handle(Request(method: method, path: path))
    return (response.status, String(decoding: response.body, as: UTF8.self), response.header("allow"))
}

struct RouterTests {
    @Test func literalSegmentsBeatParametersWhateverTheOrder() async {
        let router = Router(errorResponder: testErrorResponder)
        router.add("GET", "/devices/{id}", named("device"))
        router.add("GET", "/devices/{id}/services", named("services"))
        router.add("GET", "/devices/scan", named("scan"))
        router.add("GET", "/{a}/{b}", named("any"))

        #expect(await route(router, "GET", "/devices/scan").body == "scan")
        #expect(await route(router, "GET", "/devices/AA").body == "device id=AA")
        #expect(await route(router, "GET", "/devices/AA/services").body == "services id=AA")
        #expect(await route(router, "GET", "/other/x").body == "any a=other b=x")
    }

    @Test func prefersARouteOfTheRequestMethodOverAMoreSpecificOne() async {
        let router = Router(errorResponder: testErrorResponder)
        router.add("POST", "/devices/scan", named("scan"))
        router.add("GET", "/devices/{id}", named("device"))

        #expect(await route(router, "GET", "/devices/scan").body == "device id=scan")
        #expect(await route(router, "POST", "/devices/scan").body == "scan")
    }

    @Test func matchesSegmentsExactly() async {
        let router = Router(errorResponder: testErrorResponder)
        router.add("GET", "/", named("root"))
        router.add("GET", "/a/{x}", named("a"))

        #expect(await route(router, "GET", "/").body == "root")
        #expect(await route(router, "GET", "/a/1").body == "a x=1")
        #expect(await route(router, "GET", "/a/1/").status == 404)
        #expect(await route(router, "GET", "/a/").status == 404)  // a parameter is never empty
        #expect(await route(router, "GET", "/A/1").status == 404)
        #expect(await route(router, "GET", "/a").status == 404)
    }

    @Test func keepsSlashesInsideDecodedSegments() async {
        let router = Router(errorResponder: testErrorResponder)
        router.add("GET", "/chars/{uuid}/value", named("value"))
        let request = Request(
            method: "GET", pathSegments: ["chars", "a/b", "value"], queryItems: [], headers: [], body: [],
            remoteAddress: "")
        let response = await router.handle(request)
        #expect(String(decoding: response.body, as: UTF8.self) == "value uuid=a/b")
        #expect(request.path == "/chars/a/b/value")
    }

    @Test func answersNotFoundAndMethodNotAllowedThroughTheResponder() async {
        let router = Router(errorResponder: testErrorResponder)
        router.add("get", "/items/{id}", named("get"))
        router.add("PATCH", "/items/{id}", named("patch"))
        router.add("POST", "/items/{id}/x", named("other path"))

        let missing = await route(router, "GET", "/nothing")
        #expect(missing.status == 404)
        #expect(missing.body == #"{"error":"notFound GET /nothing"}"#)

        let wrong = await route(router, "delete", "/items/1")
        #expect(wrong.status == 405)
        #expect(wrong.allow == "GET, HEAD, PATCH")
        #expect(wrong.body == #"{"error":"methodNotAllowed GET,HEAD,PATCH"}"#)
    }

    @Test func keepsAnAllowHeaderTheResponderSets() async {
        let router = Router { error in Response(status: error.status, headers: [(name: "allow", value: "custom")]) }
        router.add("GET", "/x", named("x"))
        let response = await router.handle(Request(method: "POST", path: "/x"))
        #expect(response.headers.filter { $0.name.lowercased() == "allow" }.map(\.value) == ["custom"])
    }

    @Test func headFallsBackToGetWithoutBody() async {
        let router = Router(errorResponder: testErrorResponder)
        router.add("GET", "/a", named("get a"))
        router.add("GET", "/b", named("get b"))
        router.add("HEAD", "/b", { _ in Response(status: 204, headers: [(name: "X-Head", value: "1")]) })

        let a = await router.handle(Request(method: "HEAD", path: "/a"))
        #expect(a.status == 200)
        #expect(a.body.isEmpty)
        let b = await router.handle(Request(method: "HEAD", path: "/b"))
        #expect(b.status == 204)
        #expect(b.header("x-head") == "1")
    }
}

struct RequestTargetTests {
    @Test(arguments: [
        ("plain", "plain"),
        ("a%20b", "a b"),
        ("a+b", "a+b"),
        ("%2F%2f", "//"),
        ("caf%C3%A9", "café"),
        ("%E2%9C%93", "✓"),
        ("100%", nil),
        ("%zz", nil),
        ("%4", nil),
        ("%FF", nil),  // not UTF-8
        ("%C3", nil),  // truncated UTF-8
    ] as [(String, String?)])
    func percentDecodes(encoded: String, decoded: String?) {
        #expect(RequestTarget.percentDecode(encoded) == decoded)
    }

    @Test(arguments: [
        ("/", []),
        ("/a/b", ["a", "b"]),
        ("/a/", ["a", ""]),
        ("//a", ["", "a"]),
        ("/a%2Fb/c", ["a/b", "c"]),
        ("a/b", nil),
        ("*", nil),
        ("/a%2", nil),
        // Found by Tests/fuzz/names: "/" and a combining mark are one character, still a separator.
        ("/a/\u{301}b", ["a", "\u{301}b"]),
        ("/\u{6EC}", ["\u{6EC}"]),
    ] as [(String, [String]?)])
    func decodesPathsSegmentBySegment(raw: String, segments: [String]?) {
        #expect(RequestTarget.decodePath(raw) == segments)
    }

    @Test func buildsRequestsInCode() {
        let request = Request(
            method: "post", path: "/a/b", queryItems: [(name: "k", value: "1"), (name: "k", value: "2")],
            headers: ["X-One": "1"])
        #expect(request.method == "POST")
        #expect(request.pathSegments == ["a", "b"])
        #expect(request.query == ["k": "2"])
        #expect(request.headers == ["x-one": "1"])
        #expect(request.header("X-ONE") == "1")
    }
}
