import Testing

@testable import HTTPServer

private func hex(_ text: String) -> [UInt8] {
    text.split(separator: " ").map { UInt8($0, radix: 16)! }
}

/// Parses one complete frame as a server would (client frames masked).
private func parseOne(_ bytes: [UInt8], max: Int = 1 << 20) -> WebSocketFrame.Parsed {
    WebSocketFrame.parse(bytes[...], maxPayloadBytes: max, requireMasked: true)
}

/// Everything `WebSocketInbound` makes of `bytes`: its events, then the failure if there is one.
private func inbound(_ bytes: [UInt8], maxMessageBytes: Int = 1 << 20) -> (events: [WebSocketInbound.Event], failure: WebSocketInbound.Failure?) {
    var reader = WebSocketInbound(maxMessageBytes: maxMessageBytes)
    reader.append(bytes)
    var events: [WebSocketInbound.Event] = []
    do {
        while let event = try reader.next() { events.append(event) }
        return (events, nil)
    } catch {
        return (events, error)
    }
}

private let key: [UInt8] = [0x37, 0xfa, 0x21, 0x3d]

private func masked(_ frame: WebSocketFrame) -> [UInt8] {
    frame.serialized(maskingKey: key)
}

struct WebSocketFrameTests {
    // RFC 6455 section 5.7.
    @Test func serializesTheRFCExamples() {
        #expect(WebSocketFrame(.text, Array("Hello".utf8)).serialized() == hex("81 05 48 65 6c 6c 6f"))
        #expect(masked(WebSocketFrame(.text, Array("Hello".utf8))) == hex("81 85 37 fa 21 3d 7f 9f 4d 51 58"))
        #expect(WebSocketFrame(fin: false, .text, Array("Hel".utf8)).serialized() == hex("01 03 48 65 6c"))
        #expect(WebSocketFrame(.continuation, Array("lo".utf8)).serialized() == hex("80 02 6c 6f"))
        #expect(WebSocketFrame(.ping, Array("Hello".utf8)).serialized() == hex("89 05 48 65 6c 6c 6f"))
        #expect(masked(WebSocketFrame(.pong, Array("Hello".utf8))) == hex("8a 85 37 fa 21 3d 7f 9f 4d 51 58"))
        #expect(Array(WebSocketFrame(.binary, [UInt8](repeating: 0, count: 256)).serialized().prefix(4)) == hex("82 7E 01 00"))
        #expect(Array(WebSocketFrame(.binary, [UInt8](repeating: 0, count: 65536)).serialized().prefix(10))
            == hex("82 7F 00 00 00 00 00 01 00 00"))
    }

    @Test func parsesTheRFCExamples() {
        #expect(parseOne(hex("81 85 37 fa 21 3d 7f 9f 4d 51 58"))
            == .frame(WebSocketFrame(.text, Array("Hello".utf8)), masked: true, length: 11))
        #expect(WebSocketFrame.parse(hex("81 05 48 65 6c 6c 6f")[...], maxPayloadBytes: 100, requireMasked: false)
            == .frame(WebSocketFrame(.text, Array("Hello".utf8)), masked: false, length: 7))
        #expect(WebSocketFrame.parse(hex("01 03 48 65 6c")[...], maxPayloadBytes: 100, requireMasked: false)
            == .frame(WebSocketFrame(fin: false, .text, Array("Hel".utf8)), masked: false, length: 5))
    }

    @Test(arguments: [0, 125, 126, 256, 65535, 65536, 70000])
    func roundTripsEveryLengthEncoding(size: Int) {
        let payload = (0..<size).map { UInt8(truncatingIfNeeded: $0 * 7) }
        let bytes = masked(WebSocketFrame(.binary, payload))
        let header = size < 126 ? 2 : size <= 0xFFFF ? 4 : 10
        #expect(bytes.count == header + 4 + size)
        #expect(parseOne(bytes) == .frame(WebSocketFrame(.binary, payload), masked: true, length: bytes.count))
        // Every proper prefix is incomplete, never an error.
        for cut in [1, header - 1, header + 3, bytes.count - 1] where cut > 0 && cut < bytes.count {
            #expect(parseOne(Array(bytes.prefix(cut))) == .incomplete)
        }
    }

    @Test func parsesOnlyTheFirstFrameOfABuffer() {
        let bytes = masked(WebSocketFrame(.text, Array("a".utf8))) + masked(WebSocketFrame(.text, Array("b".utf8)))
        #expect(parseOne(bytes) == .frame(WebSocketFrame(.text, Array("a".utf8)), masked: true, length: 7))
    }

    @Test(arguments: [
        // (header bytes, expected close code)
        ("81 05 48 65 6c 6c 6f", 1002),  // unmasked client frame
        ("c1 80 00 00 00 00", 1002),  // RSV1
        ("a1 80 00 00 00 00", 1002),  // RSV2
        ("91 80 00 00 00 00", 1002),  // RSV3
        ("83 80 00 00 00 00", 1002),  // reserved data opcode
        ("8b 80 00 00 00 00", 1002),  // reserved control opcode
        ("09 80 00 00 00 00", 1002),  // fragmented ping
        ("89 fe 00 7e", 1002),  // ping of 126 bytes
        ("88 ff 00 00 00 00 00 00 00 7e", 1002),  // close with a 64-bit length
        ("82 ff 80 00 00 00 00 00 00 00", 1002),  // 64-bit length with the top bit
        ("82 fe 04 01", 1009),  // 1025 bytes over a limit of 1024, judged before the payload
    ])
    func rejectsBadHeaders(header: String, code: Int) {
        guard case .invalid(let got, _) = parseOne(hex(header), max: 1024) else {
            Issue.record("accepted \(header)")
            return
        }
        #expect(Int(got) == code)
    }

    @Test func cutsCloseReasonsAtCharacterBoundaries() {
        let frame = WebSocketFrame.close(code: 1001, reason: String(repeating: "é", count: 100))
        #expect(Array(frame.payload.prefix(2)) == [0x03, 0xE9])
        #expect(frame.payload.count == 2 + 122)  // 61 two-byte characters fit in 123 bytes
        #expect(String(validating: frame.payload[2...], as: UTF8.self) != nil)
        #expect(WebSocketFrame.close(code: 1005).payload.isEmpty)
    }

    @Test func acceptKeyOfTheRFCExample() {
        #expect(WebSocketHandshake.acceptKey(for: "dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
    }
}

