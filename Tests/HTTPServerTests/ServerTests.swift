import Foundation
import Synchronization
import Testing

@testable import HTTPServer

/// Renders errors the way a caller of the server would, so tests can see which error came back.
let testErrorResponder: @Sendable (ServerError) -> Response = { error in
    let kind = switch error {
    case .bodyTooLarge(let limit): "bodyTooLarge \(limit)"
    case .notFound(let method, let path): "notFound \(method) \(path)"
    case .methodNotAllowed(let allowed): "methodNotAllowed \(allowed.joined(separator: ","))"
    case .badRequest(let message): "badRequest \(message)"
    case .tooManyConnections(let limit): "tooManyConnections \(limit)"
    case .tooManyConnectionsFromClient(let limit): "tooManyConnectionsFromClient \(limit)"
    case .unauthorized(let message, _), .forbidden(let message), .unsupportedMediaType(let message),
         .tooManyRequests(let message, _): message
    }
    return Response.json(error.status, Array("{\"error\":\"\(kind)\"}".utf8))
}

/// A server on 127.0.0.1, an ephemeral port, routing through `router`; stopped by the caller.
func startServer(
    maxBodyBytes: Int = 64 * 1024, tls: TLSCredentials? = nil, _ configure: (Router) -> Void
) throws -> Server {
    let router = Router(errorResponder: testErrorResponder)
    configure(router)
    return try Server(
        host: "127.0.0.1", port: 0, tls: tls, maxBodyBytes: maxBodyBytes,
        errorResponder: testErrorResponder, handler: router.handle)
}

/// A handler's work that lasts until the test lets it go, counting the calls that entered and
/// finished. It gives up waiting after `bound`, so that a failing test cannot hang.
final class HeldWork: Sendable {
    private let state = Mutex((entered: 0, finished: 0, released: false))
    var entered: Int { state.withLock { $0.entered } }
    var finished: Int { state.withLock { $0.finished } }

    func release() { state.withLock { $0.released = true } }

    func run(bound: Duration = .seconds(5)) async {
        state.withLock { $0.entered += 1 }
        _ = await eventually(within: bound) { state.withLock { $0.released } }
        state.withLock { $0.finished += 1 }
    }
}

func json(_ value: some Encodable) -> Response {
    let encoder = JSONEncoder()
    encoder.outputFormatting = .sortedKeys
    return .json(200, Array(try! encoder.encode(value)))
}

func decode<T: Decodable>(_ type: T.Type, _ response: WireResponse) throws -> T {
    try JSONDecoder().decode(type, from: Data(response.body))
}

struct ServerTests {
    @Test func routesWithDecodedPathParameters() async throws {
        let server = try startServer { router in
            router.add("GET", "/v1/devices/{id}/characteristics/{char}") { request in
                json(request.pathParameters.merging(["path": request.path]) { $1 })
            }
        }
        defer { server.stop() }
        #expect(server.port != 0)

        let response = try await fetch(server.port, "GET", "/v1/devices/AA%3ABB/characteristics/2a%2F19%20x")
        #expect(response.status == 200)
        #expect(response.headers["content-type"] == "application/json")
        let parameters = try decode([String: String].self, response)
        #expect(parameters == ["id": "AA:BB", "char": "2a/19 x", "path": "/v1/devices/AA:BB/characteristics/2a/19 x"])
    }

