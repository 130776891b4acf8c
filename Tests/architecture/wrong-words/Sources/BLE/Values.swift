/// How values are written as text in the HTTP API (a comment: not checked).
enum ValueFormat {
    case hex
    /// A URL is data, not a door.
    static let scheme = "https://www."
    static let topic = "gattway/mqtt/state"
}
