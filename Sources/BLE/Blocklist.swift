/// GATT attributes that clients may not use, as Web Bluetooth keeps them from web pages: its
/// GATT blocklist, in the same file format.
///
/// One entry a line: a UUID (any form `BluetoothUUID` parses), alone or followed by
/// `exclude-reads` or `exclude-writes`. A UUID alone excludes everything: the attribute is left
/// out of discovery and refused when addressed. `#` starts a comment; blank lines are ignored.
/// What a service's or characteristic's entry excludes applies to the attributes within it.
/// A UUID listed more than once gets all its lines' exclusions.
public struct Blocklist: Sendable, Equatable {
    /// What an entry excludes.
    public struct Exclusions: OptionSet, Sendable, Hashable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }

        public static let reads = Self(rawValue: 1 << 0)
        public static let writes = Self(rawValue: 1 << 1)
        /// A UUID alone: hidden, and neither read nor written.
        public static let all: Self = [.reads, .writes]

        /// The words that may follow a UUID, and what each excludes.
        static let words: [(String, Exclusions)] = [("exclude-reads", .reads), ("exclude-writes", .writes)]
    }

    /// What a client does with an attribute. Notifications and indications count as reads.
    public enum Operation: Sendable, Hashable {
        /// Seeing it in a listing, or addressing it at all.
        case discovery
        case read
        case write

        /// The exclusions that forbid it.
        var forbiddenBy: Exclusions {
            switch self {
            case .discovery: .all
            case .read: .reads
            case .write: .writes
            }
        }
    }

    /// One UUID's exclusions, and the lines that set them ("default:12", "/etc/gattway/blocklist:3").
    public struct Entry: Sendable, Equatable {
        public var uuid: BluetoothUUID
        public var exclusions: Exclusions
        public var sources: [String]

        /// The entry as a file would say it, short: "2a25 exclude-reads", "1812".
        public var label: String {
            let uuid = uuid.shortForm ?? uuid.uuidString
            return Exclusions.words.first { $0.1 == exclusions }.map { "\(uuid) \($0.0)" } ?? uuid
        }
    }

    private var table: [BluetoothUUID: Entry] = [:]

    /// Nothing excluded.
    public init() {}

    /// Parses a blocklist file's text; `source` names it in entries and errors.
    public init(parsing text: String, source: String) throws(BlocklistError) {
        // By `isNewline`: "\r\n" is one Character, which a split at "\n" would not cut.
        for (index, rawLine) in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated() {
            let line = index + 1
            let content = rawLine.prefix { $0 != "#" }
            let words = content.split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard let first = words.first else { continue }
            guard let uuid = BluetoothUUID(String(first)) else {
                throw BlocklistError(source: source, line: line, message: "\"\(first)\" is not a UUID")
            }
            var exclusions = Exclusions.all
            if words.count > 1 {
                guard let (_, named) = Exclusions.words.first(where: { $0.0 == words[1] }) else {
                    throw BlocklistError(source: source, line: line,
                                         message: "after the UUID, only exclude-reads or exclude-writes may follow, not \"\(words[1])\"")
                }
                exclusions = named
            }
            guard words.count <= 2 else {
                throw BlocklistError(source: source, line: line, message: "unexpected \"\(words[2])\" after \(words[1])")
            }
            add(Entry(uuid: uuid, exclusions: exclusions, sources: ["\(source):\(line)"]))
        }
    }

    /// Adds `other`'s entries to these.
    public mutating func add(_ other: Blocklist) {
        for entry in other.table.values { add(entry) }
    }

    private mutating func add(_ entry: Entry) {
        table[entry.uuid, default: Entry(uuid: entry.uuid, exclusions: [], sources: [])].exclusions.formUnion(entry.exclusions)
        table[entry.uuid]!.sources += entry.sources
    }

    /// Every entry, in UUID order.
    public var entries: [Entry] { table.values.sorted { $0.uuid < $1.uuid } }

    /// The entry that forbids `operation` on an attribute, given the UUIDs from its service down to
    /// it (the attribute's own entry first, then its containers'), or nil when it is allowed.
    public func entry(forbidding operation: Operation, path: [BluetoothUUID]) -> Entry? {
        path.reversed().lazy.compactMap { table[$0] }.first { $0.exclusions.isSuperset(of: operation.forbiddenBy) }
    }
}

/// A blocklist line that is not an entry.
public typealias BlocklistError = LineError
