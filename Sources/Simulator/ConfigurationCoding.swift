import BLE
import FoundationEssentials

/// Why a simulator configuration was refused, with the JSON location ("devices[1].services[0].uuid").
public struct ConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }

    /// A readable message for a decoding failure: where in the document, and what was wrong.
    static func describe(_ error: DecodingError) -> ConfigurationError {
        switch error {
        case .keyNotFound(let key, let context):
            return ConfigurationError("\(render(context.codingPath + [key])): required key is missing")
        case .typeMismatch(let type, let context):
            return ConfigurationError("\(render(context.codingPath)): expected \(typeName(type))")
        case .valueNotFound(let type, let context):
            return ConfigurationError("\(render(context.codingPath)): expected \(typeName(type)), found null")
        case .dataCorrupted(let context):
            if context.codingPath.isEmpty {
                return ConfigurationError("not valid JSON" + (context.underlyingError.map { ": \($0)" } ?? ""))
            }
            return ConfigurationError("\(render(context.codingPath)): \(context.debugDescription)")
        @unknown default:
            return ConfigurationError("\(error)")
        }
    }

    /// "devices[0].services[1].uuid"; "the document" for the top level.
    static func render(_ path: [any CodingKey]) -> String {
        var out = ""
        for key in path {
            if let index = key.intValue { out += "[\(index)]" } else { out += out.isEmpty ? key.stringValue : "." + key.stringValue }
        }
        return out.isEmpty ? "the document" : out
    }

    private static func typeName(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: "a string"
        case is Bool.Type: "true or false"
        case is Int.Type, is Int16.Type, is UInt16.Type, is UInt8.Type: "a number"
        case is [Any].Type: "an array"
        default: "an object"
        }
    }
}

extension SimulatorConfiguration {
    /// Decodes JSON (a file, or a piece given to a control method), with readable messages.
    static func decodeJSON<T: Decodable>(_ data: Data) throws(ConfigurationError) -> T {
        do {
            return try JSONDecoder().decode(T.self, from: data)
        } catch let error as DecodingError {
            throw ConfigurationError.describe(error)
        } catch {
            throw ConfigurationError("not valid JSON: \(error)")
        }
    }
}

/// Any JSON object key, to find keys the configuration does not know (a typo would
/// otherwise be ignored silently).
struct AnyKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}

extension Decoder {
    /// Refuses keys that `Keys` does not list.
    func rejectUnknownKeys<Keys: CodingKey & CaseIterable>(_ keys: Keys.Type) throws {
        let known = Keys.allCases.map(\.stringValue)
        let container = try self.container(keyedBy: AnyKey.self)
        for key in container.allKeys where !known.contains(key.stringValue) {
            throw DecodingError.dataCorrupted(.init(
                codingPath: container.codingPath + [key],
                debugDescription: "unknown key (known keys: \(known.joined(separator: ", ")))"))
        }
    }
}

/// Bytes written as hex in JSON ("0601", "06 01", "0x0601"); encoded as plain lowercase hex.
public struct HexBytes: Codable, Sendable, Hashable, ExpressibleByArrayLiteral {
    public var bytes: [UInt8]
    public init(_ bytes: [UInt8]) { self.bytes = bytes }
    public init(arrayLiteral elements: UInt8...) { bytes = elements }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        do {
            bytes = try ValueFormat.hex.decode(text)
        } catch {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: error.message))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(ValueFormat.hex.encode(bytes))
    }
}

/// Small helpers for `init(from:)` with defaults and range checks.
extension KeyedDecodingContainer {
    func decode<T: Decodable>(_ key: Key, default value: T) throws -> T {
        try decodeIfPresent(T.self, forKey: key) ?? value
    }

    /// An integer within `range`, or `value` when absent.
    func decodeInt(_ key: Key, default value: Int?, in range: ClosedRange<Int>) throws -> Int? {
        guard let n = try decodeIfPresent(Int.self, forKey: key) else { return value }
        guard range.contains(n) else {
            throw DecodingError.dataCorruptedError(forKey: key, in: self,
                                                   debugDescription: "\(n) is out of range \(range.lowerBound)...\(range.upperBound)")
        }
        return n
    }

    /// A number, or a string holding a decimal or 0x-prefixed hex number (company ids, ATT codes).
    func decodeFlexibleInt(_ key: Key) throws -> Int? {
        guard contains(key) else { return nil }
        if let n = try? decode(Int.self, forKey: key) { return n }
        let text = try decode(String.self, forKey: key)
        guard let n = parseFlexibleInt(text) else {
            throw DecodingError.dataCorruptedError(forKey: key, in: self,
                                                   debugDescription: "\"\(text)\" is not a number (decimal or 0x hex)")
        }
        return n
    }
}

/// "76", "0x004C", "0X4c" → Int.
func parseFlexibleInt(_ text: String) -> Int? {
    if text.hasPrefix("0x") || text.hasPrefix("0X") { return Int(text.dropFirst(2), radix: 16) }
    return Int(text)
}