struct WebSocketInboundTests {
    @Test func reassemblesFragmentsAroundControlFrames() {
        let bytes = masked(WebSocketFrame(fin: false, .text, Array("Hel".utf8)))
            + masked(WebSocketFrame(.ping, Array("p".utf8)))
            + masked(WebSocketFrame(fin: false, .continuation, []))
            + masked(WebSocketFrame(.continuation, Array("lo".utf8)))
            + masked(WebSocketFrame(.binary, [1, 2]))
        let result = inbound(bytes)
        #expect(result.events == [.ping(Array("p".utf8)), .message(.text("Hello")), .message(.binary([1, 2]))])
        #expect(result.failure == nil)
    }

    @Test func deliversFramesSplitAcrossReads() {
        let bytes = masked(WebSocketFrame(.text, Array("split me".utf8)))
        var reader = WebSocketInbound(maxMessageBytes: 100)
        var events: [WebSocketInbound.Event] = []
        for byte in bytes {
            reader.append([byte])
            if let event = try? reader.next() { events.append(event) }
        }
        #expect(events == [.message(.text("split me"))])
        #expect(reader.pendingBytes == 0)
    }

    @Test func textSplitInsideACharacterIsValidOnceWhole() {
        let euro = Array("€".utf8)  // 3 bytes
        let bytes = masked(WebSocketFrame(fin: false, .text, Array(euro[..<1])))
            + masked(WebSocketFrame(.continuation, Array(euro[1...])))
        #expect(inbound(bytes).events == [.message(.text("€"))])
    }

