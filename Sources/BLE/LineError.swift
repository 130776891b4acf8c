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
