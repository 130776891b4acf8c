/// One of gattway's options, described once. From the table of them (`Options.table`) come the
/// command line, the configuration file (`--config`: a line is the flag without its dashes),
/// the environment (`GATTWAY_*`) and `--help`.
package struct Option: Sendable {
    /// How the option takes its value.
    package enum Value: Sendable, Equatable {
        /// None: a switch (`--no-auth`); in the environment 1, true or yes switches it on.
        case none
        /// One, named in the help (`--listen HOST:PORT`).
        case required(String)
        /// One or none (`--simulate [FILE]`): the next argument unless it starts with `--`. In
        /// the environment, the word `absent` stands for none ("builtin").
        case optional(String, absent: String)
    }

    /// What the option does.
    package enum Action: Sendable {
        /// Sets options from its value (nil: a switch, or an optional value not given); `source`
        /// is how it was given (`--listen`, `GATTWAY_LISTEN`), for messages.
        case set(@Sendable (_ options: inout Options, _ value: String?, _ source: String) throws(UsageError) -> Void)
        /// Prints the help or the version and ends; `--config` reads a file of options. None of
        /// them belongs in a configuration file.
        case help, version, config
    }

    /// Its spellings on the command line, the first the one the help and the configuration file
    /// use; none for an option of the environment only (`GATTWAY_TOKENS`).
    package let flags: [String]
    package let value: Value
    /// Whether each use adds to the others (`--blocklist`); in the environment a comma-separated list.
    package let repeatable: Bool
    /// The environment variable that gives it, if one does.
    package let environment: String?
    /// What it does, one paragraph (`--help` wraps it).
    package let help: String
    package let action: Action

    package init(_ flags: [String], value: Value = .none, repeatable: Bool = false, environment: String? = nil,
                 _ help: String, _ action: Action) {
        self.flags = flags
        self.value = value
        self.repeatable = repeatable
        self.environment = environment
        self.help = help
        self.action = action
    }

    /// A switch: `--auto-reconnect`.
    package static func flag(_ flag: String, environment: String? = nil, _ help: String,
                              _ set: @escaping @Sendable (inout Options) -> Void) -> Option {
        Option([flag], environment: environment, help, .set { options, _, _ in set(&options) })
    }

    /// An option with a value: `--listen HOST:PORT`; nil for `flag`: one of the environment only.
    package static func value(_ flag: String?, _ name: String, repeatable: Bool = false, environment: String? = nil, _ help: String,
                              _ set: @escaping @Sendable (inout Options, String, String) throws(UsageError) -> Void) -> Option {
        Option(flag.map { [$0] } ?? [], value: .required(name), repeatable: repeatable, environment: environment, help,
               .set { options, value, source throws(UsageError) in try set(&options, value ?? "", source) })
    }

    /// The name the help and the configuration file use: `--listen`, or the variable's.
    package var name: String { flags.first ?? environment ?? "" }

    /// `--listen HOST:PORT`, `--simulate [FILE]`, `--no-auth`: as the help's left column shows it.
    package var synopsis: String {
        let spelled = flags.reversed().joined(separator: ", ")
        switch value {
        case .none: return spelled
        case .required(let name): return spelled + " " + name
        case .optional(let name, _): return spelled + " [\(name)]"
        }
    }
}

/// A mistake in the options: what gattway says before it stops (exit 2).
package struct UsageError: Error, Equatable, CustomStringConvertible {
    package let message: String
    package init(_ message: String) { self.message = message }
    package var description: String { message }
}

// MARK: - Values

/// The parsers the table's options share; each error names the option as it was given.
package enum Parse {
    /// A number that `valid` accepts; otherwise "`source` `takes`".
    package static func number<N: LosslessStringConvertible>(_ text: String, _ source: String, _ valid: (N) -> Bool,
                                                             _ takes: String) throws(UsageError) -> N {
        guard let n = N(text), valid(n) else { throw UsageError("\(source) \(takes)") }
        return n
    }

    /// A whole number in `range`: "takes a number from 1 to 1000000".
    package static func count(_ text: String, _ source: String, _ range: ClosedRange<Int>) throws(UsageError) -> Int {
        try number(text, source, range.contains, "takes a number from \(range.lowerBound) to \(range.upperBound)")
    }

    /// Something that may not be empty: a file's name.
    package static func nonEmpty(_ text: String, _ source: String, _ what: String) throws(UsageError) -> String {
        guard !text.isEmpty else { throw UsageError("\(source) takes \(what)") }
        return text
    }

    /// "HOST:PORT" or, with `host` nil, "PORT"; an IPv6 host in brackets ("[::1]:6053").
    package static func hostAndPort(_ text: String) -> (host: String?, port: UInt16)? {
        guard let colon = text.lastIndex(of: ":") else { return UInt16(text).map { (nil, $0) } }
        guard let port = UInt16(text[text.index(after: colon)...]) else { return nil }
        var host = String(text[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return (host, port)
    }

    /// What an environment variable that is a switch says: on for 1, true or yes.
    package static func isOn(_ text: String) -> Bool { ["1", "true", "yes"].contains(text.lowercased()) }
}
