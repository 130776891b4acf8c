import Testing
@testable import Access

@Suite struct TokenSetTests {
    static let rw = "rw-token-0123456789abcdef"
    static let ro = "ro-token-0123456789abcdef"

    @Test func fileLinesRolesAndComments() throws {
        let set = try TokenSet.parse(lines: """
            # the house
            \(Self.rw)
              ro:\(Self.ro)   # the wall display
            rw:another-token-0123456789

            """, source: "tokens")
        #expect(set.count == 3)
        #expect(set.readOnlyCount == 1)
        #expect(set.role(of: Self.rw) == .readWrite)
        #expect(set.role(of: Self.ro) == .readOnly)
        #expect(set.role(of: "another-token-0123456789") == .readWrite)
    }

    @Test(arguments: [
        ("ro:", "tokens:1: a token has 16 to 512 characters, this one 0"),
        ("short-token", "tokens:1: a token has 16 to 512 characters, this one 11"),
        ("admin:0123456789abcdef0123", "tokens:1: \"admin\" is not a role; write ro:TOKEN, rw:TOKEN or TOKEN"),
        ("0123456789abcdef/0123", "tokens:1: a token is made of A-Z a-z 0-9 - . _ ~ only"),
        ("0123456789abcdef0123\nro:0123456789abcdef0123", "tokens:2: this token is given twice"),
    ])
    func refusedEntries(text: String, message: String) {
        do {
            _ = try TokenSet.parse(lines: text, source: "tokens")
            Issue.record("parsed \(text)")
        } catch {
            #expect(error.description == message)
        }
    }

    @Test func windowsLineEndsAreLineEnds() throws {
        let set = try TokenSet.parse(lines: "\(Self.rw)\r\nro:\(Self.ro)\r\n", source: "t")
        #expect(set.count == 2 && set.role(of: Self.ro) == .readOnly)
    }

    @Test func refusedEntriesSayWhere() {
        do {
            _ = try TokenSet.parse(lines: "# first\n\nshort", source: "/etc/gattway/tokens")
            Issue.record("parsed a short token")
        } catch {
            #expect(error.description == "/etc/gattway/tokens:3: a token has 16 to 512 characters, this one 5")
        }
    }

    @Test func environmentListAndMerge() throws {
        let list = try TokenSet.parse(list: "\(Self.rw), ro:\(Self.ro)", source: "GATTWAY_TOKENS")
        #expect(list.count == 2 && list.readOnlyCount == 1)
        let file = try TokenSet.parse(lines: "yet-another-token-0123", source: "f")
        #expect(try list.merged(with: file, source: "f").count == 3)
        #expect(throws: TokenError.self) { try list.merged(with: list, source: "f") }
    }

    @Test(arguments: [
        (rw + "x", false), (String(rw.dropLast()), false), ("", false), (rw.uppercased(), false), (rw, true),
    ])
    func onlyTheWholeTokenMatches(candidate: String, matches: Bool) throws {
        let set = try TokenSet.parse(lines: Self.rw, source: "t")
        #expect((set.role(of: candidate) != nil) == matches)
    }

    @Test func constantTimeEqualityIsEquality() {
        #expect(TokenSet.constantTimeEqual(Array("abc".utf8), Array("abc".utf8)))
        #expect(!TokenSet.constantTimeEqual(Array("abc".utf8), Array("abd".utf8)))
        #expect(!TokenSet.constantTimeEqual(Array("abc".utf8), Array("abc\0".utf8)))
        #expect(!TokenSet.constantTimeEqual([], Array("a".utf8)))
        #expect(TokenSet.constantTimeEqual([], []))
    }
}
