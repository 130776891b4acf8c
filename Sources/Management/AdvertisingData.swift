/// Advertising data as the controller reported it: AD structures (length, type, data), the
/// advertisement and its scan response one after the other (Core spec Vol 3 Part C §11).
public struct AdvertisingData: Sendable, Equatable {
    /// The significant part, structure after structure, as received: a zero length byte ends it
    /// (the spec's early termination) and what follows it is padding, left out.
    public let bytes: [UInt8]

    /// `bytes` split, in order. Split when asked, not at every frame: the path that hands an
    /// advertisement on takes the bytes whole.
    public var structures: [ADStructure] {
        var structures: [ADStructure] = []
        var offset = 0
        while offset < bytes.count {
            let next = offset + 1 + Int(bytes[offset])
            structures.append(ADStructure(type: bytes[offset + 1], data: bytes[offset + 2..<next]))
            offset = next
        }
        return structures
    }

    /// Nothing advertised (or the AD part dropped).
    public static let empty = AdvertisingData(checked: [])

    private init(checked bytes: [UInt8]) {
        self.bytes = bytes
    }

    /// Splits `data`; nil when a structure runs past the end (the data is then not trusted at all).
    public init?(parsing data: UnsafeRawBufferPointer) {
        // Checked first, copied once: this runs for every advertisement heard.
        var end = 0
        while end < data.count, data[end] != 0 {
            end += 1 + Int(data[end])
        }
        guard end <= data.count else { return nil }
        self.init(checked: Array(data[0..<end]))
    }

    /// `init(parsing:)` over an array.
    public init?(parsing data: [UInt8]) {
        guard let parsed = data.withUnsafeBytes({ AdvertisingData(parsing: $0) }) else { return nil }
        self = parsed
    }

    /// Data made of these structures (each at most 254 data bytes).
    public init(_ structures: [(type: UInt8, data: [UInt8])]) {
        var bytes: [UInt8] = []
        for (type, data) in structures { Self.appendStructure(type: type, to: &bytes) { $0 += data } }
        self.init(parsing: bytes)!
    }

    /// Appends one AD structure to `bytes`: its length, `type`, then the data `write` appends (at
    /// most 254 bytes). For encoders that write straight into a buffer they keep.
    public static func appendStructure(type: UInt8, to bytes: inout [UInt8], data write: (inout [UInt8]) -> Void) {
        let start = bytes.count
        bytes.append(0)
        bytes.append(type)
        write(&bytes)
        let length = bytes.count - start - 1
        precondition(length <= 255, "an AD structure carries at most 254 data bytes")
        bytes[start] = UInt8(length)
    }

    /// An event's AD (or EIR) part: split, or `.empty` and dropped when it does not split.
    static func part(_ data: UnsafeRawBufferPointer) -> (data: AdvertisingData, dropped: Bool) {
        AdvertisingData(parsing: data).map { ($0, false) } ?? (.empty, true)
    }
}

/// One AD structure: its type (Assigned Numbers §2.3) and data.
public struct ADStructure: Sendable, Equatable {
    public let type: UInt8
    /// A slice of the advertising data's `bytes`: its indices are theirs (use `first`, `dropFirst`,
    /// or `Array(data)`).
    public let data: ArraySlice<UInt8>

    public init(type: UInt8, data: ArraySlice<UInt8>) {
        self.type = type
        self.data = data
    }
}
