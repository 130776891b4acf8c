import Testing

@testable import ESPHomeAPI

/// The primitives against published vectors, then the whole handshake and transport against
/// the `noiseprotocol` package that aioesphomeapi uses.
struct CryptoTests {
    @Test func sha256AndHMACAreTheStandardOnes() {
        #expect(Crypto.sha256(Array("abc".utf8)) == hex("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"))
        // RFC 4231, test case 2.
        #expect(Crypto.hmacSHA256(key: Array("Jefe".utf8), Array("what do ya want for nothing?".utf8))
            == hex("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"))
    }

    /// RFC 7748, section 6.1.
    @Test func x25519IsRFC7748s() {
        let alice = hex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
        let bob = hex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb")
        #expect(Crypto.x25519Base(alice) == hex("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"))
        let bobPublic = Crypto.x25519Base(bob)
        #expect(bobPublic == hex("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f"))
        #expect(Crypto.x25519(alice, bobPublic) == hex("4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742"))
        // A point of small order gives all zeros: refused.
        #expect(Crypto.x25519(alice, [UInt8](repeating: 0, count: 32)) == nil)
    }

    /// RFC 8439's AEAD example (2.8.2) with Noise's nonce (4 zero bytes, counter 7
    /// little-endian); the expected bytes from python's cryptography (OpenSSL).
    @Test func chaChaPolySealsAsOpenSSLDoesAndRefusesAChangedByte() {
        let key = Array(UInt8(0x80)...UInt8(0x9F))
        let associatedData = hex("50515253c0c1c2c3c4c5c6c7")
        let plaintext = Array("Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.".utf8)
        let sealed = Crypto.seal(key: key, nonce: 7, associatedData: associatedData, plaintext)
        #expect(sealed == hex("bc811b8aaf3149c465dea2b403ef799a82c1207d17c53a822336444a3d34ef302150dc9debc5d329301d6cbf6f77d94d90656e5fd321fc5c1812e8e4219446e5910f7a2acb7070980767f71388eec54886d25ec0e330853e658d323bd6cbc8285552b92b395c72f96d718d940c44556487a7357e59580de75784583b7678517b0f7f"))
        #expect(Crypto.open(key: key, nonce: 7, associatedData: associatedData, sealed[...]) == plaintext)
        var changed = sealed
        changed[3] ^= 1
        #expect(Crypto.open(key: key, nonce: 7, associatedData: associatedData, changed[...]) == nil)
        #expect(Crypto.open(key: key, nonce: 8, associatedData: associatedData, sealed[...]) == nil)
    }

    @Test func theKeyIs32BytesOfBase64() {
        #expect(EncryptionKey(base64: "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=")?.bytes == Array(0...31))
        #expect(EncryptionKey(base64: "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8") == nil)  // no padding: not base64
        #expect(EncryptionKey(base64: "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwd") == nil)     // 30 bytes
        #expect(EncryptionKey(base64: "not base64 at all!") == nil)
    }
}

/// `make-vectors.py noise` printed these: both sides in python's noiseprotocol, fixed ephemeral
/// keys, aioesphomeapi's prologue after its empty hello.
enum NoiseVector {
    static let psk = hex("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f")
    static let clientEphemeral = hex("1111111111111111111111111111111111111111111111111111111111111111")
    static let serverEphemeral = hex("2222222222222222222222222222222222222222222222222222222222222222")
    static let clientHandshake = hex("7b4e909bbe7ffe44c465a220037d608ee35897d31ef972f07f74892cb0f73f13d1bc1a38b6793685dc7e2ffdf8ea0933")
    static let serverHandshake = hex("0faa684ed28867b97f4a6a2dee5df8ce974e76b7018e3f22a1c4cf2678570f207336b95933b321b1ae86673f689f5c9f")
    static let handshakeHash = hex("9fbfe40f5a75a9ec6e8f7e6982afebb114835c543b8729c12c266990978dc80e")
    static let clientHello = hex("082c88c7475ad43657f2e9f5281bca71709e47738a9b2c2285247703f2c944ca081d8b4113b0be")
    static let clientPing = hex("431e3a2be0271e101ee745e7fe892b0d3c3923a5")
    static let serverHello = hex("d9483bf78f149be2387544b97d02dd21ed3ac25aa8afa9")
    static let serverPing = hex("471927a13be9261b3ac147b6600a85b167b42d8e")
}

struct NoiseTests {
    @Test func theResponderAnswersAsNoiseprotocolDoes() throws {
        var responder = NoiseResponder(psk: NoiseVector.psk, prologue: NoiseFraming.prologue + [0, 0],
                                       ephemeral: NoiseVector.serverEphemeral)
        let result = try responder.respond(to: NoiseVector.clientHandshake[...])
        var (receive, send) = (result.receive, result.send)
        #expect(result.reply == NoiseVector.serverHandshake)
        #expect(responder.handshakeHash == NoiseVector.handshakeHash)
        // The transport: the client's first two messages open, ours seal to python's bytes.
        #expect(receive.open(NoiseVector.clientHello[...]) == [0, 1, 0, 19] + hex("0a0d61696f657370686f6d6561706910011813"))
        #expect(receive.open(NoiseVector.clientPing[...]) == [0, 7, 0, 0])
        #expect(send.seal([0, 2, 0, 3] + hex("080110")) == NoiseVector.serverHello)
        #expect(send.seal([0, 8, 0, 0]) == NoiseVector.serverPing)
    }

    @Test func anotherKeyIsAWrongKey() {
        var responder = NoiseResponder(psk: [UInt8](repeating: 7, count: 32), prologue: NoiseFraming.prologue + [0, 0])
        #expect(throws: NoiseError.wrongKey) { try responder.respond(to: NoiseVector.clientHandshake[...]) }
    }

    @Test func anotherPrologueFailsToo() {
        // A client that hashed another hello (or none) cannot complete the handshake either.
        var responder = NoiseResponder(psk: NoiseVector.psk, prologue: NoiseFraming.prologue + [0, 1, 0])
        #expect(throws: NoiseError.wrongKey) { try responder.respond(to: NoiseVector.clientHandshake[...]) }
    }

    @Test func aShortMessageIsRefused() {
        var responder = NoiseResponder(psk: NoiseVector.psk, prologue: NoiseFraming.prologue + [0, 0])
        #expect(throws: NoiseError.badLength(47)) { try responder.respond(to: NoiseVector.clientHandshake.prefix(47)) }
    }

    @Test func ourInitiatorAndResponderAgree() throws {
        var initiator = NoiseInitiator(psk: NoiseVector.psk)
        var responder = NoiseResponder(psk: NoiseVector.psk, prologue: NoiseFraming.prologue + [0, 0])
        let result = try responder.respond(to: initiator.first()[...])
        var (receive, send) = (result.receive, result.send)
        let transport = initiator.read(result.reply)
        var (clientSend, clientReceive) = try #require(transport)
        #expect(receive.open(clientSend.seal([1, 2, 3])![...]) == [1, 2, 3])
        #expect(clientReceive.open(send.seal([4])![...]) == [4])
    }
}
