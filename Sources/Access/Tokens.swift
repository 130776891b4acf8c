/// What a token may do.
public enum Role: String, Sendable, Equatable {
    /// Every route.
    case readWrite = "rw"
    /// GETs and event streams: nothing that changes a device, a scan or the gateway.
    case readOnly = "ro"
}

/// The bearer tokens gattway accepts, each with its role.
///
/// Text form (a `--tokens` file, one entry a line, or `GATTWAY_TOKENS`, entries separated by
/// commas or spaces): `TOKEN`, `rw:TOKEN` or `ro:TOKEN`; `#` starts a comment. A token is 16 to
/// 512 characters from `A-Z a-z 0-9 - . _ ~`, which fit unescaped in a URL query and in a
/// WebSocket subprotocol name, the two places a browser can put one besides `Authorization`.
public struct TokenSet: Sendable {
    private var entries: [(token: [UInt8], role: Role)] = []

    public init() {}

    public var isEmpty: Bool { entries.isEmpty }
    public var count: Int { entries.count }
    public var readOnlyCount: Int { entries.count { $0.role == .readOnly } }

    /// The tokens of a file's text; `source` names it in errors (`FILE:LINE: ...`).
    public static func parse(lines text: String, source: String) throws(TokenError) -> TokenSet {
        var set = TokenSet()
        // By `isNewline`: "\r\n" is one Character, which a split at "\n" would not cut.
        for (index, line) in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated() {
            let entry = line.prefix { $0 != "#" }.trimmingWhitespace
            guard !entry.isEmpty else { continue }
            try set.add(String(entry), at: "\(source):\(index + 1)")
        }
        return set
    }

    /// The tokens of a list: entries separated by commas or whitespace (`GATTWAY_TOKENS`).
    public static func parse(list text: String, source: String) throws(TokenError) -> TokenSet {
        var set = TokenSet()
        for (index, entry) in text.split(whereSeparator: { $0 == "," || $0.isWhitespace }).enumerated() {
            try set.add(String(entry), at: "\(source) entry \(index + 1)")
        }
        return set
    }

    /// Both sets' tokens; a token in both is an error.
    public func merged(with other: TokenSet, source: String) throws(TokenError) -> TokenSet {
        var merged = self
        for entry in other.entries {
            guard !merged.entries.contains(where: { $0.token == entry.token }) else {
                throw TokenError(description: "\(source): a token is given twice")
            }
            merged.entries.append(entry)
        }
        return merged
    }

    private mutating func add(_ entry: String, at place: String) throws(TokenError) {
        var role = Role.readWrite
        var token = Substring(entry)
        if let colon = entry.firstIndex(of: ":") {
            guard let given = Role(rawValue: String(entry[..<colon])) else {
                throw TokenError(description: "\(place): \"\(entry[..<colon])\" is not a role; write ro:TOKEN, rw:TOKEN or TOKEN")
            }
            role = given
            token = entry[entry.index(after: colon)...]
        }
        guard (16...512).contains(token.utf8.count) else {
            throw TokenError(description: "\(place): a token has 16 to 512 characters, this one \(token.utf8.count)")
        }
        guard token.utf8.allSatisfy(Self.isTokenByte) else {
            throw TokenError(description: "\(place): a token is made of A-Z a-z 0-9 - . _ ~ only")
        }
        let bytes = Array(token.utf8)
        guard !entries.contains(where: { $0.token == bytes }) else { throw TokenError(description: "\(place): this token is given twice") }
        entries.append((bytes, role))
    }

    static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
            true
        default:
            false
        }
    }

    /// The role of `candidate`, nil if it is no token of the set. The time taken depends on the
    /// number of tokens and their lengths, never on how much of `candidate` matches one: every
    /// token is compared over its whole length, without an early exit.
    public func role(of candidate: some StringProtocol) -> Role? {
        let given = Array(candidate.utf8)
        var found: Role?
        for entry in entries where Self.constantTimeEqual(entry.token, given) {
            found = entry.role
        }
        return found
    }

    /// Equal bytes, compared over the longer length whatever they hold.
    static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        var difference = UInt(bitPattern: a.count ^ b.count)
        for index in 0..<max(a.count, b.count) {
            let x = index < a.count ? a[index] : 0
            let y = index < b.count ? b[index] : 0
            difference |= UInt(x ^ y)
        }
        return difference == 0
    }
}

/// A token file or list that cannot be used, with where and why.
public struct TokenError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(description: String) { self.description = description }
}

extension StringProtocol {
    var trimmingWhitespace: Substring {
        let view = self[...]
        guard let first = view.firstIndex(where: { !$0.isWhitespace }),
            let last = view.lastIndex(where: { !$0.isWhitespace })
        else { return "" }
        return Substring(view[first...last])
    }
}
