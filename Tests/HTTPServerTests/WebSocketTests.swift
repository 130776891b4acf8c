import Foundation
import Synchronization
import Testing

@testable import HTTPServer

/// Close codes the server's sockets reported through `onClose`.
final class CloseRecorder: Sendable {
    private let state = Mutex<(codes: [UInt16], sockets: Int)>(([], 0))
    func record(_ socket: WebSocket) {
        socket.onClose { code in self.state.withLock { $0.codes.append(code) } }
        state.withLock { $0.sockets += 1 }
    }
    var all: [UInt16] { state.withLock { $0.codes } }
    /// Sockets whose close is recorded.
    var recording: Int { state.withLock { $0.sockets } }
}

final class Counter: Sendable {
    private let count = Mutex(0)
    func increment() { count.withLock { $0 += 1 } }
    var value: Int { count.withLock { $0 } }
}

/// A server with `/ws`, echoing every message back; `/ws/{...}` variants for limits.
func startEchoServer(
    _ closes: CloseRecorder, maxMessageBytes: Int = 1 << 20, pingInterval: Duration = .seconds(20),
    tls: TLSCredentials? = nil
) throws -> Server {
    try startServer(tls: tls) { router in
        router.add("GET", "/ws") { request in
            .webSocket(request, maxMessageBytes: maxMessageBytes, pingInterval: pingInterval) { socket in
                closes.record(socket)
                for await message in socket.messages {
                    if message == .text("close please") {
                        socket.close(code: 4001, reason: "as asked")
                    } else {
                        socket.send(message)
                    }
                }
            }
        }
        router.add("GET", "/ok") { _ in Response(status: 200) }
    }
}

/// Connects and completes the opening handshake with RFC 6455's example key.
func openWebSocket(_ port: UInt16, trusting certificate: String? = nil) throws -> TestConnection {
    let connection = try TestConnection(port: port, trusting: certificate)
    try connection.sendRequest("GET", "/ws", headers: [
        ("Upgrade", "websocket"), ("Connection", "Upgrade"), ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ])
    let head = try connection.readHead()
    guard head.status == 101 else { throw ClientError("handshake answered \(head.status)") }
    guard head.headers["sec-websocket-accept"] == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=",
        head.headers["upgrade"]?.lowercased() == "websocket",
        head.headers["connection"]?.lowercased().contains("upgrade") == true
    else { throw ClientError("bad handshake headers \(head.headers)") }
    return connection
}

/// Sends 70 small messages at once to a new socket on `/ws` and returns the code of the close
/// frame that comes back.
func closeCodeAfterFlood(_ port: UInt16) throws -> UInt16? {
    let connection = try openWebSocket(port)
    let burst = (0..<70).flatMap { _ in WebSocketFrame(.text, Array("x".utf8)).serialized(maskingKey: [1, 2, 3, 4]) }
    try connection.send(burst)
    while true {
        let frame = try connection.readFrame()
        if frame.opcode == .close { return closeCode(frame) }
    }
}

/// The code of a close frame.
func closeCode(_ frame: WebSocketFrame) -> UInt16? {
    guard frame.opcode == .close, frame.payload.count >= 2 else { return nil }
    return UInt16(frame.payload[0]) << 8 | UInt16(frame.payload[1])
}

