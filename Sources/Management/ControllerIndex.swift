/// A controller as the management socket numbers it: hci0 is index 0.
public struct ControllerIndex: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible {
    public let rawValue: UInt16

    public init(rawValue: UInt16) { self.rawValue = rawValue }

    public init(_ rawValue: UInt16) { self.rawValue = rawValue }

    /// The index of "hciN" (BlueZ's adapter name); nil for any other name.
    public init?(adapterName: String) {
        guard adapterName.hasPrefix("hci"), let n = UInt16(adapterName.dropFirst(3)), n != Self.none.rawValue,
              String(n) == adapterName.dropFirst(3) else { return nil }
        rawValue = n
    }

    /// What frames that concern no controller carry (the socket's own commands and their answers).
    public static let none = ControllerIndex(0xFFFF)

    /// "hciN", or "none".
    public var description: String { self == .none ? "none" : "hci\(rawValue)" }

    public static func < (lhs: ControllerIndex, rhs: ControllerIndex) -> Bool { lhs.rawValue < rhs.rawValue }
}