    @Test func parsesQueryStrings() async throws {
        struct Echo: Codable, Equatable {
            var query: [String: String]
            var items: [[String]]
        }
        let server = try startServer { router in
            router.add("GET", "/echo") { request in
                json(Echo(query: request.query, items: request.queryItems.map { [$0.name, $0.value] }))
            }
        }
        defer { server.stop() }

        let response = try await fetch(
            server.port, "GET", "/echo?name=a%20b&tag=1&tag=2&plus=x+y%2Bz&empty=&flag&caf%C3%A9=%E2%9C%93")
        #expect(response.status == 200)
        let echo = try decode(Echo.self, response)
        #expect(echo.items == [
            ["name", "a b"], ["tag", "1"], ["tag", "2"], ["plus", "x y+z"], ["empty", ""], ["flag", ""], ["café", "✓"],
        ])
        #expect(echo.query == ["name": "a b", "tag": "2", "plus": "x y+z", "empty": "", "flag": "", "café": "✓"])
    }

    @Test func deliversHeadersAndTheClientAddress() async throws {
        let server = try startServer { router in
            router.add("GET", "/who") { request in
                json([
                    "custom": request.headers["x-custom"] ?? "-", "method": request.method,
                    "remote": request.remoteAddress,
                ])
            }
        }
        defer { server.stop() }

        let response = try await fetch(server.port, "GET", "/who", headers: [("X-Custom", "v 1")])
        let seen = try decode([String: String].self, response)
        #expect(seen["custom"] == "v 1")
        #expect(seen["method"] == "GET")
        #expect(seen["remote"]?.hasPrefix("127.0.0.1:") == true)
    }

    @Test(arguments: [2, 40_000])
    func deliversJSONBodiesIntact(size: Int) async throws {
        let server = try startServer { router in
            router.add("POST", "/echo") { request in
                Response(
                    status: 201, headers: [(name: "Content-Type", value: request.headers["content-type"] ?? "-")],
                    body: request.body)
            }
        }
        defer { server.stop() }
        // Big enough for MHD to hand the body over in several pieces.
        let filler = String(repeating: "é✓x", count: max(0, (size - 20) / 6))
        let body = Array("{\"name\":\"\(filler)\"}".utf8)

        let response = try await fetch(
            server.port, "POST", "/echo", headers: [("Content-Type", "application/json")], body: body)
        #expect(response.status == 201)
        #expect(response.headers["content-type"] == "application/json")
        #expect(response.body == body)
    }

    @Test func answersUnknownPathsThroughTheErrorResponder() async throws {
        let server = try startServer { router in
            router.add("GET", "/known") { _ in Response(status: 204) }
        }
        defer { server.stop() }

        let response = try await fetch(server.port, "GET", "/unknown/thing")
        #expect(response.status == 404)
        #expect(response.text == #"{"error":"notFound GET /unknown/thing"}"#)
    }

    @Test func answersWrongMethodsWith405AndAllow() async throws {
        let server = try startServer { router in
            router.add("GET", "/things/{id}") { _ in Response(status: 200) }
            router.add("DELETE", "/things/{id}") { _ in Response(status: 204) }
        }
        defer { server.stop() }

        let response = try await fetch(server.port, "PUT", "/things/1", body: Array("{}".utf8))
        #expect(response.status == 405)
        #expect(response.headers["allow"] == "DELETE, GET, HEAD")
        #expect(response.text == #"{"error":"methodNotAllowed DELETE,GET,HEAD"}"#)
    }

    @Test func answersHeadWithTheGetRouteAndNoBody() async throws {
        let server = try startServer { router in
            router.add("GET", "/thing") { _ in .json(200, Array("{\"a\":1}".utf8)) }
        }
        defer { server.stop() }

        let response = try await onThread {
            let connection = try TestConnection(port: server.port)
            try connection.sendRequest("HEAD", "/thing")
            let head = try connection.readResponse(head: true)
            // The connection stays usable: nothing but the next response follows.
            try connection.sendRequest("GET", "/thing")
            return (head, try connection.readResponse())
        }
        #expect(response.0.status == 200)
        #expect(response.0.headers["content-type"] == "application/json")
        #expect(response.1.text == "{\"a\":1}")
    }

    @Test func answersMalformedPercentEncodingWith400() async throws {
        let server = try startServer { router in
            router.add("GET", "/{any}") { _ in Response(status: 200) }
        }
        defer { server.stop() }

        let path = try await fetch(server.port, "GET", "/a%zz")
        #expect(path.status == 400)
        #expect(path.text.contains("badRequest"))
        let query = try await fetch(server.port, "GET", "/a?x=%FF")
        #expect(query.status == 400)
    }

    @Test func servesSeveralRequestsOnOneConnection() async throws {
        let server = try startServer { router in
            router.add("GET", "/n/{n}") { request in
                // Kept: a handler that answers a little later, so that each response resumes the
                // suspended connection from another thread before the next request is read.
                try? await Task.sleep(for: .milliseconds(10))
                return Response(status: 200, body: Array(request.pathParameters["n", default: ""].utf8))
            }
        }
        defer { server.stop() }

        let bodies = try await onThread {
            let connection = try TestConnection(port: server.port)
            return try (1...3).map { n in
                try connection.sendRequest("GET", "/n/\(n)")
                return try connection.readResponse().text
            }
        }
        #expect(bodies == ["1", "2", "3"])
    }

    @Test func answersOversizeBodiesWith413AndKeepsTheConnection() async throws {
        let server = try startServer(maxBodyBytes: 1024) { router in
            router.add("POST", "/upload") { request in Response(status: 200, body: Array("\(request.body.count)".utf8)) }
        }
        defer { server.stop() }

        let (tooLarge, atLimit) = try await onThread {
            let connection = try TestConnection(port: server.port)
            try connection.sendRequest("POST", "/upload", body: [UInt8](repeating: 7, count: 4096))
            let tooLarge = try connection.readResponse()
            try connection.sendRequest("POST", "/upload", body: [UInt8](repeating: 7, count: 1024))
            return (tooLarge, try connection.readResponse())
        }
        #expect(tooLarge.status == 413)
        #expect(tooLarge.text == #"{"error":"bodyTooLarge 1024"}"#)
        #expect(atLimit.status == 200)
        #expect(atLimit.text == "1024")
    }

    @Test func answersOversizeChunkedBodiesWith413() async throws {
        let server = try startServer(maxBodyBytes: 1024) { router in
            router.add("POST", "/upload") { _ in Response(status: 200) }
        }
        defer { server.stop() }

        let chunk = String(repeating: "a", count: 1000)
        let chunked = "3e8\r\n\(chunk)\r\n3e8\r\n\(chunk)\r\n0\r\n\r\n"
        let response = try await fetch(
            server.port, "POST", "/upload", headers: [("Transfer-Encoding", "chunked")], body: Array(chunked.utf8))
        #expect(response.status == 413)
    }

    /// Declared bodies the server will not read are refused before they are sent: the client
    /// sends headers only and still gets the 413.
    @Test(arguments: [
        [("Content-Length", "5000"), ("Expect", "100-continue")],
        [("Content-Length", "\(64 << 20)")],
    ])
    func refusesDeclaredOversizeBodiesUpFront(headers: [(String, String)]) async throws {
        let server = try startServer(maxBodyBytes: 1024) { router in
            router.add("POST", "/upload") { _ in Response(status: 200) }
        }
        defer { server.stop() }

        let response = try await fetch(server.port, "POST", "/upload", headers: headers)
        #expect(response.status == 413)
        #expect(response.text == #"{"error":"bodyTooLarge 1024"}"#)
    }

    @Test func runsConcurrentRequestsConcurrently() async throws {
        let count = 20
        let inFlight = Mutex(0)
        let server = try startServer { router in
            router.add("GET", "/wait/{n}") { request in
                inFlight.withLock { $0 += 1 }
                // Every handler waits until all are in flight: passes only if none is serialised.
                let deadline = ContinuousClock.now + .seconds(10)
                while inFlight.withLock({ $0 }) < count && ContinuousClock.now < deadline {
                    try? await Task.sleep(for: .milliseconds(5))
                }
                let seen = inFlight.withLock { $0 }
                return Response(status: 200, body: Array("\(request.pathParameters["n"]!) \(seen)".utf8))
            }
        }
        defer { server.stop() }

        let bodies = try await withThrowingTaskGroup(of: String.self) { group in
            for n in 0..<count {
                group.addTask { try await fetch(server.port, "GET", "/wait/\(n)").text }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(Set(bodies) == Set((0..<count).map { "\($0) \(count)" }))
    }

    @Test func stopAnswersPendingRequestsAndIsIdempotent() async throws {
        let slow = HeldWork()
        let server = try startServer { router in
            router.add("GET", "/slow") { _ in
                await slow.run()
                return Response(status: 200)
            }
        }
        let port = server.port

        let pending = Task {
            try await onThread {
                let connection = try TestConnection(port: port)
                try connection.sendRequest("GET", "/slow")
                do { return try connection.readResponse().status } catch let error as ClientError where error == .closed { return 0 }
            }
        }
        #expect(await eventually { slow.entered == 1 })

        let started = ContinuousClock.now
        server.stop()
        #expect(ContinuousClock.now - started < .milliseconds(800))  // did not wait for the handler
        #expect(slow.finished == 0)
        server.stop()

        let status = try await pending.value
        #expect(status == 503 || status == 0)
        #expect(throws: ClientError.self) { try TestConnection(port: port) }

        // The handler still finishes; its late response must go nowhere, harmlessly.
        slow.release()
        #expect(await eventually { slow.finished == 1 })
    }

    /// Malformed and hostile input gets an error status or a closed connection, never a crash;
    /// afterwards the server still serves.
    @Test func survivesMalformedInput() async throws {
        let slow = HeldWork()
        let server = try startServer(maxBodyBytes: 1024) { router in
            router.add("GET", "/ok") { _ in Response(status: 200) }
            router.add("POST", "/slow") { _ in
                await slow.run()
                return Response(status: 200)
            }
        }
        defer { server.stop() }
        let port = server.port
        func raw(_ text: String) -> [UInt8] { Array(text.utf8) }

        let answered: [(request: [UInt8], status: Int)] = [
            (raw("GET * HTTP/1.1\r\nHost: x\r\n\r\n"), 400),
            (raw("GET http://x/ok HTTP/1.1\r\nHost: x\r\n\r\n"), 400),
            (raw("GET /ok?a=%G1 HTTP/1.1\r\nHost: x\r\n\r\n"), 400),
            (raw("GET /%00%0d%0a HTTP/1.1\r\nHost: x\r\n\r\n"), 404),
            (raw("GET /ok HTTP/1.1\r\nHost: x\r\nX: \(String(repeating: "a", count: 100_000))\r\n\r\n"), 431),
            (raw("POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n"), 400),
            (raw("POST /slow HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\nx\r\n"), 400),
            ([0x47, 0x45, 0x54, 0x20, 0x2F, 0xFF, 0xFE] + raw(" HTTP/1.1\r\nHost: \u{1}\u{7f}\r\n\r\n"), 404),
            (raw("get /ok HTTP/1.1\r\nHost: x\r\n\r\n"), 200),
        ]
        for (request, status) in answered {
            let answer = try await sendRaw(port, request)
            #expect(answer == status, "\(String(decoding: request.prefix(60), as: UTF8.self))")
        }

        let dropped: [[UInt8]] = [
            raw("GARBAGE\r\n\r\n"),
            raw("POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nshort"),
            raw("POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nok"),  // gone while handled
            raw("GET /ok HTTP/1.1\r\nHost: x\r\n"),
        ]
        for request in dropped {
            try await sendAndHangUp(port, request)
        }
        // Of these only the complete POST reaches its handler, which runs on after its client left.
        #expect(await eventually { slow.entered == 1 })
        #expect(slow.finished == 0)
        slow.release()

        let pipelined = try await onThread {
            let connection = try TestConnection(port: port)
            try connection.send("GET /ok HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\n\r\n")
            return [try connection.readResponse().status, try connection.readResponse().status]
        }
        #expect(pipelined == [200, 404])
        #expect(await eventually { slow.finished == 1 })  // its response went nowhere
        #expect(try await fetch(port, "GET", "/ok").status == 200)
    }

    @Test func reportsWhyItCannotListen() throws {
        let first = try startServer { _ in }
        defer { first.stop() }

        let error = #expect(throws: ServerStartError.self) {
            try Server(host: "127.0.0.1", port: first.port, errorResponder: testErrorResponder) { _ in Response(status: 200) }
        }
        #expect(error?.port == first.port)
        #expect(error?.reason.isEmpty == false)
        #expect(error?.description.contains("\(first.port)") == true)

        #expect(throws: ServerStartError.self) {
            try Server(host: "not-an-address", port: 0, errorResponder: testErrorResponder) { _ in Response(status: 200) }
        }
    }
}