struct WebSocketTests {
    @Test func echoesTextAndBinaryOfEveryLengthEncoding() async throws {
        let closes = CloseRecorder()
        let server = try startEchoServer(closes)
        defer { server.stop() }

        let big = (0..<70_000).map { UInt8(truncatingIfNeeded: $0) }
        let frames = try await onThread {
            let socket = try openWebSocket(server.port)
            try socket.sendFrame(WebSocketFrame(.text, Array("Hello".utf8)))
            try socket.sendFrame(WebSocketFrame(.binary, Array(big[..<300])))
            try socket.sendFrame(WebSocketFrame(.binary, big))
            try socket.sendFrame(WebSocketFrame(.text, Array("héllo ✓".utf8)))
            return try (0..<4).map { _ in try socket.readFrame() }
        }
        #expect(frames == [
            WebSocketFrame(.text, Array("Hello".utf8)), WebSocketFrame(.binary, Array(big[..<300])),
            WebSocketFrame(.binary, big), WebSocketFrame(.text, Array("héllo ✓".utf8)),
        ])
    }

    @Test func readsAFirstFrameSentWithTheHandshake() async throws {
        let server = try startEchoServer(CloseRecorder())
        defer { server.stop() }

        // The frame arrives with the request, so MHD has read it already: it comes as extra_in.
        let frame = try await onThread {
            let connection = try TestConnection(port: server.port)
            let request = "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                + "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
            try connection.send(Array(request.utf8) + WebSocketFrame(.text, Array("early".utf8)).serialized(maskingKey: [1, 2, 3, 4]))
            guard try connection.readHead().status == 101 else { throw ClientError("no upgrade") }
            return try connection.readFrame()
        }
        #expect(frame == WebSocketFrame(.text, Array("early".utf8)))
    }

    @Test func answersPingsWithPongsAndReassemblesFragments() async throws {
        let server = try startEchoServer(CloseRecorder())
        defer { server.stop() }

        let frames = try await onThread {
            let socket = try openWebSocket(server.port)
            try socket.sendFrame(WebSocketFrame(fin: false, .text, Array("Hel".utf8)))
            try socket.sendFrame(WebSocketFrame(.ping, Array("Hello".utf8)))
            try socket.sendFrame(WebSocketFrame(.continuation, Array("lo".utf8)))
            return try [socket.readFrame(), socket.readFrame()]
        }
        #expect(frames == [WebSocketFrame(.pong, Array("Hello".utf8)), WebSocketFrame(.text, Array("Hello".utf8))])
    }

    @Test(arguments: [
        ("unmasked frame", WebSocketFrame(.text, Array("x".utf8)), false, UInt16(1002)),
        ("message over the limit", WebSocketFrame(.binary, [UInt8](repeating: 1, count: 2000)), true, UInt16(1009)),
        ("invalid UTF-8", WebSocketFrame(.text, [0xFF, 0xFE]), true, UInt16(1007)),
    ])
    func failsTheConnectionOnProtocolErrors(_ name: String, frame: WebSocketFrame, masked: Bool, code: UInt16) async throws {
        let closes = CloseRecorder()
        let server = try startEchoServer(closes, maxMessageBytes: 1024)
        defer { server.stop() }

        let close = try await onThread {
            let socket = try openWebSocket(server.port)
            try socket.sendFrame(frame, masked: masked)
            let close = try socket.readFrame()
            try socket.readUntilClosed()  // the server closes without waiting for our close
            return close
        }
        #expect(closeCode(close) == code, "\(name)")
        #expect(await eventually { closes.all == [code] }, "\(name)")
    }

    @Test func echoesTheClientsCloseAndClosesTheConnection() async throws {
        let closes = CloseRecorder()
        let server = try startEchoServer(closes)
        defer { server.stop() }

        let close = try await onThread {
            let socket = try openWebSocket(server.port)
            try socket.sendFrame(.close(code: 4000, reason: "bye"))
            let close = try socket.readFrame()
            try socket.readUntilClosed()
            return close
        }
        #expect(close == .close(code: 4000))
        #expect(await eventually { closes.all == [4000] })
    }

    @Test func closesFromTheServerWithAHandshake() async throws {
        let closes = CloseRecorder()
        let server = try startEchoServer(closes)
        defer { server.stop() }

        let close = try await onThread {
            let socket = try openWebSocket(server.port)
            try socket.sendFrame(WebSocketFrame(.text, Array("close please".utf8)))
            let close = try socket.readFrame()
            try socket.sendFrame(.close(code: 4001))
            try socket.readUntilClosed()
            return close
        }
        #expect(close == .close(code: 4001, reason: "as asked"))
        #expect(await eventually { closes.all == [4001] })
    }

    @Test func reportsAnAbruptDisconnectAs1006() async throws {
        let closes = CloseRecorder()
        let server = try startEchoServer(closes)
        defer { server.stop() }

        try await onThread {
            let socket = try openWebSocket(server.port)
            try socket.sendFrame(WebSocketFrame(.text, Array("hi".utf8)))
            _ = try socket.readFrame()
            socket.hangUp()
        }
        #expect(await eventually { closes.all == [1006] })
        #expect(try await fetch(server.port, "GET", "/ok").status == 200)
    }

    @Test func pingsASilentClientAndDropsItWhenItStaysSilent() async throws {
        let closes = CloseRecorder()
        let server = try startEchoServer(closes, pingInterval: .milliseconds(200))
        defer { server.stop() }

        let (ping, elapsed) = try await onThread {
            let socket = try openWebSocket(server.port)
            let started = ContinuousClock.now
            let ping = try socket.readFrame()
            try socket.readUntilClosed()  // we never answer
            return (ping, ContinuousClock.now - started)
        }
        #expect(ping.opcode == .ping)
        #expect(elapsed >= .milliseconds(350) && elapsed < .seconds(2))
        #expect(await eventually { closes.all == [1006] })
    }

    @Test func keepsAClientThatAnswersPings() async throws {
        let closes = CloseRecorder()
        let server = try startEchoServer(closes, pingInterval: .milliseconds(300))
        defer { server.stop() }

        let (pings, echo, socket) = try await onThread {
            let socket = try openWebSocket(server.port)
            var pings = 0
            while pings < 3 {
                let frame = try socket.readFrame()
                guard frame.opcode == .ping else { continue }
                pings += 1
                try socket.sendFrame(WebSocketFrame(.pong, frame.payload))
            }
            try socket.sendFrame(WebSocketFrame(.text, Array("still here".utf8)))
            // Another ping may come before the echo (a loaded machine): answered, as before.
            while true {
                let frame = try socket.readFrame()
                guard frame.opcode == .ping else { return (pings, frame, socket) }
                try socket.sendFrame(WebSocketFrame(.pong, frame.payload))
            }
        }
        #expect(pings == 3)
        #expect(echo == WebSocketFrame(.text, Array("still here".utf8)))
        #expect(closes.all.isEmpty)
        socket.hangUp()
    }

    @Test func refusesBadUpgradesThroughTheErrorResponder() async throws {
        let server = try startEchoServer(CloseRecorder())
        defer { server.stop() }

        let missingKey = try await fetch(server.port, "GET", "/ws", headers: [
            ("Upgrade", "websocket"), ("Connection", "Upgrade"), ("Sec-WebSocket-Version", "13"),
        ])
        #expect(missingKey.status == 400)
        #expect(missingKey.text.hasPrefix(#"{"error":"badRequest "#))

        let oldVersion = try await fetch(server.port, "GET", "/ws", headers: [
            ("Upgrade", "websocket"), ("Connection", "Upgrade"), ("Sec-WebSocket-Version", "8"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ])
        #expect(oldVersion.status == 426)
        #expect(oldVersion.headers["sec-websocket-version"] == "13")
    }

    @Test func closesWhenTheHandlerReturns() async throws {
        let server = try startServer { router in
            router.add("GET", "/ws") { request in
                .webSocket(request) { socket in socket.send(.text("bye")) }
            }
        }
        defer { server.stop() }

        let frames = try await onThread {
            let socket = try openWebSocket(server.port)
            return try [socket.readFrame(), socket.readFrame()]
        }
        #expect(frames == [WebSocketFrame(.text, Array("bye".utf8)), .close(code: 1000)])
    }

    @Test func stopClosesOpenSocketsWith1001() async throws {
        let closes = CloseRecorder()
        let server = try startEchoServer(closes)
        let port = server.port
        let ready = Counter()

        let clients = (0..<3).map { _ in
            Task {
                try await onThread {
                    let socket = try openWebSocket(port)
                    ready.increment()
                    let close = try socket.readFrame()
                    try socket.readUntilClosed()
                    return closeCode(close)
                }
            }
        }
        #expect(await eventually { ready.value == 3 && closes.recording == 3 })

        let started = ContinuousClock.now
        server.stop()
        #expect(ContinuousClock.now - started < .seconds(1))
        for client in clients { #expect(try await client.value == 1001) }
        #expect(await eventually { closes.all == [1001, 1001, 1001] })
    }

    @Test func refusesSendsOnceClosed() async throws {
        let result = Mutex<(Bool, Bool)?>(nil)
        let server = try startServer { router in
            router.add("GET", "/ws") { request in
                .webSocket(request) { socket in
                    let before = socket.send(.text("one"))
                    socket.close()
                    result.withLock { $0 = (before, socket.send(.text("two"))) }
                }
            }
        }
        defer { server.stop() }

        _ = try await onThread { try openWebSocket(server.port).readFrame() }
        #expect(await eventually { result.withLock { $0 != nil } })
        let (before, after) = result.withLock { $0! }
        #expect(before)
        #expect(!after)
    }

    /// The queue toward the handler is bounded by what waits, not by the largest message allowed:
    /// with 64 KiB messages allowed, 20 small commands sent at once (a client subscribing to 20
    /// characteristics) all wait for a busy handler.
    @Test func smallMessagesWaitForABusyHandlerUpToTheLimit() async throws {
        let (gate, open) = AsyncStream<Void>.makeStream()
        let server = try startServer { router in
            router.add("GET", "/ws") { request in
                .webSocket(request, maxMessageBytes: 64 * 1024) { socket in
                    for await _ in gate { break }
                    for await message in socket.messages { socket.send(message) }
                }
            }
        }
        defer { server.stop() }
        let port = server.port
        let echoed = try await onThread { () -> Int in
            let connection = try openWebSocket(port)
            let burst = (0..<20).flatMap { WebSocketFrame(.text, Array("{\"op\":\"subscribe\",\"id\":\"\($0)\"}".utf8)).serialized(maskingKey: [1, 2, 3, 4]) }
            try connection.send(burst)
            open.yield()
            var count = 0
            while count < 20, try connection.readFrame().opcode == .text { count += 1 }
            return count
        }
        #expect(echoed == 20)
    }

    /// More than 64 messages waiting: the socket is closed with 1008.
    @Test func aHandlerThatNeverReadsIsClosedWith1008() async throws {
        let server = try startServer { router in
            router.add("GET", "/ws") { request in
                .webSocket(request, maxMessageBytes: 64 * 1024) { socket in
                    // Kept: the handler is busy, never reading, for longer than the test lasts.
                    try? await Task.sleep(for: .seconds(30))
                }
            }
        }
        defer { server.stop() }
        let port = server.port
        #expect(try await onThread { try closeCodeAfterFlood(port) } == 1008)
    }
}

/// Sockets opened with `onOpen`: no task while idle; messages handled one at a time, in order.
struct OpenedWebSocketTests {
    /// What a socket's handlers saw, in order.
    final class Log: Sendable {
        private let entries = Mutex<[String]>([])
        func add(_ entry: String) { entries.withLock { $0.append(entry) } }
        var all: [String] { entries.withLock { $0 } }
    }

    /// `/ws`: each message is logged after `delay` (a busy handler) and echoed; the close is logged.
    func startLoggingServer(_ log: Log, delay: Duration = .zero) throws -> Server {
        try startServer { router in
            router.add("GET", "/ws") { request in
                .openWebSocket(request, maxMessageBytes: 64 * 1024, onOpen: { socket in
                    socket.onMessage { message in
                        if delay > .zero { try? await Task.sleep(for: delay) }
                        if case .text(let text) = message { log.add(text) }
                        socket.send(message)
                    }
                    socket.onClose { code in log.add("closed \(code)") }
                })
            }
        }
    }

    @Test func handlesMessagesInOrderAndEchoes() async throws {
        let log = Log()
        let server = try startLoggingServer(log, delay: .milliseconds(1))
        defer { server.stop() }
        let port = server.port
        let echoed = try await onThread { () -> [String] in
            let connection = try openWebSocket(port)
            let burst = (0..<30).flatMap { WebSocketFrame(.text, Array("m\($0)".utf8)).serialized(maskingKey: [1, 2, 3, 4]) }
            try connection.send(burst)
            return try (0..<30).map { _ in String(decoding: try connection.readFrame().payload, as: UTF8.self) }
        }
        let sent = (0..<30).map { "m\($0)" }
        #expect(echoed == sent)
        // The client's socket closed when its thread ended: the close may be logged already.
        #expect(log.all.filter { !$0.hasPrefix("closed") } == sent)
    }

    /// The client's close comes while the handler is still busy with its messages: `onClose`
    /// runs after the last of them.
    @Test func runsOnCloseAfterTheMessagesThatCameBefore() async throws {
        let log = Log()
        let server = try startLoggingServer(log, delay: .milliseconds(20))
        defer { server.stop() }
        let port = server.port
        try await onThread {
            let connection = try openWebSocket(port)
            let frames = (0..<3).flatMap { WebSocketFrame(.text, Array("m\($0)".utf8)).serialized(maskingKey: [1, 2, 3, 4]) }
            try connection.send(frames + WebSocketFrame.close(code: 1000).serialized(maskingKey: [1, 2, 3, 4]))
            try connection.readUntilClosed()
        }
        #expect(await eventually { log.all.count == 4 })
        #expect(log.all == ["m0", "m1", "m2", "closed 1000"])
    }

    /// More than 64 messages waiting for a busy handler: the socket is closed with 1008.
    @Test func aHandlerThatFallsBehindIsClosedWith1008() async throws {
        let server = try startLoggingServer(Log(), delay: .seconds(30))
        defer { server.stop() }
        let port = server.port
        #expect(try await onThread { try closeCodeAfterFlood(port) } == 1008)
    }
}
