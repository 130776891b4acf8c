import FoundationEssentials

/// A JSON document as nested dictionaries, arrays and scalars, for tests that look inside answers.
package enum JSONSerializationLite {
    package static func object(_ bytes: [UInt8]) throws -> [String: Any] {
        try (JSONDecoder().decode(Tree.self, from: Data(bytes)).value as? [String: Any]) ?? [:]
    }
    package struct Tree: Decodable {
        package let value: Any
        package init(from decoder: Decoder) throws {
            let c = try decoder.singleValueContainer()
            if c.decodeNil() { value = NSNullLite() }
            else if let b = try? c.decode(Bool.self) { value = b }
            else if let i = try? c.decode(Int.self) { value = i }
            else if let d = try? c.decode(Double.self) { value = d }
            else if let s = try? c.decode(String.self) { value = s }
            else if let a = try? c.decode([Tree].self) { value = a.map(\.value) }
            else { value = try c.decode([String: Tree].self).mapValues(\.value) }
        }
    }
    package struct NSNullLite {}
}
