/// Protocol Buffers' wire format (proto3), as much of it as the ESPHome API's messages use.
///
/// Written out by hand rather than generated: a message is a struct with a table of its fields
/// (`TabledMessage`: number, type, property), which both writes and reads it. What it writes is
/// what python's protobuf writes for the same values (ESPHomeAPITests holds vectors from it):
/// fields in number order, proto3's defaults (0, false, "", empty) left out, negative int32 and
/// enum values as ten-byte varints, repeated scalars packed.

/// How a field's value is laid out.
public enum WireType: UInt8, Sendable {
    case varint = 0
    case fixed64 = 1
    case lengthDelimited = 2
    case fixed32 = 5
}

public enum ProtobufError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The bytes ended inside a field.
    case truncated
    /// A varint of more than ten bytes.
    case varintTooLong
    /// A tag with a wire type protobuf no longer has (3, 4: groups) or never had (6, 7).
    case unsupportedWireType(UInt8)
    /// Field number 0, or one above 2^29 - 1.
    case badFieldNumber(UInt64)
    /// A string field whose bytes are not UTF-8.
    case invalidUTF8(field: Int)

    public var description: String {
        switch self {
        case .truncated: "the message ends inside a field"
        case .varintTooLong: "a varint is longer than ten bytes"
        case .unsupportedWireType(let type): "wire type \(type) is not one proto3 uses"
        case .badFieldNumber(let number): "field number \(number) is out of range"
        case .invalidUTF8(let field): "string field \(field) is not UTF-8"
        }
    }
}

/// Builds a message's bytes, field by field. Each scalar call leaves out proto3's default value.
public struct ProtoWriter: Sendable {
    public private(set) var bytes: [UInt8] = []

    public init() {}

    public mutating func varint(_ value: UInt64) {
        var value = value
        while value >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        bytes.append(UInt8(value))
    }

    private mutating func tag(_ field: Int, _ type: WireType) {
        varint(UInt64(field) << 3 | UInt64(type.rawValue))
    }

    public mutating func uint32(_ field: Int, _ value: UInt32) {
        guard value != 0 else { return }
        tag(field, .varint)
        varint(UInt64(value))
    }

    public mutating func uint64(_ field: Int, _ value: UInt64) {
        guard value != 0 else { return }
        tag(field, .varint)
        varint(value)
    }

    /// int32 (and enums): a negative value is sign-extended to 64 bits, ten bytes on the wire.
    public mutating func int32(_ field: Int, _ value: Int32) {
        guard value != 0 else { return }
        tag(field, .varint)
        varint(UInt64(bitPattern: Int64(value)))
    }

    public mutating func int64(_ field: Int, _ value: Int64) {
        guard value != 0 else { return }
        tag(field, .varint)
        varint(UInt64(bitPattern: value))
    }

    /// sint32: ZigZag, so that small negative numbers stay short.
    public mutating func sint32(_ field: Int, _ value: Int32) {
        guard value != 0 else { return }
        tag(field, .varint)
        varint(UInt64(UInt32(bitPattern: (value << 1) ^ (value >> 31))))
    }

    public mutating func sint64(_ field: Int, _ value: Int64) {
        guard value != 0 else { return }
        tag(field, .varint)
        varint(UInt64(bitPattern: (value << 1) ^ (value >> 63)))
    }

    public mutating func bool(_ field: Int, _ value: Bool) {
        guard value else { return }
        tag(field, .varint)
        bytes.append(1)
    }

    public mutating func enumeration<E: ProtoEnum>(_ field: Int, _ value: E) {
        int32(field, value.rawValue)
    }

    public mutating func fixed32(_ field: Int, _ value: UInt32) {
        guard value != 0 else { return }
        tag(field, .fixed32)
        littleEndian(UInt64(value), count: 4)
    }

    public mutating func fixed64(_ field: Int, _ value: UInt64) {
        guard value != 0 else { return }
        tag(field, .fixed64)
        littleEndian(value, count: 8)
    }

    /// A float is left out only when its bits are all zero: -0.0 is written, as protobuf does.
    public mutating func float(_ field: Int, _ value: Float) {
        fixed32(field, value.bitPattern)
    }

