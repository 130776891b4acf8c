/// The Noise Protocol Framework (revision 34) as the ESPHome API uses it:
/// `Noise_NNpsk0_25519_ChaChaPoly_SHA256`, this side the responder.
///
///     NNpsk0:
///       -> psk, e
///       <- e, ee
///
/// Both sides know a 32-byte pre-shared key (ESPHome's `api: encryption: key:`); neither has a
/// static key. A client with another key fails to decrypt nothing but its own first message's
/// empty payload: the responder finds out there (`wrongKey`).
enum Noise {
    static let protocolName = Array("Noise_NNpsk0_25519_ChaChaPoly_SHA256".utf8)
}

/// A key and a counter: each message is sealed under the next nonce.
public struct CipherState: Sendable {
    private let key: [UInt8]
    private(set) var nonce: UInt64 = 0

    init(key: [UInt8]) { self.key = key }

    /// Seals `plaintext`; nil once the nonces are used up (2^64 - 1 messages: never in practice).
    mutating func seal(_ plaintext: [UInt8], associatedData: [UInt8] = []) -> [UInt8]? {
        guard nonce < .max else { return nil }
        defer { nonce += 1 }
        return Crypto.seal(key: key, nonce: nonce, associatedData: associatedData, plaintext)
    }

    /// Opens `sealed`; nil when it does not verify (the nonce is used up all the same: a
    /// transport with a bad message is ended).
    mutating func open(_ sealed: ArraySlice<UInt8>, associatedData: [UInt8] = []) -> [UInt8]? {
        guard nonce < .max else { return nil }
        defer { nonce += 1 }
        return Crypto.open(key: key, nonce: nonce, associatedData: associatedData, sealed)
    }
}

/// The handshake's running hash and chaining key, and the key they give.
struct SymmetricState {
    private(set) var chainingKey: [UInt8]
    private(set) var hash: [UInt8]
    private var cipher: CipherState?

    init(prologue: [UInt8]) {
        // A name longer than the hash is hashed; a shorter one would be zero-padded.
        let name = Noise.protocolName
        hash = name.count <= Crypto.hashLength
            ? name + [UInt8](repeating: 0, count: Crypto.hashLength - name.count)
            : Crypto.sha256(name)
        chainingKey = hash
        mixHash(prologue)
    }

    mutating func mixHash(_ data: [UInt8]) {
        hash = Crypto.sha256(hash, data)
    }

    mutating func mixKey(_ material: [UInt8]) {
        let (chaining, key) = Self.hkdf2(chainingKey, material)
        chainingKey = chaining
        cipher = CipherState(key: key)
    }

    mutating func mixKeyAndHash(_ material: [UInt8]) {
        let outputs = Self.hkdf(chainingKey, material, count: 3)
        chainingKey = outputs[0]
        mixHash(outputs[1])
        cipher = CipherState(key: outputs[2])
    }

    mutating func encryptAndHash(_ plaintext: [UInt8]) -> [UInt8]? {
        let ciphertext: [UInt8]
        if cipher != nil {
            guard let sealed = cipher!.seal(plaintext, associatedData: hash) else { return nil }
            ciphertext = sealed
        } else {
            ciphertext = plaintext
        }
        mixHash(ciphertext)
        return ciphertext
    }

    mutating func decryptAndHash(_ ciphertext: ArraySlice<UInt8>) -> [UInt8]? {
        let plaintext: [UInt8]
        if cipher != nil {
            guard let opened = cipher!.open(ciphertext, associatedData: hash) else { return nil }
            plaintext = opened
        } else {
            plaintext = Array(ciphertext)
        }
        mixHash(Array(ciphertext))
        return plaintext
    }

    /// The two transport ciphers: the initiator's sending one first.
    func split() -> (initiatorToResponder: CipherState, responderToInitiator: CipherState) {
        let (first, second) = Self.hkdf2(chainingKey, [])
        return (CipherState(key: first), CipherState(key: second))
    }

    private static func hkdf2(_ chainingKey: [UInt8], _ material: [UInt8]) -> ([UInt8], [UInt8]) {
        let outputs = hkdf(chainingKey, material, count: 2)
        return (outputs[0], outputs[1])
    }

    /// Noise's HKDF: HMAC-SHA256 with the chaining key as salt, outputs chained with a counter byte.
    private static func hkdf(_ chainingKey: [UInt8], _ material: [UInt8], count: Int) -> [[UInt8]] {
        let temporary = Crypto.hmacSHA256(key: chainingKey, material)
        var outputs: [[UInt8]] = []
        var previous: [UInt8] = []
        for i in 1...count {
            previous = Crypto.hmacSHA256(key: temporary, previous, [UInt8(i)])
            outputs.append(previous)
        }
        return outputs
    }
}

/// Why a handshake failed.
enum NoiseError: Error, Equatable {
    /// The initiator's message did not decrypt: its key is not ours (or the bytes were changed).
    case wrongKey
    /// The message is not as long as `-> psk, e` with an empty payload makes it.
    case badLength(Int)
    /// The initiator's ephemeral key is a point of small order.
    case badPublicKey
}

/// The responder's side of the handshake: one message in, one message out, then the transport.
struct NoiseResponder {
    private var symmetric: SymmetricState
    private let psk: [UInt8]
    private let ephemeralPrivate: [UInt8]

    /// - Parameter ephemeral: the responder's ephemeral private key; fresh random bytes unless a
    ///   test needs a known one.
    init(psk: [UInt8], prologue: [UInt8], ephemeral: [UInt8] = Crypto.randomBytes(Crypto.keyLength)) {
        precondition(psk.count == Crypto.keyLength && ephemeral.count == Crypto.keyLength)
        symmetric = SymmetricState(prologue: prologue)
        self.psk = psk
        ephemeralPrivate = ephemeral
    }

    /// The handshake hash once `respond` has returned (what a channel binding would use).
    var handshakeHash: [UInt8] { symmetric.hash }

    /// Reads `-> psk, e` (and its payload, which must decrypt), writes `<- e, ee` with an empty
    /// payload. Returns that reply and the transport: what this side receives and what it sends.
    mutating func respond(to message: ArraySlice<UInt8>) throws(NoiseError)
        -> (reply: [UInt8], receive: CipherState, send: CipherState) {
        guard message.count >= Crypto.keyLength + Crypto.tagLength else { throw .badLength(message.count) }
        // -> psk, e
        symmetric.mixKeyAndHash(psk)
        let remoteEphemeral = Array(message.prefix(Crypto.keyLength))
        symmetric.mixHash(remoteEphemeral)
        symmetric.mixKey(remoteEphemeral)  // a psk handshake mixes each ephemeral into the key too
        guard symmetric.decryptAndHash(message.dropFirst(Crypto.keyLength)) != nil else { throw .wrongKey }
        // <- e, ee
        let ephemeralPublic = Crypto.x25519Base(ephemeralPrivate)
        symmetric.mixHash(ephemeralPublic)
        symmetric.mixKey(ephemeralPublic)
        guard let shared = Crypto.x25519(ephemeralPrivate, remoteEphemeral) else { throw .badPublicKey }
        symmetric.mixKey(shared)
        let payload = symmetric.encryptAndHash([])!  // the new key's first nonce
        let (receive, send) = symmetric.split()
        return (ephemeralPublic + payload, receive, send)
    }
}
