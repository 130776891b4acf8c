import CNettle

/// The primitives of `Noise_NNpsk0_25519_ChaChaPoly_SHA256`, from Debian's Nettle.
enum Crypto {
    static let keyLength = 32
    static let tagLength = 16
    static let hashLength = 32

    static func sha256(_ parts: [UInt8]...) -> [UInt8] {
        var context = sha256_ctx()
        nettle_sha256_init(&context)
        for part in parts { nettle_sha256_update(&context, part.count, part) }
        var digest = [UInt8](repeating: 0, count: hashLength)
        nettle_sha256_digest(&context, hashLength, &digest)
        return digest
    }

    static func hmacSHA256(key: [UInt8], _ parts: [UInt8]...) -> [UInt8] {
        var context = hmac_sha256_ctx()
        nettle_hmac_sha256_set_key(&context, key.count, key)
        for part in parts { nettle_hmac_sha256_update(&context, part.count, part) }
        var digest = [UInt8](repeating: 0, count: hashLength)
        nettle_hmac_sha256_digest(&context, hashLength, &digest)
        return digest
    }

    /// X25519 (RFC 7748): `scalar` times the base point: the public key of a private one.
    static func x25519Base(_ scalar: [UInt8]) -> [UInt8] {
        precondition(scalar.count == keyLength)
        var point = [UInt8](repeating: 0, count: keyLength)
        nettle_curve25519_mul_g(&point, scalar)
        return point
    }

    /// X25519: the shared secret of a private key and a peer's public key; nil when it is all
    /// zeros (the peer sent a point of small order, which Noise's DH must refuse).
    static func x25519(_ scalar: [UInt8], _ point: [UInt8]) -> [UInt8]? {
        precondition(scalar.count == keyLength && point.count == keyLength)
        var shared = [UInt8](repeating: 0, count: keyLength)
        nettle_curve25519_mul(&shared, scalar, point)
        return shared.allSatisfy({ $0 == 0 }) ? nil : shared
    }

    /// ChaCha20-Poly1305 as Noise uses it: the 96-bit nonce is 4 zero bytes and the 64-bit
    /// counter, little-endian. Returns the ciphertext followed by the 16-byte tag.
    static func seal(key: [UInt8], nonce: UInt64, associatedData: [UInt8], _ plaintext: [UInt8]) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: plaintext.count + tagLength)
        withCipher(key: key, nonce: nonce, associatedData: associatedData) { context in
            output.withUnsafeMutableBufferPointer { out in
                nettle_chacha_poly1305_encrypt(context, plaintext.count, out.baseAddress, plaintext)
                nettle_chacha_poly1305_digest(context, tagLength, out.baseAddress! + plaintext.count)
            }
        }
        return output
    }

    /// The plaintext of `sealed` (ciphertext and tag), nil when the tag does not verify.
    static func open(key: [UInt8], nonce: UInt64, associatedData: [UInt8], _ sealed: ArraySlice<UInt8>) -> [UInt8]? {
        guard sealed.count >= tagLength else { return nil }
        let length = sealed.count - tagLength
        var output = [UInt8](repeating: 0, count: length)
        var tag = [UInt8](repeating: 0, count: tagLength)
        withCipher(key: key, nonce: nonce, associatedData: associatedData) { context in
            sealed.withUnsafeBufferPointer { input in
                nettle_chacha_poly1305_decrypt(context, length, &output, input.baseAddress)
            }
            nettle_chacha_poly1305_digest(context, tagLength, &tag)
        }
        let received = Array(sealed.suffix(tagLength))
        return nettle_memeql_sec(tag, received, tagLength) == 1 ? output : nil
    }

    private static func withCipher(key: [UInt8], nonce: UInt64, associatedData: [UInt8],
                                   _ body: (UnsafeMutablePointer<chacha_poly1305_ctx>) -> Void) {
        precondition(key.count == keyLength)
        var context = chacha_poly1305_ctx()
        nettle_chacha_poly1305_set_key(&context, key)
        var nonceBytes = [UInt8](repeating: 0, count: 12)
        for i in 0..<8 { nonceBytes[4 + i] = UInt8(truncatingIfNeeded: nonce >> (8 * UInt64(i))) }
        nettle_chacha_poly1305_set_nonce(&context, nonceBytes)
        nettle_chacha_poly1305_update(&context, associatedData.count, associatedData)
        withUnsafeMutablePointer(to: &context, body)
    }

    /// Bytes from the kernel's random source (getrandom through the standard library's generator).
    static func randomBytes(_ count: Int) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<count).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
    }

    /// Standard base64 (whitespace allowed, padding as base64 has it); nil for anything else.
    static func base64Decode(_ text: String) -> [UInt8]? {
        let input = text.utf8.map { CChar(bitPattern: $0) }
        var context = base64_decode_ctx()
        nettle_base64_decode_init(&context)
        var output = [UInt8](repeating: 0, count: (input.count + 1) * 6 / 8 + 1)
        var length = output.count
        guard nettle_base64_decode_update(&context, &length, &output, input.count, input) == 1,
              nettle_base64_decode_final(&context) == 1 else { return nil }
        return Array(output[..<length])
    }
}
