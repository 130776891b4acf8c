import Glibc

/// What a socket call refused, in words (the call and its errno's text).
public struct SocketError: Error, CustomStringConvertible, Sendable {
    public let description: String

    public init(_ description: String) { self.description = description }

    public init(call: String, errno code: Int32) {
        description = "\(call): \(String(cString: strerror(code)))"
    }
}

/// A TCP server's listening socket and the names of the sockets it accepts (the ESPHome API's
/// server and the serial ports').
public enum TCPListener {
    /// Whether `host` (as a server is told to listen on it) is a loopback address, reachable from
    /// this machine only.
    public static func isLoopback(_ host: String) -> Bool {
        host == "localhost" || host == "::1" || host.hasPrefix("127.")
    }

    /// A non-blocking socket listening on `host` (an IPv4 or IPv6 literal, or "localhost") and
    /// `port` (0: one the kernel picks); returns it and its port. `backlog`: connections the
    /// kernel queues until accepted; `ipv6Only`: an IPv6 address takes no IPv4 connections.
    public static func open(
        host: String, port: UInt16, backlog: Int32 = 16, ipv6Only: Bool = false
    ) throws(SocketError) -> (fd: Int32, port: UInt16) {
        var hints = addrinfo()
        hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var found: UnsafeMutablePointer<addrinfo>?
        let literal = host == "localhost" ? "127.0.0.1" : host
        let status = getaddrinfo(literal, String(port), &hints, &found)
        guard status == 0, let info = found else {
            throw SocketError("\(host) is not an IP address (\(String(cString: gai_strerror(status))))")
        }
        defer { freeaddrinfo(found) }
        let fd = socket(info.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SocketError(call: "socket", errno: errno) }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        if ipv6Only && info.pointee.ai_family == AF_INET6 {
            setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &one, socklen_t(MemoryLayout<Int32>.size))
        }
        guard bind(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0, listen(fd, backlog) == 0 else {
            let code = errno
            close(fd)
            throw SocketError(call: "listening on \(host):\(port)", errno: code)
        }
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let bound = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard bound == 0 else {
            let code = errno
            close(fd)
            throw SocketError(call: "getsockname", errno: code)
        }
        return (fd, name(of: storage, length: length).port)
    }

    public enum Accepted {
        case accepted(fd: Int32, peer: String)
        /// None waits.
        case none
        case failed(errno: Int32)
    }

    /// Accepts one waiting connection, non-blocking, with TCP_NODELAY (small messages, each
    /// awaited: the API's requests, a terminal's keystrokes).
    public static func accept(_ listener: Int32) -> Accepted {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let fd = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.accept(listener, $0, &length)
            }
        }
        guard fd >= 0 else { return errno == EAGAIN || errno == EWOULDBLOCK ? .none : .failed(errno: errno) }
        // accept4 would do both at once, but Glibc's module leaves it out (it needs _GNU_SOURCE).
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        let (host, port) = name(of: storage, length: length)
        return .accepted(fd: fd, peer: host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)")
    }

    private static func name(of storage: sockaddr_storage, length: socklen_t) -> (host: String, port: UInt16) {
        var storage = storage
        var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        var service = [CChar](repeating: 0, count: Int(NI_MAXSERV))
        let status = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                getnameinfo($0, length, &host, socklen_t(host.count), &service, socklen_t(service.count),
                            NI_NUMERICHOST | NI_NUMERICSERV)
            }
        }
        guard status == 0 else { return ("?", 0) }
        func text(_ chars: [CChar]) -> String {
            String(decoding: chars.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
        return (text(host), UInt16(text(service)) ?? 0)
    }
}
