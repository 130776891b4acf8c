/// How messages travel on the connection, server side: the client's bytes in, messages and
/// handshake replies out; and the frames of what the server sends. No I/O: the server feeds
/// `append` with what it read and writes what `next` and `Sealer` give it.
///
/// Plaintext frame: 0x00, the payload's length (varint), the message type (varint), the payload.
/// Noise frame: 0x01, the length (16 bits, big-endian), then the bytes: during the handshake
/// hello and handshake messages; after it a sealed type (16 bits), length (16 bits) and payload.

/// A message as a frame carries it.
struct RawMessage: Equatable {
    let type: UInt16
    let payload: ArraySlice<UInt8>
}

/// What the client's bytes so far gave.
enum FramingEvent {
    case message(RawMessage)
    /// Handshake bytes to send now; with `ready`, from now on messages are sealed with it.
    case reply([UInt8], ready: Sealer?)
}

/// The client broke the protocol, or cannot take part in it: the connection ends after
/// `farewell` (how the protocol tells the client, when it has a way) is written.
struct FramingError: Error, Equatable {
    /// For the log: what the client did.
    let reason: String
    let farewell: [UInt8]

    init(_ reason: String, farewell: [UInt8] = []) {
        self.reason = reason
        self.farewell = farewell
    }
}

/// Bytes received and not yet taken as frames.
struct InputBuffer {
    private var bytes: [UInt8] = []
    private var start = 0

    var available: ArraySlice<UInt8> { bytes[start...] }

    mutating func append(_ more: UnsafeRawBufferPointer) {
        bytes.append(contentsOf: more)
    }

    mutating func append(_ more: [UInt8]) {
        bytes += more
    }

    mutating func consume(_ count: Int) {
        start += count
        // Moved down once the taken part is the larger one: copying stays linear in what is read.
        if start == bytes.count {
            bytes.removeAll(keepingCapacity: true)
            start = 0
        } else if start > bytes.count / 2 {
            bytes.removeFirst(start)
            start = 0
        }
    }
}

/// What the server seals each message with once the connection is ready.
enum Sealer {
    case plaintext
    case noise(CipherState)

    /// The frame of one message; nil when it does not fit in a frame.
    mutating func frame(type: UInt16, payload: [UInt8]) -> [UInt8]? {
        switch self {
        case .plaintext:
            var header = ProtoWriter()
            header.varint(0)
            header.varint(UInt64(payload.count))
            header.varint(UInt64(type))
            return header.bytes + payload
        case .noise(var cipher):
            guard payload.count <= Int(UInt16.max) else { return nil }
            let inner = bigEndian16(Int(type)) + bigEndian16(payload.count) + payload
            guard let sealed = cipher.seal(inner), sealed.count <= Int(UInt16.max) else { return nil }
            self = .noise(cipher)
            return noiseFrame(sealed)
        }
    }
}

func bigEndian16(_ value: Int) -> [UInt8] {
    [UInt8(truncatingIfNeeded: value >> 8), UInt8(truncatingIfNeeded: value)]
}

/// A Noise frame (the hello and handshake frames too): 0x01, length, bytes.
func noiseFrame(_ body: [UInt8]) -> [UInt8] {
    [0x01] + bigEndian16(body.count) + body
}

/// A varint at the start of `bytes`: nil when the bytes end inside it; an error past `maxBytes`.
private func leadingVarint(_ bytes: ArraySlice<UInt8>, maxBytes: Int, what: String) throws(FramingError) -> (value: UInt64, count: Int)? {
    var value: UInt64 = 0
    for (i, byte) in bytes.prefix(maxBytes).enumerated() {
        value |= UInt64(byte & 0x7F) << UInt64(7 * i)
        if byte & 0x80 == 0 { return (value, i + 1) }
    }
    guard bytes.count < maxBytes else { throw FramingError("sent a frame whose \(what) is a varint of more than \(maxBytes) bytes") }
    return nil
}

