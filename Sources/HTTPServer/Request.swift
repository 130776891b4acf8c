/// One HTTP request, fully received (headers and body), as a handler sees it.
public struct Request: Sendable {
    /// Upper-case method, e.g. `GET`.
    public let method: String
    /// The URL path without the query, each segment percent-decoded.
    public let path: String
    /// `path` split at `/`, each segment decoded on its own, so an encoded `%2F` stays inside its
    /// segment. `/` has no segments; `/a/` is `["a", ""]`. The router matches on these.
    public let pathSegments: [String]
    /// Query parameters, percent-decoded (`+` is a space); for a repeated name the last value wins.
    public let query: [String: String]
    /// Query parameters in order, repeated names included. A name without `=` has the value "".
    public let queryItems: [(name: String, value: String)]
    /// Header fields with lower-cased names; repeated fields are joined with ", ".
    public let headers: [String: String]
    public let body: [UInt8]
    /// Values of the `{name}` segments of the matched route pattern, filled in by `Router`.
    public var pathParameters: [String: String]
    /// The peer as `address:port` (`[address]:port` for IPv6), or "" when unknown.
    public let remoteAddress: String
    /// As in the request line, e.g. `HTTP/1.1`.
    public let httpVersion: String

    /// A request built in code (tests, in-process routing). `path` is already decoded and is split
    /// at every `/`.
    public init(
        method: String,
        path: String,
        queryItems: [(name: String, value: String)] = [],
        headers: [String: String] = [:],
        body: [UInt8] = [],
        remoteAddress: String = "",
        httpVersion: String = "HTTP/1.1"
    ) {
        self.init(
            method: method,
            pathSegments: RequestTarget.split(path[...]).map(String.init),
            queryItems: queryItems,
            headers: headers.map { (name: $0.key, value: $0.value) },
            body: body,
            remoteAddress: remoteAddress,
            httpVersion: httpVersion)
    }

    init(
        method: String,
        pathSegments: [String],
        queryItems: [(name: String, value: String)],
        headers: [(name: String, value: String)],
        body: [UInt8],
        remoteAddress: String,
        httpVersion: String = "HTTP/1.1"
    ) {
        self.method = method.uppercased()
        self.pathSegments = pathSegments
        self.path = "/" + pathSegments.joined(separator: "/")
        self.queryItems = queryItems
        self.query = Dictionary(queryItems.map { ($0.name, $0.value) }, uniquingKeysWith: { _, last in last })
        self.headers = Dictionary(
            headers.map { ($0.name.lowercased(), $0.value) }, uniquingKeysWith: { "\($0), \($1)" })
        self.body = body
        self.pathParameters = [:]
        self.remoteAddress = remoteAddress
        self.httpVersion = httpVersion
    }

    /// The value of a header field, by case-insensitive name.
    public func header(_ name: String) -> String? {
        headers[name.lowercased()]
    }

    /// The peer's address without its port (`127.0.0.1`, `::1`): what per-client limits count by.
    public var clientAddress: String { Self.clientAddress(of: remoteAddress) }

    /// `address:port` or `[address]:port` without the port and brackets.
    static func clientAddress(of peer: String) -> String {
        if peer.hasPrefix("["), let end = peer.firstIndex(of: "]") {
            return String(peer[peer.index(after: peer.startIndex)..<end])
        }
        guard let colon = peer.lastIndex(of: ":") else { return peer }
        return String(peer[..<colon])
    }
}

/// Splitting and percent-decoding of request targets.
enum RequestTarget {
    /// The segments of an absolute path: the text after the leading `/`, split at every `/`.
    /// Split by bytes: as characters, a `/` followed by a combining mark is one character, and
    /// the split would miss it.
    static func split(_ path: Substring) -> [Substring] {
        let rest = path.utf8.first == UInt8(ascii: "/") ? path.utf8.dropFirst() : path.utf8[...]
        return rest.isEmpty ? [] : rest.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).map(Substring.init)
    }

    /// The decoded segments of a raw (still encoded) absolute path; nil if the path does not start
    /// with `/` or a segment is not valid percent-encoded UTF-8.
    static func decodePath(_ raw: String) -> [String]? {
        guard raw.utf8.first == UInt8(ascii: "/") else { return nil }
        var segments: [String] = []
        for segment in split(raw[...]) {
            guard let decoded = percentDecode(segment) else { return nil }
            segments.append(decoded)
        }
        return segments
    }

    /// `%XX` escapes replaced by their bytes, read as UTF-8. Nil for a `%` not followed by two hex
    /// digits or for bytes that are not UTF-8. `+` is left alone (MHD already turned the query's
    /// `+` into spaces, and in a path it means itself).
    static func percentDecode(_ text: some StringProtocol) -> String? {
        guard text.utf8.contains(UInt8(ascii: "%")) else { return String(text) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count)
        var iterator = text.utf8.makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue)
            else { return nil }
            bytes.append(high << 4 | low)
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func hexValue(_ digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): digit - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
