import CMicroHTTPD
import Foundation
import Glibc

@testable import HTTPServer

/// A response as read off the wire.
struct WireResponse: Sendable {
    var status: Int
    /// Lower-cased names; repeated fields joined with ", ".
    var headers: [String: String]
    var body: [UInt8]
    var text: String { String(decoding: body, as: UTF8.self) }
}

struct ClientError: Error, Equatable, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
    /// The server closed the connection.
    static let closed = ClientError("connection closed by the server")
    static func errno(_ call: String) -> ClientError { ClientError("\(call): \(String(cString: strerror(Glibc.errno)))") }
}

/// A blocking HTTP/1.1 client connection over a raw socket, small enough to trust: it writes the
/// bytes it is given and parses `Content-Length` responses, chunked bodies piece by piece, and
/// WebSocket frames. Every read times out after 10 s. Unchecked Sendable: tests hand it between
/// threads but use it from one at a time.
final class TestConnection: @unchecked Sendable {
    private var fd: Int32
    private var buffer: [UInt8] = []
    private var tls: TLSClient?

    /// - Parameter trusting: speak TLS, and accept only a server with this (PEM) certificate for
    ///   127.0.0.1.
    init(port: UInt16, trusting certificate: String? = nil) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw ClientError.errno("socket") }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            let error = ClientError.errno("connect")
            // Once: deinit runs for this init's failure too, and a second close could close
            // another test's socket that got the same descriptor in between.
            hangUp()
            throw error
        }
        if let certificate {
            do { tls = try TLSClient(fd: fd, trusting: certificate) } catch {
                hangUp()
                throw ClientError("\(error)")
            }
        }
    }

    deinit { hangUp() }

    /// Closes the socket (the server sees the hang-up).
    func hangUp() {
        tls = nil
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
    }

    func send(_ bytes: [UInt8]) throws {
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { bytes in
                tls.map { $0.send(bytes) } ?? Glibc.send(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL))
            }
            guard n > 0 else { throw ClientError.errno("send") }
            sent += n
        }
    }

    func send(_ text: String) throws { try send(Array(text.utf8)) }

    /// Writes one request. `Content-Length` is added for a non-empty body unless `headers` has
    /// a `Transfer-Encoding` or `Content-Length` already.
    func sendRequest(
        _ method: String, _ target: String, headers: [(String, String)] = [], body: [UInt8] = []
    ) throws {
        var head = "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        let framed = headers.contains { ["transfer-encoding", "content-length"].contains($0.0.lowercased()) }
        if !body.isEmpty && !framed { head += "Content-Length: \(body.count)\r\n" }
        try send(Array((head + "\r\n").utf8) + body)
    }

    /// Reads one response; `head` for the answer to a HEAD request (no body follows).
    func readResponse(head: Bool = false) throws -> WireResponse {
        var response = try readHead()
        if response.status == 100 { return try readResponse(head: head) }
        guard !head else { return response }
        let length = Int(response.headers["content-length"] ?? "0") ?? 0
        response.body = try readExactly(length)
        return response
    }

    /// Reads a status line and headers; the body stays unread.
    func readHead() throws -> WireResponse {
        let separator: [UInt8] = Array("\r\n\r\n".utf8)
        var end: Int?
        while end == nil {
            end = buffer.firstRange(of: separator)?.upperBound
            if end == nil { try fill() }
        }
        let lines = String(decoding: buffer[..<(end! - 4)], as: UTF8.self).components(separatedBy: "\r\n")
        buffer.removeFirst(end!)
        let statusParts = lines[0].split(separator: " ")
        guard statusParts.count >= 2, let status = Int(statusParts[1]) else {
            throw ClientError("bad status line \(lines[0])")
        }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let name = line[..<colon].lowercased()
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            headers[name] = headers[name].map { "\($0), \(value)" } ?? value
        }
        return WireResponse(status: status, headers: headers, body: [])
    }

    func readExactly(_ count: Int) throws -> [UInt8] {
        while buffer.count < count { try fill() }
        defer { buffer.removeFirst(count) }
        return Array(buffer[..<count])
    }

    private func readLine() throws -> String {
        while true {
            if let end = buffer.firstRange(of: Array("\r\n".utf8)) {
                defer { buffer.removeFirst(end.upperBound) }
                return String(decoding: buffer[..<end.lowerBound], as: UTF8.self)
            }
            try fill()
        }
    }

    /// The data of the next chunk of a chunked body; empty for the last one (trailers skipped).
    func readChunk() throws -> [UInt8] {
        let sizeLine = try readLine()
        guard let size = Int(sizeLine.split(separator: ";")[0], radix: 16) else {
            throw ClientError("bad chunk size line \(sizeLine)")
        }
        if size == 0 {
            while try !readLine().isEmpty {}
            return []
        }
        let data = try readExactly(size)
        guard try readLine().isEmpty else { throw ClientError("chunk not followed by CRLF") }
        return data
    }

    /// Reads until the server closes the connection; throws on timeout.
    func readUntilClosed() throws {
        while true {
            do { try fill() } catch let error as ClientError where error == .closed { return }
        }
    }

    /// The next frame the server sent.
    func readFrame() throws -> WebSocketFrame {
        while true {
            switch WebSocketFrame.parse(buffer[...], maxPayloadBytes: .max, requireMasked: false) {
            case .frame(let frame, let masked, let length):
                guard !masked else { throw ClientError("the server masked a frame") }
                buffer.removeFirst(length)
                return frame
            case .incomplete:
                try fill()
            case .invalid(let code, let reason):
                throw ClientError("bad frame from the server: \(code) \(reason)")
            }
        }
    }

    /// Sends a frame, masked as a client must unless told otherwise.
    func sendFrame(_ frame: WebSocketFrame, masked: Bool = true) throws {
        try send(frame.serialized(maskingKey: masked ? [0x37, 0xfa, 0x21, 0x3d] : nil))
    }

    private func fill() throws {
        var chunk = [UInt8](repeating: 0, count: 65536)
        let n = try chunk.withUnsafeMutableBytes { chunk in
            do { return try tls.map { try $0.receive(into: chunk) } ?? recv(fd, chunk.baseAddress, chunk.count, 0) } catch {
                throw ClientError("\(error)")
            }
        }
        if n == 0 { throw ClientError.closed }
        guard n > 0 else {
            // A reset after the server closed on unread data counts as closed.
            if Glibc.errno == ECONNRESET { throw ClientError.closed }
            throw ClientError.errno("recv")
        }
        buffer += chunk[..<n]
    }
}

/// Runs blocking socket work on a thread of its own, so it never holds one of the few threads of
/// the Swift concurrency pool that the server's handlers need.
func onThread<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try work() }) }.start()
    }
}

/// One request on a fresh connection.
func fetch(
    _ port: UInt16, _ method: String, _ target: String, headers: [(String, String)] = [], body: [UInt8] = []
) async throws -> WireResponse {
    try await onThread {
        let connection = try TestConnection(port: port)
        try connection.sendRequest(method, target, headers: headers, body: body)
        return try connection.readResponse(head: method == "HEAD")
    }
}

/// Sends raw bytes on a fresh connection and returns the status of the answer, or nil when the
/// server closed the connection without one.
func sendRaw(_ port: UInt16, _ bytes: [UInt8]) async throws -> Int? {
    try await onThread {
        let connection = try TestConnection(port: port)
        try connection.send(bytes)
        do { return try connection.readResponse().status } catch let error as ClientError where error == .closed {
            return nil
        }
    }
}

/// Sends raw bytes on a fresh connection and closes it without reading.
func sendAndHangUp(_ port: UInt16, _ bytes: [UInt8]) async throws {
    try await onThread { try TestConnection(port: port).send(bytes) }
}