/// The plaintext protocol, server side.
struct PlaintextFraming {
    private var input = InputBuffer()
    /// The largest payload taken; a longer frame ends the connection.
    let maxPayload: Int

    /// What ESPHome answers a frame that does not begin with 0x00: its own 0x00 first, so that
    /// a Noise client reads "this device speaks plaintext".
    static let badIndicator: [UInt8] = [0x00] + Array("Bad indicator byte".utf8)

    init(maxPayload: Int) { self.maxPayload = maxPayload }

    mutating func append(_ bytes: UnsafeRawBufferPointer) { input.append(bytes) }
    mutating func append(_ bytes: [UInt8]) { input.append(bytes) }

    mutating func next() throws(FramingError) -> FramingEvent? {
        let bytes = input.available
        guard let indicator = bytes.first else { return nil }
        guard indicator == 0x00 else {
            throw FramingError(indicator == 0x01
                ? "sent an encrypted frame, and this server has no key (its client has one: remove it, or give gattway --esphome-key)"
                : "sent a frame beginning with 0x\(hex(indicator)), not 0x00", farewell: Self.badIndicator)
        }
        guard let length = try leadingVarint(bytes.dropFirst(), maxBytes: 5, what: "length") else { return nil }
        guard length.value <= UInt64(maxPayload) else {
            throw FramingError("sent a frame of \(length.value) bytes (at most \(maxPayload) are taken)")
        }
        guard let type = try leadingVarint(bytes.dropFirst(1 + length.count), maxBytes: 3, what: "type") else { return nil }
        guard type.value <= UInt64(UInt16.max) else { throw FramingError("sent a message of type \(type.value), beyond 65535") }
        let header = 1 + length.count + type.count
        guard bytes.count >= header + Int(length.value) else { return nil }
        let start = bytes.startIndex + header
        let payload = Array(bytes[start..<start + Int(length.value)])
        input.consume(header + Int(length.value))
        return .message(RawMessage(type: UInt16(type.value), payload: payload[...]))
    }
}

/// The Noise protocol, server side: the client's hello, the server's hello (its name and MAC),
/// the handshake, then sealed frames. As ESPHome's firmware does it, so that its clients'
/// errors name what went wrong: a refusal during the handshake is a frame of 0x01 and a reason
/// ("Handshake MAC failure" is a wrong key to aioesphomeapi).
struct NoiseFraming {
    private enum Phase {
        case hello
        case handshake(NoiseResponder)
        case data(CipherState)
    }

    /// ESPHome's prologue starts so; the client's hello frame (its length and bytes) follows.
    static let prologue = Array("NoiseAPIInit".utf8)
    /// The hello and handshake frames are short (0 and 49 bytes from aioesphomeapi).
    static let maxHandshakeFrame = 128

    private var input = InputBuffer()
    private var phase = Phase.hello
    private let psk: [UInt8]
    private let serverHello: [UInt8]
    private let maxPayload: Int
    private let ephemeral: [UInt8]?

    /// - Parameters:
    ///   - name: the node name in the server hello (a client with an expected name compares it).
    ///   - mac: the MAC in the server hello: 12 lower-case hex digits, as ESPHome writes it.
    ///   - ephemeral: the handshake's ephemeral private key; random unless a test needs one.
    init(psk: [UInt8], name: String, mac: String, maxPayload: Int, ephemeral: [UInt8]? = nil) {
        self.psk = psk
        // 0x01: the protocol chosen (Noise_NNpsk0_25519_ChaChaPoly_SHA256, the only one).
        serverHello = [0x01] + Array(name.utf8) + [0] + Array(mac.utf8) + [0]
        self.maxPayload = maxPayload
        self.ephemeral = ephemeral
    }

    mutating func append(_ bytes: UnsafeRawBufferPointer) { input.append(bytes) }
    mutating func append(_ bytes: [UInt8]) { input.append(bytes) }