@Suite struct ConnectionLimitTests {
    /// Past the limit a request is answered (503, Retry-After) rather than left hanging in the
    /// backlog, and once a connection closes new ones are served again.
    @Test func pastTheLimitARequestGets503AndTheLimitFreesUp() async throws {
        let server = try Server(host: "127.0.0.1", port: 0, connectionLimit: 3, connectionReserve: 4,
                                errorResponder: testErrorResponder) { _ in Response(status: 200) }
        defer { server.stop() }
        let port = server.port
        let held = try await onThread { () -> [TestConnection] in
            try (0..<3).map { _ in
                let connection = try TestConnection(port: port)
                try connection.sendRequest("GET", "/")
                guard try connection.readResponse().status == 200 else { throw ClientError("not served") }
                return connection
            }
        }
        #expect(server.openConnections == 3)
        let over = try await fetch(port, "GET", "/")
        #expect(over.status == 503)
        #expect(over.headers["retry-after"] == "5")
        #expect(String(decoding: over.body, as: UTF8.self).contains("tooManyConnections 3"))

        held[0].hangUp()
        // The server sees the hang-up (and the 503's close) on its own time.
        #expect(await eventually(within: .seconds(10)) { server.openConnections == 2 }, "open: \(server.openConnections)")
        let status = try await fetch(port, "GET", "/").status
        #expect(status == 200, "still 503 after one of the \(3) connections closed; open: \(server.openConnections)")
        withExtendedLifetime(held) {}
    }
}
