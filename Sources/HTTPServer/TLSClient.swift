import CMicroHTTPD
import Glibc

/// The client side of TLS (GnuTLS) on a connected blocking socket: the server's check of itself
/// (`Server.selfCheck`), which takes whatever certificate it is shown (its own), and the tests,
/// which verify the chain and the name 127.0.0.1 against one trusted certificate, as a browser
/// would. Reads and writes time out as the socket's SO_RCVTIMEO and SO_SNDTIMEO say.
final class TLSClient {
    private var session: gnutls_session_t?
    private var credentials: gnutls_certificate_credentials_t?

    /// Shakes hands; `certificate` nil trusts any.
    init(fd: Int32, trusting certificate: String?) throws(TLSClientError) {
        func check(_ result: Int32, _ call: String) throws(TLSClientError) {
            if result < 0 { throw TLSClientError("\(call): \(String(cString: gnutls_strerror(result)))") }
        }
        try check(gnutls_certificate_allocate_credentials(&credentials), "allocate credentials")
        if let certificate {
            var pem = Array(certificate.utf8)
            let trusted = pem.withUnsafeMutableBufferPointer { pem in
                var datum = gnutls_datum_t(data: pem.baseAddress, size: UInt32(pem.count))
                return gnutls_certificate_set_x509_trust_mem(credentials, &datum, GNUTLS_X509_FMT_PEM)
            }
            guard trusted > 0 else { throw TLSClientError("the trusted certificate does not parse") }
        }
        try check(gnutls_init(&session, UInt32(GNUTLS_CLIENT)), "gnutls_init")
        try check(gnutls_set_default_priority(session), "priority")
        try check(gnutls_credentials_set(session, GNUTLS_CRD_CERTIFICATE, UnsafeMutableRawPointer(credentials)), "credentials")
        if certificate != nil { gnutls_session_set_verify_cert(session, "127.0.0.1", 0) }
        gnutls_transport_set_int2(session, fd, fd)
        var result: Int32
        repeat { result = gnutls_handshake(session) } while result == GNUTLS_E_INTERRUPTED
        try check(result, "handshake")
    }

    deinit {
        gnutls_deinit(session)
        gnutls_certificate_free_credentials(credentials)
    }

    func send(_ bytes: UnsafeRawBufferPointer) -> Int {
        gnutls_record_send(session, bytes.baseAddress, bytes.count)
    }

    /// Bytes read, 0 when the server closed the connection (with or without a TLS close_notify).
    func receive(into buffer: UnsafeMutableRawBufferPointer) throws(TLSClientError) -> Int {
        while true {
            let n = gnutls_record_recv(session, buffer.baseAddress, buffer.count)
            switch Int32(clamping: n) {
            case GNUTLS_E_INTERRUPTED: continue
            case GNUTLS_E_PREMATURE_TERMINATION: return 0
            case GNUTLS_E_PULL_ERROR where errno == ECONNRESET: return 0
            case GNUTLS_E_AGAIN: throw TLSClientError("recv: timed out")
            case ..<0: throw TLSClientError("recv: \(String(cString: gnutls_strerror(Int32(n))))")
            default: return n
            }
        }
    }
}

struct TLSClientError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
