/// Which of BlueZ's adapters gattway uses: every one it lists, also one plugged in later (the
/// default), or the ones named (`--adapter hci0,hci1`).
public enum AdapterSelection: Sendable, Equatable, CustomStringConvertible {
    case all
    case named([String])

    /// "all", or names separated by commas ("hci0,hci1"); nil when a name is not hciN.
    public init?(_ text: String) {
        if text == "all" {
            self = .all
            return
        }
        let names = text.split(separator: ",", omittingEmptySubsequences: false).map { String($0) }
        guard !names.isEmpty, names.allSatisfy(Self.isAdapterName) else { return nil }
        var unique: [String] = []
        for name in names where !unique.contains(name) { unique.append(name) }
        self = .named(unique)
    }

    public func includes(_ name: String) -> Bool {
        switch self {
        case .all: true
        case .named(let names): names.contains(name)
        }
    }

    public var description: String {
        switch self {
        case .all: "all"
        case .named(let names): names.joined(separator: ",")
        }
    }

    /// hci followed by a number.
    public static func isAdapterName(_ name: String) -> Bool {
        name.hasPrefix("hci") && name.count > 3 && name.dropFirst(3).allSatisfy(\.isNumber)
    }

    /// Name order with numbers as numbers: hci2 before hci10.
    static func precedes(_ a: String, _ b: String) -> Bool {
        switch (Int(a.dropFirst(3)), Int(b.dropFirst(3))) {
        case (let x?, let y?) where x != y: x < y
        default: a < b
        }
    }
}
