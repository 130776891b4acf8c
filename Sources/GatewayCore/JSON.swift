import BLE
import FoundationEssentials

/// JSON in and out: compact, sorted output (indented on request, for people); strict input
/// (unknown keys are refused, so a typo such as "service" for "services" is an error, not a
/// silent no-op).
package enum JSON {
    /// How a body is laid out for a client.
    package enum Layout {
        /// One line, keys sorted: what programs read, and what a device list keeps.
        case compact
        /// Indented, keys sorted: for people, who ask for it.
        case pretty

        fileprivate var formatting: JSONEncoder.OutputFormatting {
            switch self {
            case .compact: [.sortedKeys, .withoutEscapingSlashes]
            case .pretty: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            }
        }
    }

    /// A body, ending with a newline (so that a terminal's output ends its line).
    package static func encode<T: Encodable>(_ value: T, _ layout: Layout = .compact) -> [UInt8] {
        encode(value, formatting: layout.formatting) + [UInt8(ascii: "\n")]
    }

    /// One line without the newline, for stream events (their framing ends them).
    package static func encodeCompact<T: Encodable>(_ value: T) -> [UInt8] {
        encode(value, formatting: Layout.compact.formatting)
    }

    private static func encode<T: Encodable>(_ value: T, formatting: JSONEncoder.OutputFormatting) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = formatting
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(Timestamp.iso8601(date))
        }
        guard let data = try? encoder.encode(value) else { return Array(#"{"error":"encoding failed"}"#.utf8) }
        return Array(data)
    }

    /// Decodes a request body; an empty body decodes as `{}`.
    package static func decode<T: StrictDecodable>(_ type: T.Type, from body: [UInt8]) throws(BLEError) -> T {
        let data = body.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) ? Data("{}".utf8) : Data(body)
        do {
            try checkKeys(T.self, in: try JSONDecoder().decode(AnyJSON.self, from: data), path: "")
        } catch let error as BLEError {
            throw error
        } catch let error as DecodingError {
            throw BLEError(.invalidParameters, describe(error))
        } catch {
            throw BLEError(.invalidParameters, "the body is not valid JSON")
        }
        do {
            return try JSONDecoder().decode(T.self, from: data)
        } catch let error as DecodingError {
            // The body is JSON (it parsed above): what does not decode is a value, such as a
            // number that does not fit its field (1.5 where a whole number goes).
            if case .dataCorrupted(let context) = error, context.codingPath.isEmpty {
                throw BLEError(.invalidParameters, "a value does not fit its field: \(context.debugDescription)")
            }
            throw BLEError(.invalidParameters, describe(error))
        } catch {
            throw BLEError(.invalidParameters, "\(error)")
        }
    }

    /// A JSON array of `T` objects (a configuration file), each checked as `decode` checks a body.
    package static func decodeArray<T: StrictDecodable>(_ type: T.Type, from bytes: [UInt8]) throws(BLEError) -> [T] {
        let data = Data(bytes)
        do {
            guard case .array(let items) = try JSONDecoder().decode(AnyJSON.self, from: data) else {
                throw BLEError(.invalidParameters, "it must be a JSON array of objects")
            }
            for (i, item) in items.enumerated() { try checkKeys(T.self, in: item, path: "[\(i)].") }
            return try JSONDecoder().decode([T].self, from: data)
        } catch let error as BLEError {
            throw error
        } catch DecodingError.dataCorrupted(let context) where context.codingPath.isEmpty {
            throw BLEError(.invalidParameters, "it is not valid JSON")
        } catch let error as DecodingError {
            throw BLEError(.invalidParameters, describe(error))
        } catch {
            throw BLEError(.invalidParameters, "it is not valid JSON")
        }
    }

    /// Every member of `json` must be one of `T`'s coding keys, and every nested object one of
    /// its nested type's, down the tree.
    private static func checkKeys<T: StrictDecodable>(_ type: T.Type, in json: AnyJSON, path: String) throws(BLEError) {
        guard case .object(let members) = json else {
            throw BLEError(.invalidParameters, "\(path.isEmpty ? "the body" : String(path.dropLast())) must be a JSON object")
        }
        for (name, value) in members {
            guard let key = T.CodingKeys(stringValue: name) else {
                let known = T.CodingKeys.allCases.map(\.stringValue).sorted().joined(separator: ", ")
                throw BLEError(.invalidParameters, "unknown field \"\(path)\(name)\"; known fields: \(known)")
            }
            guard let nested = T.nested[key] else { continue }
            if case .array(let items) = value {
                for (i, item) in items.enumerated() { try checkKeys(nested, in: item, path: "\(path)\(name)[\(i)].") }
            } else {
                try checkKeys(nested, in: value, path: "\(path)\(name).")
            }
        }
    }

    private static func describe(_ error: DecodingError) -> String {
        func where_(_ path: [CodingKey]) -> String {
            let p = path.map { $0.intValue.map { "[\($0)]" } ?? ".\($0.stringValue)" }.joined()
            return p.isEmpty ? "the body" : "field \"\(p.hasPrefix(".") ? String(p.dropFirst()) : p)\""
        }
        switch error {
        case .typeMismatch(let type, let context): return "\(where_(context.codingPath)) must be of type \(type)"
        case .valueNotFound(_, let context): return "\(where_(context.codingPath)) must not be null"
        case .keyNotFound(let key, let context): return "\(where_(context.codingPath + [key])) is required"
        case .dataCorrupted(let context):
            return context.codingPath.isEmpty ? "the body is not valid JSON" : "\(where_(context.codingPath)): \(context.debugDescription)"
        @unknown default: return "the body is not valid JSON"
        }
    }
}

/// A request body that names only its own fields. The accepted names are the cases of its
/// `CodingKeys`, the same enum the compiler synthesises `init(from:)` over, so no field name is
/// written twice.
package protocol StrictDecodable: Decodable {
    associatedtype CodingKeys: CodingKey & CaseIterable & Hashable
    /// The fields whose value is an object, or an array of objects, and the type each object
    /// decodes as; its members are checked the same way.
    static var nested: [CodingKeys: any StrictDecodable.Type] { get }
}

extension StrictDecodable {
    package static var nested: [CodingKeys: any StrictDecodable.Type] { [:] }
}

/// Any JSON value, to look at a body's shape before decoding it.
package enum AnyJSON: Decodable {
    case object([String: AnyJSON])
    case array([AnyJSON])
    case other

    package init(from decoder: Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let object = try? container.decode([String: AnyJSON].self) { self = .object(object) }
        else if let array = try? container.decode([AnyJSON].self) { self = .array(array) }
        else if container.decodeNil() || (try? container.decode(Bool.self)) != nil || (try? container.decode(Double.self)) != nil
                    || (try? container.decode(String.self)) != nil { self = .other }
        else { throw DecodingError.dataCorruptedError(in: container, debugDescription: "not JSON") }
    }
}
