/// Which web origins may use the gateway from a browser: the gateway's own, and those listed
/// (`--allow-origin`). A request without `Origin` (curl, scripts, Home Assistant) is no browser
/// page's and is not judged here.
public struct OriginPolicy: Sendable {
    private let allowed: Set<String>
    private let allowsAny: Bool

    /// - Parameter origins: `scheme://host[:port]` each, or `*` for any origin (for a gateway that
    ///   relies on tokens alone). Throws for anything else, e.g. a path or a missing scheme.
    public init(allowing origins: [String]) throws(OriginError) {
        var allowed = Set<String>()
        var any = false
        for origin in origins {
            if origin == "*" {
                any = true
            } else if let normalized = Self.normalize(origin) {
                allowed.insert(normalized)
            } else {
                throw OriginError(description: "\"\(origin)\" is not an origin; write scheme://host[:port], e.g. http://192.168.1.20:8123, or *")
            }
        }
        self.allowed = allowed
        allowsAny = any
    }

    public enum Verdict: Sendable, Equatable {
        /// No `Origin`: not a browser page's request (or a same-origin GET, which browsers send without one).
        case noOrigin
        /// The page was served by the gateway itself (`Origin` names the `Host` asked for).
        case sameOrigin
        /// A listed origin, as the request spelled it: CORS answers name it.
        case allowed(String)
        case refused(String)
    }

    /// What to make of a request's `Origin`, given the `Host` it was sent to.
    public func verdict(origin: String?, host: String?) -> Verdict {
        guard let origin else { return .noOrigin }
        guard let normalized = Self.normalize(origin) else { return .refused(origin) }
        if let host, let scheme = normalized.split(separator: ":").first,
            Self.normalize("\(scheme)://\(host)") == normalized {
            return .sameOrigin
        }
        if allowsAny || allowed.contains(normalized) { return .allowed(origin) }
        return .refused(origin)
    }

    /// Whether `host` (a `Host` header) names one of the listed origins' hosts.
    public func lists(host: String) -> Bool {
        let name = Self.hostName(host)
        return allowsAny || allowed.contains { Self.hostName(String($0.split(separator: "/").last ?? "")) == name }
    }

    /// `scheme://host:port` in lower case with the scheme's default port left out; nil when
    /// `origin` is not of that form (a path, user info, no scheme, or "null").
    static func normalize(_ origin: String) -> String? {
        let lower = origin.lowercased()
        guard let colon = lower.firstIndex(of: ":"), lower[colon...].hasPrefix("://") else { return nil }
        let scheme = lower[..<colon]
        var authority = lower[lower.index(colon, offsetBy: 3)...]
        guard !scheme.isEmpty, scheme.allSatisfy({ $0.isLetter || $0.isNumber || "+-.".contains($0) }),
            !authority.isEmpty, !authority.contains(where: { "/?#@ ".contains($0) })
        else { return nil }
        let defaultPort = scheme == "http" || scheme == "ws" ? ":80" : scheme == "https" || scheme == "wss" ? ":443" : nil
        if let defaultPort, authority.hasSuffix(defaultPort) {
            authority = authority.dropLast(defaultPort.count)
        }
        return "\(scheme)://\(authority)"
    }

    /// The host of a `Host` header or an origin's authority, without the port or IPv6 brackets.
    static func hostName(_ authority: String) -> String {
        let lower = authority.lowercased()
        if lower.hasPrefix("["), let end = lower.firstIndex(of: "]") {
            return String(lower[lower.index(after: lower.startIndex)..<end])
        }
        if let colon = lower.lastIndex(of: ":"), lower.firstIndex(of: ":") == colon {
            return String(lower[..<colon])
        }
        return lower
    }

    /// Whether a `Host` header cannot have been reached through a DNS name an attacker controls:
    /// an IP address literal, or `localhost`. A page that rebinds its own name to 127.0.0.1 sends
    /// its name here.
    public static func isAddressOrLocalhost(_ host: String) -> Bool {
        // The usual case first, without allocating: an IPv4 literal (digits and dots, a port).
        if let first = host.utf8.first, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first) {
            let name = host.utf8.prefix { $0 != UInt8(ascii: ":") }
            let parts = name.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
            return parts.count == 4 && parts.allSatisfy { part in
                (1...3).contains(part.count) && part.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
                    && part.reduce(0) { $0 * 10 + Int($1 - UInt8(ascii: "0")) } <= 255
            }
        }
        let name = hostName(host)
        if name == "localhost" || name.hasSuffix(".localhost") { return true }
        if name.contains(":") { return name.allSatisfy { $0.isHexDigit || $0 == ":" || $0 == "." } }
        let parts = name.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts.allSatisfy { part in UInt8(part) != nil && part.allSatisfy(\.isNumber) }
    }
}

/// An `--allow-origin` value that is not an origin.
public struct OriginError: Error, Sendable, CustomStringConvertible {
    public let description: String
}
