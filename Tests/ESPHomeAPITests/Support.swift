@testable import ESPHomeAPI

func hex(_ text: String) -> [UInt8] {
    let digits = Array(text.utf8)
    precondition(digits.count % 2 == 0, "odd hex")
    func value(_ c: UInt8) -> UInt8 {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
        default: preconditionFailure("not hex")
        }
    }
    return stride(from: 0, to: digits.count, by: 2).map { value(digits[$0]) << 4 | value(digits[$0 + 1]) }
}

/// The initiator's side of NNpsk0, as a client does it (for tests: gattway is only a responder).
struct NoiseInitiator {
    private var symmetric: SymmetricState
    private let ephemeral: [UInt8]

    init(psk: [UInt8], prologue: [UInt8] = NoiseFraming.prologue + [0, 0], ephemeral: [UInt8] = Crypto.randomBytes(32)) {
        symmetric = SymmetricState(prologue: prologue)
        self.ephemeral = ephemeral
        symmetric.mixKeyAndHash(psk)
    }

    /// `-> psk, e` with an empty payload.
    mutating func first() -> [UInt8] {
        let ephemeralPublic = Crypto.x25519Base(ephemeral)
        symmetric.mixHash(ephemeralPublic)
        symmetric.mixKey(ephemeralPublic)
        return ephemeralPublic + symmetric.encryptAndHash([])!
    }

    /// Reads `<- e, ee`; the transport (send, receive), nil when it does not decrypt.
    mutating func read(_ reply: [UInt8]) -> (send: CipherState, receive: CipherState)? {
        let remote = Array(reply.prefix(32))
        symmetric.mixHash(remote)
        symmetric.mixKey(remote)
        symmetric.mixKey(Crypto.x25519(ephemeral, remote)!)
        guard symmetric.decryptAndHash(reply.dropFirst(32)) != nil else { return nil }
        let (send, receive) = symmetric.split()
        return (send, receive)
    }
}

func plaintextFrame(_ message: some APIMessage) -> [UInt8] {
    var sealer = Sealer.plaintext
    return sealer.frame(type: type(of: message).id, payload: message.serialized())!
}
