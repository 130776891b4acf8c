import BLE
import FoundationEssentials

/// A stream event encoded once and shared by every client that wants it.
///
/// `open` is the JSON object without its closing brace; each client appends its own fields
/// (`sequence`, `subscription`) and the brace, so that 1 000 clients of one notification cost
/// one encoding, not 1 000.
package struct EventEncodings {
    package let event: HubEvent
    /// By format: a slot each rather than a dictionary, which hashed the format's name for
    /// every delivery.
    private var hex, base64, utf8: [UInt8]?
    /// What each framing writes before the event, by framing (one or two kinds: a short list).
    private var heads: [(framing: ObjectIdentifier, bytes: [UInt8])] = []
    private let fragments: AttributeFragments?

    /// - Parameter fragments: the fan-out thread's cache of each characteristic's JSON.
    package init(_ event: HubEvent, fragments: AttributeFragments? = nil) {
        self.event = event
        self.fragments = fragments
    }

    /// The shared part of the event's JSON in `format` (which only notifications depend on).
    package mutating func open(_ format: ValueFormat) -> [UInt8] {
        let key: ValueFormat = switch event.event {
        case .central(.value), .peripheral: format
        default: .hex
        }
        if let cached = self[key] { return cached }
        let encoded = Self.encode(event, format: key, fragments: fragments)
        self[key] = encoded
        return encoded
    }

    private subscript(format: ValueFormat) -> [UInt8]? {
        get {
            switch format {
            case .hex: hex
            case .base64: base64
            case .utf8: utf8
            }
        }
        set {
            switch format {
            case .hex: hex = newValue
            case .base64: base64 = newValue
            case .utf8: utf8 = newValue
            }
        }
    }

    /// What `framing` writes before the event's JSON, made once for every client of that kind.
    package mutating func head(_ framing: any EventFraming.Type) -> [UInt8] {
        let key = ObjectIdentifier(framing)
        for head in heads where head.framing == key { return head.bytes }
        let bytes = framing.head(event)
        heads.append((key, bytes))
        return bytes
    }

    /// The whole JSON object: the shared part, then a client's own fields.
    package static func close(_ open: [UInt8], sequence: UInt64?, subscription: String?) -> [UInt8] {
        ClientEvent(head: [], open: open, sequence: sequence,
                    subscription: subscription.map(ClientEvent.subscriptionField) ?? [], tail: []).bytes
    }

    /// Notifications, the hot path, are written by hand; the rarer events go through their
    /// `EventBody` (the same fields either way).
    private static func encode(_ event: HubEvent, format: ValueFormat, fragments: AttributeFragments?) -> [UInt8] {
        guard case .central(.value(let v)) = event.event else {
            var bytes = JSON.encodeCompact(EventBody(event, format: format, subscription: nil, sequence: nil))
            if bytes.last == UInt8(ascii: "}") { bytes.removeLast() }
            return bytes
        }
        var w = JSONWriter(reserving: 256 + v.value.count * 2)
        w.raw(#"{"type":"notification","seq":"#)
        w.number(event.seq)
        w.raw(#","time":"#)
        w.string(Timestamp.iso8601(event.time))
        w.append(fragments?.fragment(v) ?? AttributeFragments.encode(v))
        w.raw(#","value":"#)
        w.string(format.encode(v.value))
        w.raw(#","format":"#)
        w.string(format.rawValue)
        return w.bytes
    }
}

/// Each characteristic's part of a notification's JSON (device, service, characteristic), made
/// once: a notification then costs little more than its value. Used by the fan-out thread only.
package final class AttributeFragments {
    private struct Key: Hashable {
        var device: BluetoothAddress
        var service: UInt16
        var characteristic: UInt16
    }
    private var fragments: [Key: (ValueUpdate, [UInt8])] = [:]
    /// Past this many characteristics the cache starts again.
    package static let limit = 4096

    package func fragment(_ v: ValueUpdate) -> [UInt8] {
        let key = Key(device: v.device, service: v.serviceHandle, characteristic: v.characteristicHandle)
        if let (source, bytes) = fragments[key], source.serviceUUID == v.serviceUUID, source.characteristicUUID == v.characteristicUUID {
            return bytes
        }
        if fragments.count >= Self.limit { fragments.removeAll() }
        let bytes = Self.encode(v)
        var source = v
        source.value = []
        fragments[key] = (source, bytes)
        return bytes
    }

    /// `,"device":…,"service":{…},"characteristic":{…}`
    package static func encode(_ v: ValueUpdate) -> [UInt8] {
        var w = JSONWriter(reserving: 192)
        w.raw(#","device":"#)
        w.string(v.device.description)
        w.raw(#","service":{"handle":"#)
        w.string(handleText(v.serviceHandle))
        w.raw(#","uuid":"#)
        w.string(v.serviceUUID.uuidString)
        w.raw(#"},"characteristic":{"handle":"#)
        w.string(handleText(v.characteristicHandle))
        w.raw(#","uuid":"#)
        w.string(v.characteristicUUID.uuidString)
        w.raw("}")
        return w.bytes
    }
}

/// Appends JSON tokens to a byte buffer.
package struct JSONWriter {
    private(set) var bytes: [UInt8]

    package init(reserving capacity: Int) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    package init(_ start: [UInt8], reserving extra: Int) {
        bytes = []
        bytes.reserveCapacity(start.count + extra)
        bytes += start
    }

    /// Text that is already JSON.
    package mutating func raw(_ text: StaticString) {
        text.withUTF8Buffer { bytes += $0 }
    }

    /// Bytes that are already JSON.
    package mutating func append(_ json: [UInt8]) {
        bytes += json
    }

    package mutating func number(_ n: UInt64) {
        Self.appendNumber(n, to: &bytes)
    }

    package static func appendNumber(_ n: UInt64, to bytes: inout [UInt8]) {
        guard n > 0 else { bytes.append(UInt8(ascii: "0")); return }
        var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                     UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
            (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        var count = 0
        var rest = n
        withUnsafeMutableBytes(of: &digits) { buffer in
            while rest > 0 {
                buffer[19 - count] = UInt8(ascii: "0") + UInt8(rest % 10)
                rest /= 10
                count += 1
            }
            bytes.append(contentsOf: UnsafeRawBufferPointer(rebasing: buffer[(20 - count)...]))
        }
    }

    /// A JSON string, escaped as RFC 8259 requires.
    package mutating func string(_ text: String) {
        bytes.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): bytes += [UInt8(ascii: "\\"), UInt8(ascii: "\"")]
            case UInt8(ascii: "\\"): bytes += [UInt8(ascii: "\\"), UInt8(ascii: "\\")]
            case 0x0A: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "n")]
            case 0x0D: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "r")]
            case 0x09: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "t")]
            case ..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                bytes += [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"),
                          hex[Int(byte >> 4)], hex[Int(byte & 0xF)]]
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }
}

/// Times as the API writes them: ISO 8601 in UTC with milliseconds, "2026-12-01T20:09:56.716Z".
/// Computed directly (days → civil date), about a hundred times cheaper than a format style.
public enum Timestamp {
    public static func iso8601(_ date: Date) -> String {
        // From the reference date, as Foundation counts, so that the milliseconds truncate alike.
        let interval = date.timeIntervalSinceReferenceDate
        let whole = interval.rounded(.down)
        let fraction = min(999, max(0, Int64(((interval - whole) * 1000).rounded(.down))))
        let milliseconds = (Int64(whole) + 978_307_200) * 1000 + fraction
        let (days, msOfDay) = milliseconds.quotientAndRemainder(dividingBy: 86_400_000)
        let (d, ms) = msOfDay < 0 ? (days - 1, msOfDay + 86_400_000) : (days, msOfDay)
        // Howard Hinnant's civil_from_days.
        let z = d + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yoe + era * 400 + (month <= 2 ? 1 : 0)
        var out: [UInt8] = []
        out.reserveCapacity(24)
        func digits(_ value: Int64, _ width: Int) {
            var divisor: Int64 = 1
            for _ in 1..<width { divisor *= 10 }
            var v = value
            while divisor > 0 {
                out.append(UInt8(ascii: "0") + UInt8(v / divisor % 10))
                v %= divisor
                divisor /= 10
            }
        }
        digits(year, 4); out.append(UInt8(ascii: "-"))
        digits(month, 2); out.append(UInt8(ascii: "-"))
        digits(day, 2); out.append(UInt8(ascii: "T"))
        digits(ms / 3_600_000, 2); out.append(UInt8(ascii: ":"))
        digits(ms / 60_000 % 60, 2); out.append(UInt8(ascii: ":"))
        digits(ms / 1000 % 60, 2); out.append(UInt8(ascii: "."))
        digits(ms % 1000, 3); out.append(UInt8(ascii: "Z"))
        return String(decoding: out, as: UTF8.self)
    }
}

/// One event as a client receives it: its transport's framing around the shared JSON and the
/// client's own fields, written where it goes without an intermediate copy.
package struct ClientEvent {
    package let head: [UInt8]
    package let open: [UInt8]
    package let sequence: UInt64?
    package let subscription: [UInt8]
    package let tail: [UInt8]

    /// A literal, not an array: no lazy global and no reference count touched per delivery.
    private static let sequenceKey: StaticString = #","sequence":"#

    /// `,"subscription":"<name>"`, as a subscription's events carry it.
    package static func subscriptionField(_ name: String) -> [UInt8] {
        var writer = JSONWriter(reserving: 24 + name.utf8.count)
        writer.raw(#","subscription":"#)
        writer.string(name)
        return writer.bytes
    }

    package var count: Int {
        var count = head.count + open.count + subscription.count + 1 + tail.count
        if let sequence { count += Self.sequenceKey.utf8CodeUnitCount + Self.digits(sequence) }
        return count
    }

    /// Runs once per delivery: empty parts (no framing, an unnamed subscription) are skipped
    /// rather than appended.
    package func write(into bytes: inout [UInt8]) {
        if !head.isEmpty { bytes += head }
        bytes += open
        if let sequence {
            bytes.append(contentsOf: UnsafeRawBufferPointer(start: Self.sequenceKey.utf8Start,
                                                            count: Self.sequenceKey.utf8CodeUnitCount))
            JSONWriter.appendNumber(sequence, to: &bytes)
        }
        if !subscription.isEmpty { bytes += subscription }
        bytes.append(UInt8(ascii: "}"))
        if !tail.isEmpty { bytes += tail }
    }

    package var bytes: [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count)
        write(into: &bytes)
        return bytes
    }

    private static func digits(_ n: UInt64) -> Int {
        var count = 1
        var rest = n / 10
        while rest > 0 { count += 1; rest /= 10 }
        return count
    }
}
