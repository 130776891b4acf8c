/// A route's path: segments that are literal or `{name}`; a `{name}` segment matches one
/// non-empty path segment (decoded, so it may contain `/` sent as `%2F`). Matching is exact: no
/// trailing-slash or case folding. The router dispatches by these, and access control uses them
/// to name the routes a rule applies to.
public struct PathPattern: Sendable, Hashable, CustomStringConvertible {
    enum Segment: Sendable, Hashable {
        case literal(String)
        case parameter(String)
    }

    let segments: [Segment]
    /// The pattern as written, e.g. `/v1/devices/{id}/serial`.
    public let description: String

    /// A malformed pattern is a programming error and traps.
    public init(_ pattern: String) {
        precondition(pattern.first == "/", "route pattern must start with /: \(pattern)")
        description = pattern
        segments = RequestTarget.split(pattern[...]).map { segment in
            if segment.first == "{" && segment.last == "}" && segment.count > 2 {
                let name = segment.dropFirst().dropLast()
                precondition(!name.contains { "{}".contains($0) }, "bad parameter in route pattern \(pattern)")
                return .parameter(String(name))
            }
            precondition(!segment.contains { "{}".contains($0) }, "bad route pattern \(pattern)")
            return .literal(String(segment))
        }
    }

    /// The `{name}` values if `pathSegments` (a request's) match the pattern.
    public func match(_ pathSegments: [String]) -> [String: String]? {
        guard pathSegments.count == segments.count else { return nil }
        var parameters: [String: String] = [:]
        for (expected, segment) in zip(segments, pathSegments) {
            switch expected {
            case .literal(let literal):
                guard segment == literal else { return nil }
            case .parameter(let name):
                guard !segment.isEmpty else { return nil }
                parameters[name] = segment
            }
        }
        return parameters
    }

    /// Whether the request's path matches.
    public func matches(_ request: Request) -> Bool { match(request.pathSegments) != nil }

    /// The pattern with parameter names left out: two routes of one method must differ in it.
    var shape: [String?] {
        segments.map { if case .literal(let literal) = $0 { literal } else { nil } }
    }

    /// For two patterns matching the same path: a literal beats a parameter at the first position
    /// where they differ.
    func isMoreSpecific(than other: PathPattern) -> Bool {
        for (mine, theirs) in zip(segments, other.segments) {
            switch (mine, theirs) {
            case (.literal, .parameter): return true
            case (.parameter, .literal): return false
            default: continue
            }
        }
        return false
    }
}
