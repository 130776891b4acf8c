import Foundation
import Testing

@testable import HTTPServer

/// A self-signed certificate for 127.0.0.1 and its key, made by `openssl` once per test run: no
/// key checked in, nothing that expires in the repository.
struct TestCertificate {
    let certificatePEM: String
    let keyPEM: String

    static let shared = Result { try TestCertificate(name: "127.0.0.1") }

    init(name: String) throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gattway-tls-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let (certificate, key) = (directory.appendingPathComponent("cert.pem"), directory.appendingPathComponent("key.pem"))
        let openssl = Process()
        openssl.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        openssl.arguments = [
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
            "-subj", "/CN=\(name)", "-addext", "subjectAltName=IP:\(name)",
            "-keyout", key.path, "-out", certificate.path,
        ]
        openssl.standardError = FileHandle.nullDevice
        try openssl.run()
        openssl.waitUntilExit()
        guard openssl.terminationStatus == 0 else { throw ClientError("openssl req exited \(openssl.terminationStatus)") }
        certificatePEM = try String(contentsOf: certificate, encoding: .utf8)
        keyPEM = try String(contentsOf: key, encoding: .utf8)
    }

    var credentials: TLSCredentials {
        get throws { try TLSCredentials(certificatePEM: certificatePEM, keyPEM: keyPEM) }
    }
}

struct TLSTests {
    @Test func servesHTTPSOnlyAndKeepsServingAfterAPlainRequest() async throws {
        let certificate = try TestCertificate.shared.get()
        let server = try startServer(tls: try certificate.credentials) { router in
            router.add("POST", "/echo") { request in .json(200, request.body) }
        }
        defer { server.stop() }

        func roundTrip() async throws -> WireResponse {
            try await onThread {
                let connection = try TestConnection(port: server.port, trusting: certificate.certificatePEM)
                try connection.sendRequest("POST", "/echo", body: Array("{\"over\":\"tls\"}".utf8))
                return try connection.readResponse()
            }
        }
        let first = try await roundTrip()
        #expect(first.status == 200 && first.text == "{\"over\":\"tls\"}")
        // Plain HTTP on the TLS port gets no HTTP answer: the connection is closed.
        let plain = try await sendRaw(server.port, Array("GET /echo HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
        #expect(plain == nil)
        #expect(try await roundTrip().status == 200)
    }

    @Test func refusesAClientThatDoesNotTrustTheCertificate() async throws {
        let server = try startServer(tls: try TestCertificate.shared.get().credentials) { _ in }
        defer { server.stop() }
        let stranger = try TestCertificate(name: "127.0.0.1")

        await #expect(throws: ClientError.self) {
            try await onThread { _ = try TestConnection(port: server.port, trusting: stranger.certificatePEM) }
        }
    }

    /// Under TLS an upgraded connection is relayed by MHD through a socketpair: the frames, the
    /// first one sent with the handshake, and the close handshake all go through it.
    @Test func webSocketOverTLS() async throws {
        let certificate = try TestCertificate.shared.get()
        let closes = CloseRecorder()
        let server = try startEchoServer(closes, tls: try certificate.credentials)
        defer { server.stop() }

        let big = (0..<20_000).map { UInt8(truncatingIfNeeded: $0) }
        let (frames, close) = try await onThread {
            let socket = try openWebSocket(server.port, trusting: certificate.certificatePEM)
            try socket.sendFrame(WebSocketFrame(.text, Array("Hello".utf8)))
            try socket.sendFrame(WebSocketFrame(.binary, big))
            let frames = try (0..<2).map { _ in try socket.readFrame() }
            try socket.sendFrame(.close(code: 4000, reason: "bye"))
            let close = try socket.readFrame()
            try socket.readUntilClosed()
            return (frames, close)
        }
        #expect(frames == [WebSocketFrame(.text, Array("Hello".utf8)), WebSocketFrame(.binary, big)])
        #expect(close == .close(code: 4000))
        #expect(await eventually { closes.all == [4000] })
    }

    @Test func credentialsAreCheckedWhenMade() throws {
        let certificate = try TestCertificate.shared.get()
        let other = try TestCertificate(name: "127.0.0.2")
        let cases: [(String, String, String)] = [
            ("a key of another certificate", certificate.certificatePEM, other.keyPEM),
            ("the key as the certificate", certificate.keyPEM, certificate.keyPEM),
            ("not PEM", "hello", certificate.keyPEM),
            ("a NUL byte", certificate.certificatePEM + "\0", certificate.keyPEM),
        ]
        for (name, certificatePEM, keyPEM) in cases {
            #expect(throws: TLSCredentialsError.self, "\(name)") {
                try TLSCredentials(certificatePEM: certificatePEM, keyPEM: keyPEM)
            }
        }
        #expect(throws: TLSCredentialsError.self) {
            try TLSCredentials(certificateFile: "/nonexistent/cert.pem", keyFile: "/nonexistent/key.pem")
        }
    }
}
