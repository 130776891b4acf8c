import Testing
@testable import Launch

/// `--help` is made from the option table: what one says, the other has.
@Suite struct HelpTests {
    static let help = Options.usage(version: "9.9")
    static let lines = help.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)

    /// The options' entries: a line that starts with two spaces and a dash.
    static var entries: [String] { lines.filter { $0.hasPrefix("  -") } }

    @Test func everyFlagOfTheTableHasItsEntry() {
        for option in Options.all where !option.flags.isEmpty {
            #expect(Self.entries.contains { $0 == "  " + option.synopsis || $0.hasPrefix("  " + option.synopsis + " ") },
                    "\(option.synopsis) has no entry in --help")
        }
    }

    @Test func everyEntryOfTheHelpIsAFlagOfTheTable() {
        let synopses = Set(Options.all.filter { !$0.flags.isEmpty }.map(\.synopsis))
        for entry in Self.entries {
            #expect(synopses.contains { entry == "  " + $0 || entry.hasPrefix("  " + $0 + " ") }, "\(entry) is not in the table")
        }
        #expect(Self.entries.count == synopses.count)
    }

    @Test func everyVariableOfTheTableIsInTheHelpAndNoOther() {
        let table = Set(Options.all.compactMap(\.environment))
        let words = Self.help.split { !($0.isLetter || $0 == "_") }.map(String.init)
        #expect(Set(words.filter { $0.hasPrefix("GATTWAY_") }) == table)
        #expect(table.count == 19)
    }

    @Test func eachOptionIsDescribed() {
        for option in Options.all {
            #expect(!option.help.isEmpty && !option.help.contains("\n"), "\(option.name)")
            let opening = option.help.split(separator: " ").prefix(3).joined(separator: " ")
            #expect(Self.help.contains(opening), "\(option.name)'s help is not in --help")
        }
    }

    @Test func flagsAndVariablesAreNamedOnce() {
        let flags = Options.all.flatMap(\.flags)
        #expect(Set(flags).count == flags.count)
        let variables = Options.all.compactMap(\.environment)
        #expect(Set(variables).count == variables.count)
        #expect(variables.allSatisfy { $0.hasPrefix("GATTWAY_") })
    }

    @Test func linesFitInNinetyFiveColumns() {
        for line in Self.lines { #expect(line.count <= Help.width, "\(line)") }
    }

    @Test func wrapping() {
        #expect(Help.wrap("one two three", indent: 2) == ["  one two three"])
        #expect(Help.entry("--x N", "short", column: 10) == ["  --x N   short"])
        #expect(Help.entry("--a-long-flag N", "short", column: 10) == ["  --a-long-flag N", "          short"])
        let long = Help.wrap(String(repeating: "word ", count: 40), indent: 4)
        #expect(long.count > 1 && long.allSatisfy { $0.count <= Help.width && $0.hasPrefix("    word") })
    }
}
