import Testing

@testable import ESPHomeAPI

/// What a framing made of a byte stream: the messages, and the bytes it answered with.
struct Transcript: Equatable {
    var messages: [RawMessage] = []
    var replies: [[UInt8]] = []
    var error: FramingError?
}

protocol TestFraming {
    mutating func append(_ bytes: [UInt8])
    mutating func next() throws(FramingError) -> FramingEvent?
}

extension PlaintextFraming: TestFraming {}
extension NoiseFraming: TestFraming {}

/// Feeds `stream` in the pieces `cuts` makes of it, taking every event after each piece.
func run<F: TestFraming>(_ framing: F, _ stream: [UInt8], cuts: [Int]) -> (Transcript, sealer: Sealer?) {
    var framing = framing
    var transcript = Transcript()
    var sealer: Sealer?
    var start = 0
    for end in cuts + [stream.count] where end >= start {
        framing.append(Array(stream[start..<end]))
        start = end
        do {
            while let event = try framing.next() {
                switch event {
                case .message(let message): transcript.messages.append(RawMessage(type: message.type, payload: Array(message.payload)[...]))
                case .reply(let bytes, let ready):
                    transcript.replies.append(bytes)
                    if let ready { sealer = ready }
                }
            }
        } catch {
            transcript.error = error
            break
        }
    }
    return (transcript, sealer)
}

struct PlaintextFramingTests {
    /// Short and long payloads, one-byte and two-byte types and lengths, an empty message.
    static let messages: [RawMessage] = [
        RawMessage(type: 1, payload: hex("0a0d61696f657370686f6d6561706910011813")[...]),
        RawMessage(type: 7, payload: []),
        RawMessage(type: 93, payload: [UInt8](repeating: 0xAB, count: 300)[...]),
        RawMessage(type: 150, payload: [0x08, 0x01]),
    ]

    static var stream: [UInt8] {
        messages.flatMap { message in
            var sealer = Sealer.plaintext
            return sealer.frame(type: message.type, payload: Array(message.payload))!
        }
    }

    @Test func framesSplitAtEveryByteBoundaryGiveTheSameMessages() {
        let stream = Self.stream
        #expect(stream.prefix(3) == [0x00, 0x13, 0x01])
        for cut in 0...stream.count {
            let (transcript, _) = run(PlaintextFraming(maxPayload: 65535), stream, cuts: [cut])
            #expect(transcript == Transcript(messages: Self.messages), "cut at \(cut)")
        }
        let (oneByOne, _) = run(PlaintextFraming(maxPayload: 65535), stream, cuts: Array(0..<stream.count))
        #expect(oneByOne == Transcript(messages: Self.messages))
    }

    @Test func aFrameThatDoesNotBeginWith0x00IsAnsweredAsESPHomeDoes() {
        let (transcript, _) = run(PlaintextFraming(maxPayload: 65535), [0x01, 0x00, 0x00], cuts: [])
        #expect(transcript.error?.farewell == [0x00] + Array("Bad indicator byte".utf8))
        #expect(transcript.error?.reason.contains("encrypted") == true)
        let (garbage, _) = run(PlaintextFraming(maxPayload: 65535), Array("GET / HTTP/1.1\r\n".utf8), cuts: [])
        #expect(garbage.error?.reason == "sent a frame beginning with 0x47, not 0x00")
    }

    @Test func aFrameOverTheLimitEndsTheConnectionBeforeItsBytesCome() {
        // Length 300 (ac 02) against a limit of 256: refused on the header alone.
        let (transcript, _) = run(PlaintextFraming(maxPayload: 256), [0x00, 0xAC, 0x02], cuts: [])
        #expect(transcript.error?.reason == "sent a frame of 300 bytes (at most 256 are taken)")
        let (endless, _) = run(PlaintextFraming(maxPayload: 65535), [0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF], cuts: [])
        #expect(endless.error?.reason == "sent a frame whose length is a varint of more than 5 bytes")
    }
}

struct NoiseFramingTests {
    static let name = "kitchen-gw"
    static let mac = "aabbccddeeff"

    static func framing(psk: [UInt8] = NoiseVector.psk) -> NoiseFraming {
        NoiseFraming(psk: psk, name: name, mac: mac, maxPayload: 65535, ephemeral: NoiseVector.serverEphemeral)
    }

