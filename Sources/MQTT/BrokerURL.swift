/// Where a broker is: `mqtt://[user[:password]@]host[:port]` or `mqtts://...` (TLS).
///
/// User and password may be percent-encoded (`%40` for `@`). The port defaults to 1883, or 8883
/// with TLS; an IPv6 host is written in brackets (`mqtt://[::1]:1883`). No path, query or fragment.
public struct BrokerURL: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public var tls: Bool
    public var user: String?
    public var password: String?

    public init(host: String, port: Int? = nil, tls: Bool = false, user: String? = nil, password: String? = nil) {
        self.host = host
        self.port = port ?? (tls ? 8883 : 1883)
        self.tls = tls
        self.user = user
        self.password = password
    }

    public struct Invalid: Error, Equatable, CustomStringConvertible {
        public let description: String
    }

    public init(parsing text: String) throws(Invalid) {
        let tls: Bool
        var rest: Substring
        if text.hasPrefix("mqtt://") {
            (tls, rest) = (false, text.dropFirst(7))
        } else if text.hasPrefix("mqtts://") {
            (tls, rest) = (true, text.dropFirst(8))
        } else {
            throw Invalid(description: "\"\(text)\" is not mqtt://[user:password@]host[:port] (or mqtts://)")
        }
        if rest.hasSuffix("/") { rest = rest.dropLast() }
        guard !rest.contains(where: { $0 == "/" || $0 == "?" || $0 == "#" }) else {
            throw Invalid(description: "\"\(text)\": a broker URL has no path, query or fragment")
        }
        var user: String?
        var password: String?
        if let at = rest.lastIndex(of: "@") {
            let credentials = rest[..<at]
            rest = rest[rest.index(after: at)...]
            if let colon = credentials.firstIndex(of: ":") {
                user = try Self.percentDecoded(credentials[..<colon])
                password = try Self.percentDecoded(credentials[credentials.index(after: colon)...])
            } else {
                user = try Self.percentDecoded(credentials)
            }
            guard user?.isEmpty == false else { throw Invalid(description: "\"\(text)\": the user name is empty") }
        }
        var host: Substring
        var portText: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { throw Invalid(description: "\"\(text)\": \"[\" without \"]\"") }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw Invalid(description: "\"\(text)\": what follows the host is not :port") }
                portText = after.dropFirst()
            }
        } else if let colon = rest.firstIndex(of: ":") {
            host = rest[..<colon]
            portText = rest[rest.index(after: colon)...]
        } else {
            host = rest
        }
        guard !host.isEmpty else { throw Invalid(description: "\"\(text)\" names no host") }
        var port: Int?
        if let portText {
            guard let n = Int(portText), (1...65535).contains(n) else {
                throw Invalid(description: "\"\(text)\": the port must be 1-65535, not \"\(portText)\"")
            }
            port = n
        }
        self.init(host: String(host), port: port, tls: tls, user: user, password: password)
    }

    /// The URL without the password, for logs.
    public var description: String {
        let credentials = user.map { "\($0)\(password == nil ? "" : ":***")@" } ?? ""
        let shownHost = host.contains(":") ? "[\(host)]" : host
        return "\(tls ? "mqtts" : "mqtt")://\(credentials)\(shownHost):\(port)"
    }

    // HTTPServer's Request has its own: MQTT knows nothing of gattway's other modules, and
    // FoundationEssentials has no removingPercentEncoding.
    private static func percentDecoded(_ text: Substring) throws(Invalid) -> String {
        var bytes: [UInt8] = []
        var iterator = Array(text.utf8).makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else { bytes.append(byte); continue }
            guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else {
                throw Invalid(description: "\"\(text)\": % must be followed by two hex digits")
            }
            bytes.append(high << 4 | low)
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    private static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