    @Test(arguments: [
        ("invalid UTF-8", [WebSocketFrame(.text, [0xC3, 0x28])], 1007),
        ("continuation first", [WebSocketFrame(.continuation, [1])], 1002),
        ("new message inside a fragmented one", [WebSocketFrame(fin: false, .text, [0x61]), WebSocketFrame(.text, [0x62])], 1002),
        ("close with 1 byte", [WebSocketFrame(.close, [0x03])], 1002),
        ("close code 1005", [WebSocketFrame(.close, [0x03, 0xED])], 1002),
        ("close code 999", [WebSocketFrame(.close, [0x03, 0xE7])], 1002),
        ("close reason not UTF-8", [WebSocketFrame(.close, [0x03, 0xE8, 0xFF])], 1007),
        ("fragments over the limit", [WebSocketFrame(fin: false, .binary, [UInt8](repeating: 0, count: 600)),
                                      WebSocketFrame(.continuation, [UInt8](repeating: 0, count: 600))], 1009),
    ])
    func failsTheConnection(_ name: String, frames: [WebSocketFrame], code: Int) {
        let result = inbound(frames.flatMap(masked), maxMessageBytes: 1000)
        #expect(result.failure.map { Int($0.code) } == code, "\(name)")
    }

    @Test func readsCloseFrames() {
        #expect(inbound(masked(WebSocketFrame.close(code: 4000, reason: "bye"))).events == [.close(code: 4000, reason: "bye")])
        #expect(inbound(masked(WebSocketFrame(.close))).events == [.close(code: 1005, reason: "")])
    }

    @Test func acceptsAMessageOfExactlyTheLimit() {
        let payload = [UInt8](repeating: 9, count: 1000)
        #expect(inbound(masked(WebSocketFrame(.binary, payload)), maxMessageBytes: 1000).events == [.message(.binary(payload))])
    }
}

struct WebSocketHandshakeTests {
    static let valid: [String: String] = [
        "Upgrade": "websocket", "Connection": "keep-alive, Upgrade", "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    ]

    private func request(method: String = "GET", version: String = "HTTP/1.1", changing changes: [String: String?] = [:]) -> Request {
        var headers = Self.valid
        for (name, value) in changes { headers[name] = value }
        return Request(method: method, path: "/ws", headers: headers, httpVersion: version)
    }

    @Test func acceptsAValidRequest() {
        #expect(WebSocketHandshake.acceptKey(for: request()) == .success("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="))
        #expect(WebSocketHandshake.acceptKey(for: request(changing: ["Upgrade": "WebSocket", "Connection": "upgrade"]))
            == .success("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="))
    }

    @Test(arguments: [
        ("POST", "HTTP/1.1", [:]),
        ("GET", "HTTP/1.0", [:]),
        ("GET", "HTTP/1.1", ["Upgrade": nil]),
        ("GET", "HTTP/1.1", ["Upgrade": "h2c"]),
        ("GET", "HTTP/1.1", ["Connection": "keep-alive"]),
        ("GET", "HTTP/1.1", ["Sec-WebSocket-Version": nil]),
        ("GET", "HTTP/1.1", ["Sec-WebSocket-Key": nil]),
        ("GET", "HTTP/1.1", ["Sec-WebSocket-Key": "c2hvcnQ="]),
        ("GET", "HTTP/1.1", ["Sec-WebSocket-Key": "not base64!"]),
    ] as [(String, String, [String: String?])])
    func refusesInvalidRequestsWith400(method: String, version: String, changes: [String: String?]) async {
        let router = Router(errorResponder: testErrorResponder)
        router.add(method, "/ws") { request in .webSocket(request) { _ in } }
        let response = await router.handle(request(method: method, version: version, changing: changes))
        #expect(response.status == 400)
        #expect(String(decoding: response.body, as: UTF8.self).hasPrefix(#"{"error":"badRequest "#))
    }

    @Test func answersOtherVersionsWith426() async {
        let router = Router(errorResponder: testErrorResponder)
        router.add("GET", "/ws") { request in .webSocket(request) { _ in } }
        let response = await router.handle(request(changing: ["Sec-WebSocket-Version": "8"]))
        #expect(response.status == 426)
        #expect(response.header("Sec-WebSocket-Version") == "13")
        #expect(response.header("Content-Type") == "application/json")
    }
}
