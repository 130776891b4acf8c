import Foundation
import Testing

@testable import HTTPServer

/// Where a connection goes, from its first bytes: the stream daemon (small pools) takes only heads
/// that open a stream and fit its pool with their answer.
@Suite struct FirstRequestTests {
    static let pool = ServerCore.streamPoolBytes

    static func verdict(_ text: String) -> FirstRequest.Verdict {
        Array(text.utf8).withUnsafeBytes { FirstRequest.verdict($0, poolBytes: pool) }
    }

    /// A GET for an event stream whose head is `length` bytes long (blank line included).
    static func paddedHead(length: Int) -> String {
        let start = "GET /events HTTP/1.1\r\nAccept: text/event-stream\r\nX-Pad: "
        return start + String(repeating: "a", count: length - start.utf8.count - 4) + "\r\n\r\n"
    }

    @Test(arguments: [
        ("GET /v1/events?types=state HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n", FirstRequest.Verdict.stream),
        ("GET /v1/ws HTTP/1.1\r\nHost: x\r\nUpgrade: WebSocket\r\nConnection: Upgrade\r\n\r\n", .stream),
        ("GET /v1/events HTTP/1.1\r\naccept: application/json, text/event-stream\r\n\r\nGET / HTTP/1.1\r\n", .stream),
        ("GET /v1/devices HTTP/1.1\r\nHost: x\r\n\r\n", .ordinary),
        ("GET /v1/events HTTP/1.1\r\nAccept: application/json\r\n\r\n", .ordinary),
        ("POST /v1/events HTTP/1.1\r\nAccept: text/event-stream\r\n\r\n", .ordinary),
        ("GET /v1/events HTTP/1.1\r\nAccept: text/event-stream\r\n", .incomplete),
        ("GE", .incomplete),
        ("PO", .ordinary),
        // Obsolete line folding: not counted, so not taken.
        ("GET /e HTTP/1.1\r\nAccept: text/event-stream\r\nX-A: 1\r\n 2\r\n\r\n", .ordinary),
    ])
    func sortsByTheHead(head: String, expected: FirstRequest.Verdict) {
        #expect(Self.verdict(head) == expected)
    }

    /// The head, 64 bytes per header line, and the room kept for the answer: at most the pool.
    @Test func takesHeadsUpToThePoolAndNoLarger() {
        let fitting = Self.pool - FirstRequest.responseReserve - 2 * FirstRequest.perEntryBytes
        #expect(Self.verdict(Self.paddedHead(length: fitting)) == .stream)
        #expect(Self.verdict(Self.paddedHead(length: fitting + 1)) == .ordinary)
    }

    /// Query arguments and cookies are entries of the pool too, and a cookie's value is copied.
    @Test func countsArgumentsAndCookies() {
        let plain = "GET /e HTTP/1.1\r\nAccept: text/event-stream\r\n\r\n"
        let arguments = "GET /e?" + Array(repeating: "a=1", count: 20).joined(separator: "&") + " HTTP/1.1\r\nAccept: text/event-stream\r\n\r\n"
        let cookies = "GET /e HTTP/1.1\r\nAccept: text/event-stream\r\nCookie: " + Array(repeating: "c=1", count: 20).joined(separator: "; ") + "\r\n\r\n"
        #expect(Self.verdict(plain) == .stream)
        #expect(Self.verdict(arguments) == .ordinary)  // 20 × 64 bytes more than its length
        #expect(Self.verdict(cookies) == .ordinary)
    }

    /// No more bytes can make a head that already filled the pool fit.
    @Test func aPoolfulWithoutTheEndOfTheHeadIsOrdinary() {
        let long = "GET /e HTTP/1.1\r\nAccept: text/event-stream\r\nX-Pad: " + String(repeating: "a", count: Self.pool)
        #expect(Self.verdict(long) == .ordinary)
    }
}

/// The stream daemon as a client sees it: every head that `FirstRequest` sends there is served,
/// its connection serves that one request, and the others are served as before.
@Suite struct StreamDaemonTests {
    func start(_ recorder: StreamRecorder) throws -> Server {
        try startServer { router in
            router.add("GET", "/events", recorder.handler())
            router.add("GET", "/ok") { _ in Response(status: 200, body: Array("ok".utf8)) }
        }
    }