    /// A refusal during the handshake: the client gets `text`, the log `reason`.
    private static func refuse(_ text: String, _ reason: String) -> FramingError {
        FramingError(reason, farewell: noiseFrame([0x01] + Array(text.utf8)))
    }

    mutating func next() throws(FramingError) -> FramingEvent? {
        guard let frame = try nextFrame() else { return nil }
        switch phase {
        case .hello:
            // The hello's contents are not used (a future flag field, says ESPHome), but they
            // are part of the prologue that both sides hash.
            let prologue = Self.prologue + bigEndian16(frame.count) + frame
            phase = .handshake(ephemeral.map { NoiseResponder(psk: psk, prologue: prologue, ephemeral: $0) }
                ?? NoiseResponder(psk: psk, prologue: prologue))
            return .reply(noiseFrame(serverHello), ready: nil)
        case .handshake(var responder):
            guard let first = frame.first else {
                throw Self.refuse("Empty handshake message", "sent an empty handshake message")
            }
            guard first == 0x00 else {
                throw Self.refuse("Bad handshake error byte", "sent a handshake message beginning with 0x\(hex(first))")
            }
            do {
                let (reply, receive, send) = try responder.respond(to: frame.dropFirst())
                phase = .data(receive)
                return .reply(noiseFrame([0x00] + reply), ready: .noise(send))
            } catch .wrongKey {
                throw Self.refuse("Handshake MAC failure", "has another encryption key (its handshake does not decrypt with ours)")
            } catch {
                throw Self.refuse("Handshake error", "sent a handshake message that is not one (\(error))")
            }
        case .data(var cipher):
            guard let inner = cipher.open(frame[...]) else { throw FramingError("sent a frame that does not decrypt") }
            phase = .data(cipher)
            guard inner.count >= 4 else { throw FramingError("sent an encrypted frame of \(inner.count) bytes, too short for a message") }
            let type = UInt16(inner[0]) << 8 | UInt16(inner[1])
            let length = Int(inner[2]) << 8 | Int(inner[3])
            guard length <= inner.count - 4 else {
                throw FramingError("sent a message of type \(type) that says \(length) bytes and has \(inner.count - 4)")
            }
            return .message(RawMessage(type: type, payload: inner[4..<4 + length]))
        }
    }

    /// The next whole frame's bytes, nil until they are all here.
    private mutating func nextFrame() throws(FramingError) -> [UInt8]? {
        let bytes = input.available
        guard let indicator = bytes.first else { return nil }
        let handshaking: Bool
        if case .data = phase { handshaking = false } else { handshaking = true }
        guard indicator == 0x01 else {
            let reason = indicator == 0x00
                ? "sent a plaintext frame, and this server wants encryption (give its client the key of --esphome-key)"
                : "sent a frame beginning with 0x\(hex(indicator)), not 0x01"
            throw handshaking ? Self.refuse("Bad indicator byte", reason) : FramingError(reason)
        }
        guard bytes.count >= 3 else { return nil }
        let start = bytes.startIndex
        let length = Int(bytes[start + 1]) << 8 | Int(bytes[start + 2])
        if handshaking && length > Self.maxHandshakeFrame {
            throw Self.refuse("Bad handshake packet len", "sent a handshake frame of \(length) bytes")
        }
        // The sealed message carries 4 bytes of header and a 16-byte tag besides its payload.
        if !handshaking && length > maxPayload + 4 + Crypto.tagLength {
            throw FramingError("sent a frame of \(length) bytes (at most \(maxPayload) of payload are taken)")
        }
        guard bytes.count >= 3 + length else { return nil }
        let frame = Array(bytes[start + 3..<start + 3 + length])
        input.consume(3 + length)
        return frame
    }
}

func hex(_ byte: UInt8) -> String {
    let digits = Array("0123456789abcdef")
    return String([digits[Int(byte >> 4)], digits[Int(byte & 0xF)]])
}