    public mutating func double(_ field: Int, _ value: Double) {
        fixed64(field, value.bitPattern)
    }

    public mutating func string(_ field: Int, _ value: String) {
        bytes(field, Array(value.utf8))
    }

    public mutating func bytes(_ field: Int, _ value: [UInt8]) {
        guard !value.isEmpty else { return }
        lengthDelimited(field, value)
    }

    /// A message field that is set: written even when it is empty (its presence is the value).
    public mutating func message<M: ProtoMessage>(_ field: Int, _ value: M) {
        lengthDelimited(field, value.serialized())
    }

    public mutating func messages<M: ProtoMessage>(_ field: Int, _ values: [M]) {
        for value in values { message(field, value) }
    }

    /// A repeated string (never packed: each element is a field of its own).
    public mutating func strings(_ field: Int, _ values: [String]) {
        for value in values { lengthDelimited(field, Array(value.utf8)) }
    }

    /// A repeated uint32, packed (proto3's default for repeated scalars).
    public mutating func packedUInt32(_ field: Int, _ values: [UInt32]) {
        packed(field, values.map(UInt64.init))
    }

    public mutating func packedUInt64(_ field: Int, _ values: [UInt64]) {
        packed(field, values)
    }

    private mutating func packed(_ field: Int, _ values: [UInt64]) {
        guard !values.isEmpty else { return }
        var inner = ProtoWriter()
        for value in values { inner.varint(value) }
        lengthDelimited(field, inner.bytes)
    }

    private mutating func lengthDelimited(_ field: Int, _ value: [UInt8]) {
        tag(field, .lengthDelimited)
        varint(UInt64(value.count))
        bytes += value
    }

    private mutating func littleEndian(_ value: UInt64, count: Int) {
        for i in 0..<count { bytes.append(UInt8(truncatingIfNeeded: value >> (8 * i))) }
    }
}

/// One field as it came off the wire.
public struct ProtoField: Sendable {
    public enum Value: Sendable {
        case varint(UInt64)
        case fixed64(UInt64)
        case lengthDelimited(ArraySlice<UInt8>)
        case fixed32(UInt32)
    }

    public let number: Int
    public let value: Value

    // Each `read` stores the field's value when its wire type is the one the field is declared
    // with, and leaves the target alone otherwise: a parser treats a known field with another wire
    // type as an unknown field, which is skipped.

    /// uint32: the low 32 bits of the varint, as protobuf truncates.
    public func read(_ target: inout UInt32) {
        if case .varint(let v) = value { target = UInt32(truncatingIfNeeded: v) }
    }

    public func read(_ target: inout UInt64) {
        if case .varint(let v) = value { target = v }
    }

    /// int32 (sign-extended on the wire; the low 32 bits are the value).
    public func read(_ target: inout Int32) {
        if case .varint(let v) = value { target = Int32(truncatingIfNeeded: v) }
    }

    public func read(_ target: inout Int64) {
        if case .varint(let v) = value { target = Int64(bitPattern: v) }
    }

    public func read(_ target: inout Bool) {
        if case .varint(let v) = value { target = v != 0 }
    }

    public func read<E: ProtoEnum>(_ target: inout E) {
        if case .varint(let v) = value { target = E(rawValue: Int32(truncatingIfNeeded: v)) }
    }

    public func readZigZag(_ target: inout Int32) {
        if case .varint(let v) = value {
            let n = UInt32(truncatingIfNeeded: v)
            target = Int32(bitPattern: (n >> 1) ^ (0 &- (n & 1)))
        }
    }

    public func readZigZag(_ target: inout Int64) {
        if case .varint(let v) = value { target = Int64(bitPattern: (v >> 1) ^ (0 &- (v & 1))) }
    }

    public func readFixed(_ target: inout UInt32) {
        if case .fixed32(let v) = value { target = v }
    }

    public func readFixed(_ target: inout UInt64) {
        if case .fixed64(let v) = value { target = v }
    }

    public func read(_ target: inout Float) {
        if case .fixed32(let v) = value { target = Float(bitPattern: v) }
    }

