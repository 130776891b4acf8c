/// Reads fixed-width fields from the front of a payload; every read is bounds-checked and
/// answers nil past the end, so a truncated payload can never be read out of range.
struct ByteReader {
    enum Order { case littleEndian, bigEndian }

    private let bytes: [UInt8]
    private(set) var offset = 0

    init(_ bytes: some Sequence<UInt8>) {
        self.bytes = Array(bytes)
    }

    var isAtEnd: Bool { offset == bytes.count }
    var remainingCount: Int { bytes.count - offset }
    /// The bytes not read yet.
    var remaining: [UInt8] { Array(bytes[offset...]) }

    mutating func byte() -> UInt8? {
        read(1).map { $0[$0.startIndex] }
    }

    /// The next `count` bytes, or nil (and nothing consumed) when fewer are left.
    mutating func read(_ count: Int) -> ArraySlice<UInt8>? {
        guard count >= 0, count <= remainingCount else { return nil }
        defer { offset += count }
        return bytes[offset..<offset + count]
    }

    /// An unsigned integer of `count` (1...8) bytes.
    mutating func unsigned(_ count: Int, _ order: Order) -> UInt64? {
        guard let field = read(count) else { return nil }
        let ordered = order == .bigEndian ? Array(field) : field.reversed()
        return ordered.reduce(0) { $0 << 8 | UInt64($1) }
    }

    /// A two's-complement integer of `count` (1...8) bytes, sign-extended.
    mutating func signed(_ count: Int, _ order: Order) -> Int64? {
        guard let raw = unsigned(count, order) else { return nil }
        let unused = UInt64(64 - 8 * count)
        return Int64(bitPattern: raw << unused) >> Int64(unused)
    }
}
