import FoundationEssentials
import GatewayCore
import Glibc

/// How much a log line matters, as syslog numbers it (the journal's `<N>` line prefixes,
/// sd-daemon(3)).
enum Priority: Int {
    case error = 3
    case warning = 4
    case info = 6
}

enum Log {
    /// Whether stderr is the journal's stream: systemd then sets JOURNAL_STREAM to the stream's
    /// `device:inode`, which must be fd 2's (a service may hand stderr elsewhere, and a child
    /// inherits the variable). There each line starts with its priority, `<6>`, and carries no
    /// time: the journal stamps every line itself.
    static let toJournal: Bool = {
        guard let value = getenv("JOURNAL_STREAM").map({ String(cString: $0) }) else { return false }
        let parts = value.split(separator: ":")
        var status = stat()
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]), fstat(2, &status) == 0 else {
            return false
        }
        return UInt64(status.st_dev) == device && UInt64(status.st_ino) == inode
    }()

    /// `text` as it goes to stderr: on the journal, every line with the priority's prefix.
    static func lines(_ text: String, _ priority: Priority) -> String {
        guard toJournal else { return text }
        let prefix = "<\(priority.rawValue)>"
        return text.split(separator: "\n").map { prefix + $0 + "\n" }.joined()
    }
}

/// One line on stderr, with the time (on the journal, with its priority instead).
@Sendable func log(_ message: String, _ priority: Priority) {
    writeError(Log.toJournal ? message + "\n" : "\(Timestamp.iso8601(Date())) \(message)\n", priority)
}

/// One informational line: what every part of gattway is handed to log with.
@Sendable func log(_ message: String) { log(message, .info) }

/// Writes to stderr (fd 2) in one call, so lines from different threads do not interleave. On
/// the journal each line gets the priority's prefix: errors, by default, are what is written
/// without `log` (usage mistakes and files that stop gattway at start).
@Sendable func writeError(_ text: String, _ priority: Priority = .error) {
    var bytes = Array(Log.lines(text, priority).utf8)
    _ = bytes.withUnsafeMutableBytes { write(2, $0.baseAddress, $0.count) }
}
