/// A line of a configuration file (a blocklist, sensor keys) that cannot be read.
public struct LineError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The file's name, or what else the text came from ("default").
    public var source: String
    /// 1-based.
    public var line: Int
    public var message: String

    public init(source: String, line: Int, message: String) {
        self.source = source
        self.line = line
        self.message = message
    }

    /// "blocklist.txt:3: message", as compilers point at a line.
    public var description: String { "\(source):\(line): \(message)" }
}

/// The lines of a configuration file that say something, split into words at spaces and tabs:
/// `#` starts a comment, blank lines are skipped; each comes with its 1-based line number.
public func configurationLines(_ text: String) -> [(line: Int, words: [Substring])] {
    // By `isNewline`: "\r\n" is one Character, which a split at "\n" would not cut.
    text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated().compactMap { index, rawLine in
        let words = rawLine.prefix { $0 != "#" }.split(whereSeparator: { $0 == " " || $0 == "\t" })
        return words.isEmpty ? nil : (index + 1, words)
    }
}
