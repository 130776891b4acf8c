import Foundation
import Synchronization
import Testing

@testable import HTTPServer

/// Polls `condition` every 10 ms until it holds or `timeout` passes; returns its last value.
func eventually(within timeout: Duration = .seconds(5), _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while !condition() {
        if ContinuousClock.now >= deadline { return false }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return true
}

let sseHeaders: [(name: String, value: String)] = [
    (name: "Content-Type", value: "text/event-stream"), (name: "Cache-Control", value: "no-cache"),
    (name: "X-Accel-Buffering", value: "no"),
]

/// Streams the server hands out, so that tests can write to them and watch them close.
final class StreamRecorder: Sendable {
    private let state = Mutex<(streams: [StreamBody], closed: Int)>(([], 0))

    /// A route handler answering with a new stream.
    func handler(capacityBytes: Int = 256 * 1024) -> Handler {
        { _ in
            let body = StreamBody(capacityBytes: capacityBytes)
            body.onClose { self.state.withLock { $0.closed += 1 } }
            self.state.withLock { $0.streams.append(body) }
            return .stream(headers: sseHeaders, body: body)
        }
    }

    var streams: [StreamBody] { state.withLock { $0.streams } }
    var closedCount: Int { state.withLock { $0.closed } }

    /// The first stream, once its request has reached the handler.
    func first() async throws -> StreamBody {
        guard await eventually({ !streams.isEmpty }) else { throw ClientError("no stream request arrived") }
        return streams[0]
    }
}

/// Reads SSE chunks until `count` events (`data: ...` blocks) have arrived; returns their data.
/// `onEvent` runs as each arrives.
func readEvents(_ connection: TestConnection, count: Int, onEvent: () -> Void = {}) throws -> [String] {
    var text = ""
    var events: [String] = []
    while events.count < count {
        let chunk = try connection.readChunk()
        guard !chunk.isEmpty else { throw ClientError("stream ended after \(events.count) events") }
        text += String(decoding: chunk, as: UTF8.self)
        while let end = text.range(of: "\n\n") {
            let block = text[..<end.lowerBound]
            text = String(text[end.upperBound...])
            for line in block.split(separator: "\n") where line.hasPrefix("data: ") {
                events.append(String(line.dropFirst(6)))
                onEvent()
            }
        }
    }
    return events
}

func event(_ data: String) -> [UInt8] { Array("data: \(data)\n\n".utf8) }

/// Requests `/events` on a fresh connection and reads the response head; the body follows.
func openStream(_ port: UInt16) throws -> (connection: TestConnection, head: WireResponse) {
    let connection = try TestConnection(port: port)
    try connection.sendRequest("GET", "/events")
    return (connection, try connection.readHead())
}

struct StreamBodyTests {
    @Test func refusesWritesOverCapacityOrAfterClose() {
        let body = StreamBody(capacityBytes: 10)
        #expect(body.write(Array(repeating: 1, count: 8)))
        #expect(!body.write(Array(repeating: 2, count: 3)))  // would be 11: nothing appended
        #expect(body.bufferedBytes == 8)
        #expect(body.write(Array(repeating: 3, count: 2)))
        #expect(body.bufferedBytes == 10)
        #expect(!body.isClosed)
        body.close()
        #expect(body.isClosed)
        #expect(!body.write([4]))
    }
}

struct StreamTests {
    @Test func deliversEventsWrittenAfterTheRequestInOrderThenEnds() async throws {
        let recorder = StreamRecorder()
        let server = try startServer { $0.add("GET", "/events", recorder.handler()) }
        defer { server.stop() }

        let received = Counter()
        let client = Task {
            try await onThread {
                let (connection, head) = try openStream(server.port)
                let events = try readEvents(connection, count: 50) { received.increment() }
                let last = try connection.readChunk()
                return (head, events, last)
            }
        }
        let body = try await recorder.first()
        for n in 0..<50 {
            #expect(body.write(event("\(n)")))
            // Now and then the client has all that was written: with nothing left to send the server
            // suspends the connection (a state not visible from here), and the next write resumes it.
            if n % 10 == 0 { #expect(await eventually { received.value == n + 1 }) }
        }
        body.close()
        let (head, events, last) = try await client.value
        #expect(head.status == 200)
        #expect(head.headers["content-type"] == "text/event-stream")
        #expect(head.headers["cache-control"] == "no-cache")
        #expect(head.headers["transfer-encoding"] == "chunked")
        #expect(head.headers["content-length"] == nil)
        #expect(events == (0..<50).map(String.init))
        #expect(last.isEmpty)  // the terminating chunk
        #expect(await eventually { recorder.closedCount == 1 })
    }

    @Test func anIdleStreamDoesNotBlockOtherRequests() async throws {
        let recorder = StreamRecorder()
        let server = try startServer { router in
            router.add("GET", "/events", recorder.handler())
            router.add("GET", "/ok") { _ in Response(status: 200, body: Array("ok".utf8)) }
        }
        defer { server.stop() }

        let idle = try await onThread { try openStream(server.port).connection }
        _ = try await recorder.first()
        for _ in 0..<5 {
            #expect(try await fetch(server.port, "GET", "/ok").text == "ok")
        }
        // The idle stream still works afterwards.
        #expect(recorder.streams[0].write(event("late")))
        #expect(try await onThread { try readEvents(idle, count: 1) } == ["late"])
    }

    @Test func noticesTheClientLeavingWhileSuspended() async throws {
        let recorder = StreamRecorder()
        let server = try startServer { $0.add("GET", "/events", recorder.handler()) }
        defer { server.stop() }

        let connection = try await onThread { try openStream(server.port).connection }
        let body = try await recorder.first()
        #expect(body.write(event("one")))
        #expect(try await onThread { try readEvents(connection, count: 1) } == ["one"])
        // Kept: that the connection is suspended again (nothing to send) is not visible from here,
        // and it is the case under test; this gives the I/O thread time to get there.
        try await Task.sleep(for: .milliseconds(50))
        #expect(!body.isClosed)

        connection.hangUp()
        // No write needed: the hang-up of the suspended connection is noticed by itself.
        #expect(await eventually { body.isClosed && recorder.closedCount == 1 })
        #expect(!body.write(event("two")))
    }

    @Test func stopEndsOpenStreamsPromptly() async throws {
        let recorder = StreamRecorder()
        let server = try startServer { $0.add("GET", "/events", recorder.handler()) }
        let port = server.port

        let heads = Counter()
        let clients = (0..<3).map { _ in
            Task {
                try await onThread {
                    let connection = try openStream(port).connection
                    heads.increment()
                    try connection.readUntilClosed()
                }
            }
        }
        // Every stream is being sent (its head arrived), with nothing to send but one event on the
        // first, which its connection has taken: all three are (or are about to be) suspended.
        #expect(await eventually { heads.value == 3 })
        #expect(recorder.streams.count == 3)
        recorder.streams[0].write(event("pending"))
        #expect(await eventually { recorder.streams[0].bufferedBytes == 0 })

        let started = ContinuousClock.now
        server.stop()
        #expect(ContinuousClock.now - started < .seconds(1))
        for client in clients { try await client.value }
        #expect(await eventually { recorder.closedCount == 3 })
        #expect(recorder.streams.allSatisfy { $0.isClosed })
    }

    @Test func aFastProducerRespectingCapacityDeliversEverything() async throws {
        let recorder = StreamRecorder()
        let server = try startServer { $0.add("GET", "/events", recorder.handler(capacityBytes: 64 * 1024)) }
        defer { server.stop() }
        let count = 20_000

        let client = Task {
            try await onThread { try readEvents(openStream(server.port).connection, count: count) }
        }
        let body = try await recorder.first()
        let started = ContinuousClock.now
        // When the buffer is full, wait for the body to say it has room again (no polling).
        let (writable, roomAgain) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        body.onWritable { roomAgain.yield() }
        body.onClose { roomAgain.finish() }
        var room = writable.makeAsyncIterator()
        var refused = 0
        for n in 0..<count {
            while !body.write(event("\(n) \(String(repeating: "x", count: 80))")) {
                refused += 1
                guard await room.next() != nil else { throw ClientError("the stream ended early") }
            }
        }
        let events = try await client.value
        let elapsed = ContinuousClock.now - started
        #expect(events.count == count)
        #expect(events.enumerated().allSatisfy { $0.element.hasPrefix("\($0.offset) ") })
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        print("SSE: \(count) events of ~90 bytes in \(elapsed) = \(Int(Double(count) / seconds)) events/s; \(refused) writes refused (buffer full)")
    }
}
