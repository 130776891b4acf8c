/// A `Duration` as seconds in a `Double`: for JSON numbers, `Date` arithmetic and rates.
extension Duration {
    public var inSeconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