    public func read(_ target: inout Double) {
        if case .fixed64(let v) = value { target = Double(bitPattern: v) }
    }

    public func read(_ target: inout [UInt8]) {
        if case .lengthDelimited(let v) = value { target = Array(v) }
    }

    public func read(_ target: inout String) throws(ProtobufError) {
        if let text = try text() { target = text }
    }

    private func text() throws(ProtobufError) -> String? {
        guard case .lengthDelimited(let v) = value else { return nil }
        guard let text = String(validating: v, as: UTF8.self) else { throw .invalidUTF8(field: number) }
        return text
    }

    /// A message field: a repeated occurrence merges into what came before, as protobuf does.
    public func read<M: ProtoMessage>(_ target: inout M?) throws(ProtobufError) {
        guard case .lengthDelimited(let v) = value else { return }
        var message = target ?? M()
        try message.merge(from: v)
        target = message
    }

    /// One more element of a repeated message field.
    public func append<M: ProtoMessage>(to target: inout [M]) throws(ProtobufError) {
        guard case .lengthDelimited(let v) = value else { return }
        target.append(try M(serialized: v))
    }

    public func append(to target: inout [String]) throws(ProtobufError) {
        if let text = try text() { target.append(text) }
    }

    /// Repeated uint32: packed, or one element per field (parsers accept both).
    public func append(to target: inout [UInt32]) throws(ProtobufError) {
        var wide: [UInt64] = []
        try append(to: &wide)
        target += wide.map { UInt32(truncatingIfNeeded: $0) }
    }

    public func append(to target: inout [UInt64]) throws(ProtobufError) {
        switch value {
        case .varint(let v):
            target.append(v)
        case .lengthDelimited(let packed):
            var reader = ProtoReader(packed)
            while !reader.isAtEnd { target.append(try reader.varint()) }
        default:
            break
        }
    }
}

/// Reads a message's fields in order.
public struct ProtoReader {
    private let bytes: ArraySlice<UInt8>
    private var position: Int

    public init(_ bytes: ArraySlice<UInt8>) {
        self.bytes = bytes
        position = bytes.startIndex
    }

    public var isAtEnd: Bool { position == bytes.endIndex }

    public mutating func varint() throws(ProtobufError) -> UInt64 {
        var result: UInt64 = 0
        for shift in stride(from: 0, to: 70, by: 7) {
            guard position < bytes.endIndex else { throw .truncated }
            let byte = bytes[position]
            position += 1
            result |= UInt64(byte & 0x7F) << UInt64(shift)
            if byte & 0x80 == 0 { return result }
        }
        throw .varintTooLong
    }

    /// The next field, nil at the end. Wire types that proto3 does not use are an error (their
    /// length cannot be known, so nothing after them could be read).
    public mutating func next() throws(ProtobufError) -> ProtoField? {
        guard !isAtEnd else { return nil }
        let key = try varint()
        let number = key >> 3
        guard number >= 1, number <= (1 << 29) - 1 else { throw .badFieldNumber(number) }
        let value: ProtoField.Value
        switch UInt8(key & 7) {
        case WireType.varint.rawValue:
            value = .varint(try varint())
        case WireType.fixed64.rawValue:
            value = .fixed64(try littleEndian(8))
        case WireType.fixed32.rawValue:
            value = .fixed32(UInt32(try littleEndian(4)))
        case WireType.lengthDelimited.rawValue:
            let length = try varint()
            guard length <= UInt64(bytes.endIndex - position) else { throw .truncated }
            let end = position + Int(length)
            value = .lengthDelimited(bytes[position..<end])
            position = end
        case let other:
            throw .unsupportedWireType(other)
        }
        return ProtoField(number: Int(number), value: value)
    }

    private mutating func littleEndian(_ count: Int) throws(ProtobufError) -> UInt64 {
        guard bytes.endIndex - position >= count else { throw .truncated }
        var result: UInt64 = 0
        for i in 0..<count { result |= UInt64(bytes[position + i]) << UInt64(8 * i) }
        position += count
        return result
    }
}
