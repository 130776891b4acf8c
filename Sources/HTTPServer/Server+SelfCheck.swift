import Glibc

extension Server {
    /// Sends `GET target` to this server over its own socket, as a client does (through TLS when
    /// it serves HTTPS, taking whatever certificate it shows: its own), and returns the status of
    /// the answer, whatever it is; nil when none came within `timeout`. An answer shows that the
    /// I/O thread accepts and reads, that a handler task runs and that its response goes out.
    /// A wildcard address is asked on loopback. Blocking: call it from a thread of its own, never
    /// from a Swift task or one of the server's callbacks.
    public func selfCheck(_ target: String, headers: [String: String] = [:], timeout: Duration) -> Int? {
        let deadline = ContinuousClock.now + timeout
        let host = host == "0.0.0.0" ? "127.0.0.1" : host == "::" ? "::1" : host
        guard let address = ListenAddress(host: host, port: port) else { return nil }
        let fd = socket(address.isIPv6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        /// Each blocking step may take what is left until the deadline; false once nothing is.
        func timeLeft() -> Bool {
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { return false }
            var limit = timeval(tv_sec: Int(left.components.seconds),
                                tv_usec: max(1, Int(left.components.attoseconds / 1_000_000_000_000)))
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
            return true
        }
        guard timeLeft(), address.withSockaddrPointer({ connect(fd, $0.assumingMemoryBound(to: sockaddr.self), address.length) }) == 0,
              timeLeft()
        else { return nil }
        let tls: TLSClient?
        do { tls = servesTLS ? try TLSClient(fd: fd, trusting: nil) : nil } catch { return nil }
        var head = "GET \(target) HTTP/1.1\r\nHost: \(address.isIPv6 ? "[\(host)]" : host):\(port)\r\nConnection: close\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        var request = Array((head + "\r\n").utf8)[...]
        while !request.isEmpty {
            guard timeLeft() else { return nil }
            let sent = request.withUnsafeBytes { tls?.send($0) ?? send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard sent > 0 else { return nil }
            request = request.dropFirst(sent)
        }
        // The status line: "HTTP/1.1 200 OK".
        var answer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 512)
        while !answer.contains(UInt8(ascii: "\n")) {
            guard timeLeft() else { return nil }
            let count: Int
            do {
                count = try chunk.withUnsafeMutableBytes { try tls?.receive(into: $0) ?? recv(fd, $0.baseAddress, $0.count, 0) }
            } catch {
                return nil
            }
            guard count > 0 else { break }
            answer += chunk[..<count]
        }
        let words = String(decoding: answer.prefix { $0 != UInt8(ascii: "\r") }, as: UTF8.self).split(separator: " ")
        guard words.count >= 2, words[0].hasPrefix("HTTP/1."), let status = Int(words[1]) else { return nil }
        return status
    }
}
