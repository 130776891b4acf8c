import CNettle

/// AES-128 in CCM mode (RFC 3610 / NIST SP 800-38C), from Debian's Nettle: the authenticated
/// encryption of BTHome (and Xiaomi) advertisements. Nettle takes any even tag length from 4 to 16
/// bytes; GnuTLS's AEAD interface only 8 and 16, and BTHome's tag (its "MIC") has 4.
public enum AESCCM {
    /// AES-128's key length.
    public static let keyLength = 16
    /// The nonce lengths CCM allows (7...13; BTHome uses 13).
    public static let nonceLengths = 7...13
    /// The tag lengths CCM allows (even numbers only).
    public static let tagLengths = 4...16

    /// Encrypts `plaintext` and appends a `tagLength`-byte tag; nil when a length is not one CCM allows.
    public static func seal(
        _ plaintext: [UInt8], key: [UInt8], nonce: [UInt8], associatedData: [UInt8] = [], tagLength: Int
    ) -> [UInt8]? {
        guard valid(key: key, nonce: nonce, tagLength: tagLength) else { return nil }
        var output = [UInt8](repeating: 0, count: plaintext.count + tagLength)
        withContext(key: key) { context in
            nettle_ccm_aes128_encrypt_message(
                context, nonce.count, nonce, associatedData.count, associatedData,
                tagLength, output.count, &output, plaintext)
        }
        return output
    }

    /// The plaintext of `sealed` (ciphertext followed by its tag), or nil when the tag does not
    /// verify: a wrong key, a wrong nonce, or bytes changed on the way. Never unverified bytes.
    public static func open(
        _ sealed: [UInt8], key: [UInt8], nonce: [UInt8], associatedData: [UInt8] = [], tagLength: Int
    ) -> [UInt8]? {
        guard valid(key: key, nonce: nonce, tagLength: tagLength), sealed.count >= tagLength else { return nil }
        var output = [UInt8](repeating: 0, count: sealed.count - tagLength)
        let verified = withContext(key: key) { context in
            nettle_ccm_aes128_decrypt_message(
                context, nonce.count, nonce, associatedData.count, associatedData,
                tagLength, output.count, &output, sealed) == 1
        }
        return verified ? output : nil
    }

    private static func valid(key: [UInt8], nonce: [UInt8], tagLength: Int) -> Bool {
        key.count == keyLength && nonceLengths.contains(nonce.count)
            && tagLengths.contains(tagLength) && tagLength % 2 == 0
    }

    private static func withContext<T>(key: [UInt8], _ body: (UnsafeMutablePointer<ccm_aes128_ctx>) -> T) -> T {
        var context = ccm_aes128_ctx()
        nettle_ccm_aes128_set_key(&context, key)
        return withUnsafeMutablePointer(to: &context, body)
    }
}
