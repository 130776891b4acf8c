import CMicroHTTPD
import Glibc

/// A certificate (chain) and its private key, both PEM, for serving HTTPS.
///
/// Checked when made, with the GnuTLS that libmicrohttpd uses: both parse and the key belongs to
/// the certificate. So a bad file is reported as such before the server starts, not as a bind
/// failure (libmicrohttpd only logs "failed to setup x509 certificate/key").
public struct TLSCredentials: Sendable {
    public let certificatePEM: String
    public let keyPEM: String

    public init(certificatePEM: String, keyPEM: String) throws(TLSCredentialsError) {
        // libmicrohttpd takes C strings: it would see a PEM only up to a NUL.
        guard !certificatePEM.utf8.contains(0), !keyPEM.utf8.contains(0) else {
            throw TLSCredentialsError("the certificate or key is not PEM text (it has a NUL byte)")
        }
        var credentials: gnutls_certificate_credentials_t?
        guard gnutls_certificate_allocate_credentials(&credentials) == GNUTLS_E_SUCCESS else {
            throw TLSCredentialsError("GnuTLS cannot allocate credentials")
        }
        defer { gnutls_certificate_free_credentials(credentials) }
        var certificateBytes = Array(certificatePEM.utf8)
        var keyBytes = Array(keyPEM.utf8)
        let result = certificateBytes.withUnsafeMutableBufferPointer { certificateBuffer in
            keyBytes.withUnsafeMutableBufferPointer { keyBuffer in
                var certificateDatum = gnutls_datum_t(data: certificateBuffer.baseAddress, size: UInt32(certificateBuffer.count))
                var keyDatum = gnutls_datum_t(data: keyBuffer.baseAddress, size: UInt32(keyBuffer.count))
                return gnutls_certificate_set_x509_key_mem(credentials, &certificateDatum, &keyDatum, GNUTLS_X509_FMT_PEM)
            }
        }
        guard result >= 0 else {
            throw TLSCredentialsError("the certificate and key are not usable: \(String(cString: gnutls_strerror(result)))")
        }
        self.certificatePEM = certificatePEM
        self.keyPEM = keyPEM
    }

    /// Reads and checks both files (PEM; the certificate file may hold a chain, leaf first).
    public init(certificateFile: String, keyFile: String) throws(TLSCredentialsError) {
        try self.init(certificatePEM: try Self.read(certificateFile), keyPEM: try Self.read(keyFile))
    }

    /// Certificates and keys are a few KB; anything past this is not one.
    static let maxFileBytes = 1 << 20

    private static func read(_ path: String) throws(TLSCredentialsError) -> String {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw TLSCredentialsError("cannot read \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count == 0 { break }
            if count < 0 {
                if errno == EINTR { continue }
                throw TLSCredentialsError("cannot read \(path): \(String(cString: strerror(errno)))")
            }
            bytes += chunk[..<count]
            guard bytes.count <= maxFileBytes else { throw TLSCredentialsError("\(path) is too large for PEM") }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// Why `TLSCredentials` could not be made: a file that cannot be read, or is not a matching PEM
/// certificate and key.
public struct TLSCredentialsError: Error, Sendable, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