    /// Heads of every size up to the largest the stream daemon takes, and past it: each stream
    /// is answered and its first event arrives; the stream daemon's answers close the connection.
    @Test func servesEveryHeadItTakesAndTheLargerOnesElsewhere() async throws {
        let recorder = StreamRecorder()
        let server = try start(recorder)
        defer { server.stop() }
        let largest = ServerCore.streamPoolBytes - FirstRequest.responseReserve - 2 * FirstRequest.perEntryBytes
        let lengths = Array(stride(from: 80, to: largest, by: 97)) + [largest, largest + 1, 4000]
        for (index, length) in lengths.enumerated() {
            let head = FirstRequestTests.paddedHead(length: length)
            let expected = FirstRequestTests.verdict(head)
            let connection = try TestConnection(port: server.port)
            defer { connection.hangUp() }
            try connection.send(head)
            let response = try await onThread { try connection.readHead() }
            #expect(response.status == 200, "head of \(length) bytes")
            #expect(response.headers["content-type"] == "text/event-stream")
            #expect(response.headers["connection"] == (expected == .stream ? "close" : nil), "head of \(length) bytes")
            guard await eventually({ recorder.streams.count == index + 1 }) else {
                Issue.record("no stream for the head of \(length) bytes")
                return
            }
            recorder.streams[index].write(Array("data: \(length)\n\n".utf8))
            #expect(try await onThread { try readEvents(connection, count: 1) } == ["\(length)"])
        }
    }

    /// Many short header lines (each an entry of the pool): the most the stream daemon takes is served.
    @Test func servesTheMostHeaderLinesItTakes() async throws {
        let recorder = StreamRecorder()
        let server = try start(recorder)
        defer { server.stop() }
        func head(_ lines: Int) -> String {
            "GET /events HTTP/1.1\r\nAccept: text/event-stream\r\n" + (0..<lines).map { "X-\($0): v\r\n" }.joined() + "\r\n"
        }
        let most = (0..<64).last { FirstRequestTests.verdict(head($0)) == .stream } ?? 0
        #expect(most > 10)
        let connection = try TestConnection(port: server.port)
        defer { connection.hangUp() }
        try connection.send(head(most))
        let response = try await onThread { try connection.readHead() }
        #expect(response.status == 200)
        #expect(response.headers["connection"] == "close")
        guard await eventually({ recorder.streams.count == 1 }) else { return }
        recorder.streams[0].write(Array("data: x\n\n".utf8))
        #expect(try await onThread { try readEvents(connection, count: 1) } == ["x"])
    }

    /// A stream daemon's connection serves one request: a refusal, too, closes it.
    @Test func closesTheConnectionAfterAnAnswerThatIsNoStream() async throws {
        let server = try start(StreamRecorder())
        defer { server.stop() }
        let connection = try TestConnection(port: server.port)
        try connection.send("GET /nope HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
        let response = try await onThread { try connection.readResponse() }
        #expect(response.status == 404)
        #expect(response.headers["connection"] == "close")
        try await onThread { try connection.readUntilClosed() }
    }

    /// A head that comes in two pieces is sorted once it is complete.
    @Test func sortsAHeadThatComesInPieces() async throws {
        let recorder = StreamRecorder()
        let server = try start(recorder)
        defer { server.stop() }
        let connection = try TestConnection(port: server.port)
        defer { connection.hangUp() }
        // Two segments, not one, 50 ms apart, on a thread of their own: a task's sleep on the
        // loaded test pool once outlasted the sorting window, and the main daemon answered.
        let gap = try await onThread { () throws -> Duration in
            try connection.send("GET /events HTTP/1.1\r\nAccept: text/")
            let first = ContinuousClock.now
            usleep(50_000)
            try connection.send("event-stream\r\n\r\n")
            return .now - first
        }
        let response = try await onThread { try connection.readHead() }
        #expect(response.status == 200)
        #expect(response.headers["connection"] == "close", "the second piece \(gap) after the first")
    }

    /// A client silent past the sorting window still gets its answer (from the main daemon).
    @Test func servesAClientThatWaitsBeforeItAsks() async throws {
        let server = try start(StreamRecorder())
        defer { server.stop() }
        let connection = try TestConnection(port: server.port)
        #expect(await eventually { server.openConnections == 1 })  // counted while it waits
        try await Task.sleep(for: Acceptor.sortingWindow + .milliseconds(500))
        try connection.sendRequest("GET", "/ok")
        let response = try await onThread { try connection.readResponse() }
        #expect(response.status == 200)
        #expect(response.text == "ok")
        connection.hangUp()
        #expect(await eventually { server.openConnections == 0 })
    }
}
