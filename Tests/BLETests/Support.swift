import FoundationEssentials
import Testing

/// Decodes `string` as a JSON string into `T`, expects `DecodingError.dataCorrupted`, returns its text.
func dataCorruptedMessage<T: Decodable>(decoding _: T.Type, fromJSONString string: String) throws -> String {
    let error = #expect(throws: DecodingError.self) {
        try JSONDecoder().decode(T.self, from: Data("\"\(string)\"".utf8))
    }
    guard case .dataCorrupted(let context) = try #require(error) else {
        Issue.record("expected dataCorrupted, got \(String(describing: error))")
        return ""
    }
    return context.debugDescription
}
