import Glibc

/// Where gattway's tokens come from: a file (`--tokens FILE`, read again on SIGHUP) and a list
/// (`GATTWAY_TOKENS`, read once), together.
public struct TokenSources: Sendable, Equatable {
    public var file: String?
    public var list: String?

    public init(file: String? = nil, list: String? = nil) {
        self.file = file
        self.list = list
    }

    /// Whether any tokens were asked for (an empty file still asks: it is the one to fill).
    public var areGiven: Bool { file != nil || list != nil }

    /// The tokens of both; `readFile` gives a file's text, nil when it cannot be read (errno
    /// then says why). A token given in both, an unreadable file or a bad entry is an error
    /// that says where.
    public func load(readFile: (String) -> String?) throws(TokenError) -> TokenSet {
        var set = TokenSet()
        if let list { set = try TokenSet.parse(list: list, source: "GATTWAY_TOKENS") }
        if let file {
            guard let text = readFile(file) else {
                throw TokenError(description: "\(file): cannot read it (\(String(cString: strerror(errno))))")
            }
            set = try set.merged(with: try TokenSet.parse(lines: text, source: file), source: file)
        }
        return set
    }
}

/// What a reload of the tokens (SIGHUP) did.
public enum TokenReload: Sendable, CustomStringConvertible {
    /// These tokens are in force now.
    case replaced(count: Int, readOnly: Int)
    /// The file has no token any more; those in force stay (an empty set would open every route).
    case keptEmpty
    /// The sources cannot be used; the tokens in force stay.
    case kept(TokenError)

    /// Whether the operator should look: the reload did not take.
    public var isRefused: Bool {
        if case .replaced = self { return false }
        return true
    }

    public var description: String {
        switch self {
        case .replaced(let count, let readOnly): "tokens: SIGHUP: \(count) token(s) in force, \(readOnly) read-only"
        case .keptEmpty: "tokens: SIGHUP: the file now has no token; keeping the tokens in force (an empty file would open every route)"
        case .kept(let error): "tokens: SIGHUP: \(error); keeping the tokens in force"
        }
    }
}

extension AccessControl {
    /// Reads `sources` again and puts their tokens in force, unless they cannot be used or would
    /// leave a gateway that asked for tokens open to everyone.
    public func reloadTokens(_ sources: TokenSources, readFile: (String) -> String?) -> TokenReload {
        let set: TokenSet
        do {
            set = try sources.load(readFile: readFile)
        } catch {
            return .kept(error)
        }
        if set.isEmpty && requiresTokens { return .keptEmpty }
        replaceTokens(set)
        return .replaced(count: set.count, readOnly: set.readOnlyCount)
    }
}