    /// What aioesphomeapi sends: its empty hello frame, its handshake frame, then two messages.
    static let clientStream: [UInt8] = [0x01, 0x00, 0x00] + noiseFrame([0x00] + NoiseVector.clientHandshake)
        + noiseFrame(NoiseVector.clientHello) + noiseFrame(NoiseVector.clientPing)

    static let expected = Transcript(
        messages: [RawMessage(type: 1, payload: hex("0a0d61696f657370686f6d6561706910011813")[...]), RawMessage(type: 7, payload: [])],
        replies: [noiseFrame([0x01] + Array("kitchen-gw".utf8) + [0] + Array("aabbccddeeff".utf8) + [0]),
                  noiseFrame([0x00] + NoiseVector.serverHandshake)])

    @Test func framesSplitAtEveryByteBoundaryGiveTheSameHandshakeAndMessages() {
        let stream = Self.clientStream
        for cut in 0...stream.count {
            let (transcript, sealer) = run(Self.framing(), stream, cuts: [cut])
            #expect(transcript == Self.expected, "cut at \(cut)")
            #expect(sealer != nil)
        }
        let (oneByOne, _) = run(Self.framing(), stream, cuts: Array(0..<stream.count))
        #expect(oneByOne == Self.expected)
    }

    @Test func theServersFramesAreSealedAsNoiseprotocolSealsThem() throws {
        let (_, ready) = run(Self.framing(), Self.clientStream, cuts: [])
        var sealer = try #require(ready)
        #expect(sealer.frame(type: 2, payload: hex("080110")) == noiseFrame(NoiseVector.serverHello))
        #expect(sealer.frame(type: 8, payload: []) == noiseFrame(NoiseVector.serverPing))
        #expect(sealer.frame(type: 93, payload: [UInt8](repeating: 0, count: 65_520)) == nil)  // over a frame
    }

    @Test func aWrongKeyIsRefusedWithHandshakeMACFailure() {
        let (transcript, sealer) = run(Self.framing(psk: [UInt8](repeating: 9, count: 32)), Self.clientStream, cuts: [])
        #expect(transcript.replies.count == 1)  // the server hello went out, then the refusal
        #expect(transcript.error?.farewell == noiseFrame([0x01] + Array("Handshake MAC failure".utf8)))
        #expect(transcript.error?.reason.contains("another encryption key") == true)
        #expect(transcript.messages.isEmpty && sealer == nil)
    }

    @Test func aPlaintextClientIsToldWhatESPHomeTellsIt() {
        let (transcript, _) = run(Self.framing(), plaintextFrame(HelloRequest(clientInfo: "x", apiVersionMajor: 1, apiVersionMinor: 10)), cuts: [])
        #expect(transcript.error?.farewell == noiseFrame([0x01] + Array("Bad indicator byte".utf8)))
        #expect(transcript.error?.reason.contains("plaintext") == true)
    }

    @Test func aHandshakeFrameThatIsNotOneIsRefused() {
        let tooLong = [0x01, 0x00, 0x00, 0x01, 0x01, 0x00] + [UInt8](repeating: 0, count: 256)
        #expect(run(Self.framing(), tooLong, cuts: []).0.error?.farewell == noiseFrame([0x01] + Array("Bad handshake packet len".utf8)))
        let badByte = [0x01, 0x00, 0x00] + noiseFrame([0x05] + NoiseVector.clientHandshake)
        #expect(run(Self.framing(), badByte, cuts: []).0.error?.farewell == noiseFrame([0x01] + Array("Bad handshake error byte".utf8)))
        let short = [0x01, 0x00, 0x00] + noiseFrame([0x00, 1, 2, 3])
        #expect(run(Self.framing(), short, cuts: []).0.error?.farewell == noiseFrame([0x01] + Array("Handshake error".utf8)))
    }

    @Test func aFrameThatDoesNotDecryptEndsTheConnection() {
        var stream = Self.clientStream
        stream[stream.count - 1] ^= 0x80  // the ping's tag
        let (transcript, _) = run(Self.framing(), stream, cuts: [])
        #expect(transcript.messages.count == 1)
        #expect(transcript.error == FramingError("sent a frame that does not decrypt"))
    }
}
