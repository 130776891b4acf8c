/// One RFC 6455 frame: the wire format, without any connection state.
struct WebSocketFrame: Equatable, Sendable {
    enum Opcode: UInt8, Sendable {
        case continuation = 0x0
        case text = 0x1
        case binary = 0x2
        case close = 0x8
        case ping = 0x9
        case pong = 0xA

        var isControl: Bool { rawValue & 0x8 != 0 }
    }

    var fin: Bool
    var opcode: Opcode
    var payload: [UInt8]

    init(fin: Bool = true, _ opcode: Opcode, _ payload: [UInt8] = []) {
        self.fin = fin
        self.opcode = opcode
        self.payload = payload
    }

    /// A close frame: the code (none for 1005, "no status") and the reason, cut to the 123 bytes
    /// a control frame leaves for it, at a character boundary.
    static func close(code: UInt16, reason: String = "") -> WebSocketFrame {
        guard code != WebSocketCloseCode.noStatus else { return WebSocketFrame(.close) }
        var reasonBytes: [UInt8] = []
        for character in reason {
            let bytes = Array(String(character).utf8)
            if reasonBytes.count + bytes.count > 123 { break }
            reasonBytes += bytes
        }
        return WebSocketFrame(.close, [UInt8(code >> 8), UInt8(code & 0xFF)] + reasonBytes)
    }

    /// The frame on the wire: unmasked as a server sends it, or masked with a 4-byte `maskingKey`
    /// as a client must.
    func serialized(maskingKey: [UInt8]? = nil) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(payload.count + 14)
        Self.appendHeader(fin: fin, opcode: opcode, length: payload.count, masked: maskingKey != nil, to: &bytes)
        guard let maskingKey else { return bytes + payload }
        precondition(maskingKey.count == 4, "a masking key has 4 bytes")
        bytes += maskingKey
        bytes += payload.enumerated().map { $0.element ^ maskingKey[$0.offset & 3] }
        return bytes
    }

    /// The first bytes of a frame: FIN and opcode, the mask bit and the payload length.
    static func appendHeader(fin: Bool = true, opcode: Opcode, length: Int, masked: Bool = false, to bytes: inout [UInt8]) {
        bytes.append((fin ? 0x80 : 0) | opcode.rawValue)
        let maskBit: UInt8 = masked ? 0x80 : 0
        switch length {
        case ..<126:
            bytes.append(maskBit | UInt8(length))
        case ...0xFFFF:
            bytes.append(maskBit | 126)
            bytes.append(UInt8(length >> 8))
            bytes.append(UInt8(length & 0xFF))
        default:
            bytes.append(maskBit | 127)
            for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: UInt64(length) >> UInt64(shift))) }
        }
    }

    enum Parsed: Equatable {
        /// Not a whole frame yet.
        case incomplete
        /// A frame, its payload unmasked, and how many bytes it took.
        case frame(WebSocketFrame, masked: Bool, length: Int)
        /// Not acceptable: fail the connection with this close code.
        case invalid(code: UInt16, reason: String)
    }

    /// Reads the frame at the start of `bytes`. A header is judged as soon as it is complete, before
    /// its payload arrives: reserved bits, unknown opcodes, fragmented or long control frames and a
    /// missing mask (when `requireMasked`) are protocol errors (1002); a data payload over
    /// `maxPayloadBytes` is 1009.
    static func parse(_ bytes: ArraySlice<UInt8>, maxPayloadBytes: Int, requireMasked: Bool) -> Parsed {
        bytes.withUnsafeBytes { parse(bytes: $0, maxPayloadBytes: maxPayloadBytes, requireMasked: requireMasked) }
    }

    private static func parse(bytes: UnsafeRawBufferPointer, maxPayloadBytes: Int, requireMasked: Bool) -> Parsed {
        guard bytes.count >= 2 else { return .incomplete }
        let first = bytes[0]
        let second = bytes[1]
        guard first & 0x70 == 0 else {
            return .invalid(code: WebSocketCloseCode.protocolError, reason: "reserved bits set")
        }
        guard let opcode = Opcode(rawValue: first & 0x0F) else {
            return .invalid(code: WebSocketCloseCode.protocolError, reason: "unknown opcode")
        }
        let fin = first & 0x80 != 0
        let masked = second & 0x80 != 0
        if requireMasked && !masked {
            return .invalid(code: WebSocketCloseCode.protocolError, reason: "client frames must be masked")
        }
        let shortLength = Int(second & 0x7F)
        if opcode.isControl && (!fin || shortLength > 125) {
            return .invalid(code: WebSocketCloseCode.protocolError, reason: "control frames are short and whole")
        }
        var offset = 2
        let length: UInt64
        switch shortLength {
        case 126:
            guard bytes.count >= 4 else { return .incomplete }
            length = UInt64(bytes[2]) << 8 | UInt64(bytes[3])
            offset = 4
        case 127:
            guard bytes.count >= 10 else { return .incomplete }
            length = (2..<10).reduce(UInt64(0)) { $0 << 8 | UInt64(bytes[$1]) }
            guard length >> 63 == 0 else {
                return .invalid(code: WebSocketCloseCode.protocolError, reason: "length has its top bit set")
            }
            offset = 10
        default:
            length = UInt64(shortLength)
        }
        guard length <= UInt64(max(0, maxPayloadBytes)) || opcode.isControl else {
            return .invalid(code: WebSocketCloseCode.messageTooBig, reason: "message too big")
        }
        var maskingKey: (UInt8, UInt8, UInt8, UInt8)?
        if masked {
            guard bytes.count >= offset + 4 else { return .incomplete }
            maskingKey = (bytes[offset], bytes[offset + 1], bytes[offset + 2], bytes[offset + 3])
            offset += 4
        }
        let end = offset + Int(length)
        guard bytes.count >= end else { return .incomplete }
        var payload = Array(bytes[offset..<end])
        if let key = maskingKey {
            let keyBytes = [key.0, key.1, key.2, key.3]
            for index in payload.indices { payload[index] ^= keyBytes[index & 3] }
        }
        return .frame(WebSocketFrame(fin: fin, opcode, payload), masked: masked, length: end)
    }
}

/// Status codes of close frames (RFC 6455 section 7.4) that the server uses or reports.
enum WebSocketCloseCode {
    static let normal: UInt16 = 1000
    static let goingAway: UInt16 = 1001
    static let protocolError: UInt16 = 1002
    /// Reported when the client's close frame had no code; never sent.
    static let noStatus: UInt16 = 1005
    /// Reported when the connection ended without a close frame; never sent.
    static let abnormal: UInt16 = 1006
    static let invalidPayload: UInt16 = 1007
    static let policyViolation: UInt16 = 1008
    static let messageTooBig: UInt16 = 1009

    /// Codes an endpoint may put in a close frame: the defined ones (IANA's 1012–1014
    /// included) and the ranges for libraries and applications.
    static func isSendable(_ code: UInt16) -> Bool {
        switch code {
        case 1000...1003, 1007...1014, 3000...4999: true
        default: false
        }
    }
}
