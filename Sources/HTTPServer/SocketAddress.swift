import Glibc

/// The address the server listens on, as the `sockaddr` MHD_OPTION_SOCK_ADDR takes.
enum ListenAddress {
    case v4(sockaddr_in)
    case v6(sockaddr_in6)

    /// An IPv4 literal ("0.0.0.0" for all interfaces), "localhost", or an IPv6 literal with or
    /// without brackets. Host names are not resolved.
    init?(host: String, port: UInt16) {
        let literal = host == "localhost" ? "127.0.0.1" : host
        var v4 = sockaddr_in()
        if inet_pton(AF_INET, literal, &v4.sin_addr) == 1 {
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = port.bigEndian
            self = .v4(v4)
            return
        }
        let unbracketed = literal.hasPrefix("[") && literal.hasSuffix("]")
            ? String(literal.dropFirst().dropLast()) : literal
        var v6 = sockaddr_in6()
        if inet_pton(AF_INET6, unbracketed, &v6.sin6_addr) == 1 {
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_port = port.bigEndian
            self = .v6(v6)
            return
        }
        return nil
    }

    var isIPv6: Bool {
        if case .v6 = self { true } else { false }
    }

    /// The address as a numeric literal, IPv6 without brackets.
    var literal: String {
        switch self {
        case .v4(let address): presentation(AF_INET, address.sin_addr) ?? ""
        case .v6(let address): presentation(AF_INET6, address.sin6_addr) ?? ""
        }
    }

    var length: socklen_t {
        socklen_t(isIPv6 ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size)
    }

    func withSockaddrPointer<R>(_ body: (UnsafeMutableRawPointer) -> R) -> R {
        switch self {
        case .v4(var address): withUnsafeMutableBytes(of: &address) { body($0.baseAddress!) }
        case .v6(var address): withUnsafeMutableBytes(of: &address) { body($0.baseAddress!) }
        }
    }
}

/// A peer's IP address (4 or 16 bytes, no port): the key of per-client connection counts.
struct ClientKey: Hashable, Sendable {
    let bytes: [UInt8]

    init?(_ address: UnsafePointer<sockaddr>) {
        let raw = UnsafeRawPointer(address)
        switch Int32(address.pointee.sa_family) {
        case AF_INET: bytes = withUnsafeBytes(of: raw.loadUnaligned(as: sockaddr_in.self).sin_addr) { Array($0) }
        case AF_INET6: bytes = withUnsafeBytes(of: raw.loadUnaligned(as: sockaddr_in6.self).sin6_addr) { Array($0) }
        default: return nil
        }
    }
}

/// `address:port` for IPv4, `[address]:port` for IPv6, "" for anything else.
func describePeer(_ address: UnsafePointer<sockaddr>) -> String {
    let raw = UnsafeRawPointer(address)
    switch Int32(address.pointee.sa_family) {
    case AF_INET:
        let v4 = raw.loadUnaligned(as: sockaddr_in.self)
        guard let ip = presentation(AF_INET, v4.sin_addr) else { return "" }
        return "\(ip):\(UInt16(bigEndian: v4.sin_port))"
    case AF_INET6:
        let v6 = raw.loadUnaligned(as: sockaddr_in6.self)
        guard let ip = presentation(AF_INET6, v6.sin6_addr) else { return "" }
        return "[\(ip)]:\(UInt16(bigEndian: v6.sin6_port))"
    default:
        return ""
    }
}

/// inet_ntop of an `in_addr` or `in6_addr`.
private func presentation<Address>(_ family: Int32, _ address: Address) -> String? {
    var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
    let count = socklen_t(text.count)
    return withUnsafeBytes(of: address) { address in
        text.withUnsafeMutableBufferPointer { buffer in
            inet_ntop(family, address.baseAddress, buffer.baseAddress, count).map { String(cString: $0) }
        }
    }
}
