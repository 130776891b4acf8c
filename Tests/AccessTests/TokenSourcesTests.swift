import Glibc
import HTTPServer
import Testing
@testable import Access

/// The tokens of `--tokens FILE` and `GATTWAY_TOKENS`, loaded at start and again on SIGHUP.
@Suite struct TokenSourcesTests {
    static let rw = "rw-token-0123456789abcdef"
    static let ro = "ro-token-0123456789abcdef"
    static let other = "other-token-0123456789ab"

    /// Files by name; nil (with errno ENOENT) for any other.
    static func files(_ files: [String: String]) -> (String) -> String? {
        { name in
            guard let text = files[name] else {
                errno = ENOENT
                return nil
            }
            return text
        }
    }

    static func access(_ set: TokenSet) throws -> AccessControl {
        AccessControl(.init(tokens: set, origins: try OriginPolicy(allowing: [])), log: { _ in })
    }

    static func role(_ access: AccessControl, _ token: String) -> Role? {
        access.role(of: Request(method: "GET", path: "/v1/devices", queryItems: [], headers: ["authorization": "Bearer \(token)"],
                                body: [], remoteAddress: "127.0.0.1:5000"))
    }

    @Test func fileAndListTogether() throws {
        let set = try TokenSources(file: "tokens", list: "ro:\(Self.ro)").load(readFile: Self.files(["tokens": "\(Self.rw)\n"]))
        #expect(set.count == 2 && set.readOnlyCount == 1 && set.role(of: Self.rw) == .readWrite)
        #expect(try TokenSources().load(readFile: Self.files([:])).isEmpty)
        #expect(!TokenSources().areGiven && TokenSources(file: "t").areGiven && TokenSources(list: "").areGiven)
    }

    @Test(arguments: [
        (TokenSources(file: "missing"), "missing: cannot read it (No such file or directory)"),
        (TokenSources(file: "tokens", list: rw), "tokens: a token is given twice"),
        (TokenSources(list: "short"), "GATTWAY_TOKENS entry 1: a token has 16 to 512 characters, this one 5"),
        (TokenSources(file: "bad"), "bad:2: a token has 16 to 512 characters, this one 5"),
    ])
    func whatCannotBeUsedSaysWhere(sources: TokenSources, message: String) {
        do {
            _ = try sources.load(readFile: Self.files(["tokens": "\(Self.rw)\n", "bad": "# ok\nshort\n"]))
            Issue.record("loaded \(sources)")
        } catch {
            #expect(error.description == message)
        }
    }

    @Test func aReloadPutsTheFileInForce() throws {
        let access = try Self.access(try TokenSet.parse(lines: Self.rw, source: "t"))
        let reload = access.reloadTokens(TokenSources(file: "tokens"), readFile: Self.files(["tokens": "\(Self.other)\nro:\(Self.ro)\n"]))
        #expect(reload.description == "tokens: SIGHUP: 2 token(s) in force, 1 read-only" && !reload.isRefused)
        #expect(Self.role(access, Self.rw) == nil)
        #expect(Self.role(access, Self.other) == .readWrite && Self.role(access, Self.ro) == .readOnly)
    }

    @Test func aFileThatCannotBeUsedKeepsTheTokensInForce() throws {
        let access = try Self.access(try TokenSet.parse(lines: Self.rw, source: "t"))
        let reload = access.reloadTokens(TokenSources(file: "tokens"), readFile: Self.files(["tokens": "short\n"]))
        #expect(reload.description == "tokens: SIGHUP: tokens:1: a token has 16 to 512 characters, this one 5; keeping the tokens in force")
        #expect(reload.isRefused && Self.role(access, Self.rw) == .readWrite)
        #expect(access.reloadTokens(TokenSources(file: "gone"), readFile: Self.files([:])).isRefused)
        #expect(Self.role(access, Self.rw) == .readWrite)
    }

    @Test func anEmptiedFileDoesNotOpenEveryRoute() throws {
        let access = try Self.access(try TokenSet.parse(lines: Self.rw, source: "t"))
        let reload = access.reloadTokens(TokenSources(file: "tokens"), readFile: Self.files(["tokens": "# nobody\n"]))
        #expect(reload.isRefused && reload.description.contains("the file now has no token; keeping the tokens in force"))
        #expect(access.requiresTokens && Self.role(access, Self.rw) == .readWrite && Self.role(access, Self.other) == nil)
    }

    @Test func aGatewayWithoutTokensStaysOpenOnReload() throws {
        let access = try Self.access(TokenSet())
        let reload = access.reloadTokens(TokenSources(), readFile: Self.files([:]))
        #expect(reload.description == "tokens: SIGHUP: 0 token(s) in force, 0 read-only" && !access.requiresTokens)
    }
}
