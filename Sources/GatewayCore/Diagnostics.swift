import BLE
import FoundationEssentials
import Glibc
import Synchronization
import Threading

/// Notifications the central started again, and those it could not within its deadline.
package final class ResubscriptionCounters: Sendable {
    package let restored = Atomic<Int>(0)
    package let failed = Atomic<Int>(0)
}

/// What stream clients were given and lost, summed over every client (for the doors' metrics).
package final class DeliveryCounters: Sendable {
    package let delivered = Atomic<Int>(0)
    package let dropped = Atomic<Int>(0)
}

/// The last errors, newest last, at most `limit` of them: what failed, on
/// which device, with the CoreBluetooth error and BlueZ's own words.
package final class ErrorLog: Sendable {
    package struct Entry: Encodable, Sendable {
        var time: Date
        var device: String?
        /// The request, as the door that took it names it, or what happened ("link").
        var operation: String
        var error: ErrorBody.Content
        /// BlueZ's or D-Bus's error, as it said it.
        var detail: String?
    }

    package let limit: Int
    private let state = Mutex<(entries: [Entry], total: Int)>(([], 0))

    package init(limit: Int = 256) { self.limit = limit }

    package func record(_ error: BLEError, operation: String, device: BluetoothAddress?) {
        let entry = Entry(time: Date(), device: device?.description, operation: operation, error: ErrorBody(error).error, detail: error.detail)
        state.withLock { s in
            s.entries.append(entry)
            if s.entries.count > limit { s.entries.removeFirst(s.entries.count - limit) }
            s.total += 1
        }
    }

    package var entries: [Entry] { state.withLock { $0.entries } }
    package var total: Int { state.withLock { $0.total } }
    /// Errors by CoreBluetooth code name, over the whole run.
    private let byName = Mutex<[String: Int]>([:])

    package func count(_ error: BLEError) { byName.withLock { $0["\(error.domain.rawValue) \(error.name)", default: 0] += 1 } }
    package var counts: [String: Int] { byName.withLock { $0 } }
}

/// The Prometheus text format (version 0.0.4).
package enum Prometheus {
    package static func head(_ out: inout String, _ name: String, _ help: String, _ type: String) {
        out += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
    }

    package static func number(_ value: Double) -> String {
        if value == value.rounded(), abs(value) < 1e15 { return String(Int(value)) }
        return "\(value)"
    }

    package static func escape(_ label: String) -> String {
        var out = ""
        for c in label {
            switch c {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            default: out.append(c)
            }
        }
        return out
    }

    package static func sample(_ out: inout String, _ name: String, _ labels: [(String, String)], _ value: Double) {
        let text = labels.isEmpty ? "" : "{" + labels.map { "\($0.0)=\"\(escape($0.1))\"" }.joined(separator: ",") + "}"
        out += "\(name)\(text) \(number(value))\n"
    }
}

