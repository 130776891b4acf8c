// Messages over the wire format (Protobuf.swift): a message writes and reads itself through the
// table of its fields (`TabledMessage`, `Field`); enums travel as their Int32 values.

/// A protobuf message: how it writes itself, and the fields it takes when read (others are skipped).
public protocol ProtoMessage: Sendable, Equatable {
    /// Every field at its default.
    init()
    func encode(to writer: inout ProtoWriter)
    /// Takes one field; a field it does not know is left alone.
    mutating func decode(field: ProtoField) throws(ProtobufError)
}

extension ProtoMessage {
    public init(serialized bytes: ArraySlice<UInt8>) throws(ProtobufError) {
        self.init()
        try merge(from: bytes)
    }

    public init(serialized bytes: [UInt8]) throws(ProtobufError) {
        try self.init(serialized: bytes[...])
    }

    public mutating func merge(from bytes: ArraySlice<UInt8>) throws(ProtobufError) {
        var reader = ProtoReader(bytes)
        while let field = try reader.next() { try decode(field: field) }
    }

    public func serialized() -> [UInt8] {
        var writer = ProtoWriter()
        encode(to: &writer)
        return writer.bytes
    }
}

/// A message described by a table of its fields: each field's number and type written once,
/// for writing and reading alike.
public protocol TabledMessage: ProtoMessage {
    /// In field-number order (the order they are written in).
    static var fields: [Field<Self>] { get }
}

extension TabledMessage {
    public func encode(to writer: inout ProtoWriter) {
        for field in Self.fields { field.write(self, &writer) }
    }

    public mutating func decode(field: ProtoField) throws(ProtobufError) {
        guard let spec = Self.fields.first(where: { $0.number == field.number }) else { return }
        try spec.read(&self, field)
    }
}

/// One field of a `TabledMessage`: its number, its protobuf type, and the property holding it.
public struct Field<Message> {
    let number: Int
    let write: (Message, inout ProtoWriter) -> Void
    let read: (inout Message, ProtoField) throws(ProtobufError) -> Void

    private init(_ number: Int, write: @escaping (Message, inout ProtoWriter) -> Void,
                 read: @escaping (inout Message, ProtoField) throws(ProtobufError) -> Void) {
        self.number = number
        self.write = write
        self.read = read
    }

    public static func uint32(_ n: Int, _ p: WritableKeyPath<Message, UInt32>) -> Field {
        Field(n, write: { $1.uint32(n, $0[keyPath: p]) }, read: { $1.read(&$0[keyPath: p]) })
    }

    public static func uint64(_ n: Int, _ p: WritableKeyPath<Message, UInt64>) -> Field {
        Field(n, write: { $1.uint64(n, $0[keyPath: p]) }, read: { $1.read(&$0[keyPath: p]) })
    }

    public static func int32(_ n: Int, _ p: WritableKeyPath<Message, Int32>) -> Field {
        Field(n, write: { $1.int32(n, $0[keyPath: p]) }, read: { $1.read(&$0[keyPath: p]) })
    }

    public static func int64(_ n: Int, _ p: WritableKeyPath<Message, Int64>) -> Field {
        Field(n, write: { $1.int64(n, $0[keyPath: p]) }, read: { $1.read(&$0[keyPath: p]) })
    }

    public static func sint32(_ n: Int, _ p: WritableKeyPath<Message, Int32>) -> Field {
        Field(n, write: { $1.sint32(n, $0[keyPath: p]) }, read: { $1.readZigZag(&$0[keyPath: p]) })
    }

    public static func sint64(_ n: Int, _ p: WritableKeyPath<Message, Int64>) -> Field {
        Field(n, write: { $1.sint64(n, $0[keyPath: p]) }, read: { $1.readZigZag(&$0[keyPath: p]) })
    }

    public static func bool(_ n: Int, _ p: WritableKeyPath<Message, Bool>) -> Field {
        Field(n, write: { $1.bool(n, $0[keyPath: p]) }, read: { $1.read(&$0[keyPath: p]) })
    }

    public static func enumeration<E: ProtoEnum>(_ n: Int, _ p: WritableKeyPath<Message, E>) -> Field {
        Field(n, write: { $1.enumeration(n, $0[keyPath: p]) }, read: { $1.read(&$0[keyPath: p]) })
    }

    public static func fixed32(_ n: Int, _ p: WritableKeyPath<Message, UInt32>) -> Field {
        Field(n, write: { $1.fixed32(n, $0[keyPath: p]) }, read: { $1.readFixed(&$0[keyPath: p]) })
    }

    public static func fixed64(_ n: Int, _ p: WritableKeyPath<Message, UInt64>) -> Field {
        Field(n, write: { $1.fixed64(n, $0[keyPath: p]) }, read: { $1.readFixed(&$0[keyPath: p]) })
    }

    public static func float(_ n: Int, _ p: WritableKeyPath<Message, Float>) -> Field {
        Field(n, write: { $1.float(n, $0[keyPath: p]) }, read: { $1.read(&$0[keyPath: p]) })
    }

    public static func double(_ n: Int, _ p: WritableKeyPath<Message, Double>) -> Field {
        Field(n, write: { $1.double(n, $0[keyPath: p]) }, read: { $1.read(&$0[keyPath: p]) })
    }

    public static func string(_ n: Int, _ p: WritableKeyPath<Message, String>) -> Field {
        Field(n, write: { $1.string(n, $0[keyPath: p]) }, read: { (m, f) throws(ProtobufError) in try f.read(&m[keyPath: p]) })
    }

    public static func bytes(_ n: Int, _ p: WritableKeyPath<Message, [UInt8]>) -> Field {
        Field(n, write: { $1.bytes(n, $0[keyPath: p]) }, read: { $1.read(&$0[keyPath: p]) })
    }

    /// A message field, absent when nil.
    public static func message<M: ProtoMessage>(_ n: Int, _ p: WritableKeyPath<Message, M?>) -> Field {
        Field(n, write: { m, w in if let value = m[keyPath: p] { w.message(n, value) } },
              read: { (m, f) throws(ProtobufError) in try f.read(&m[keyPath: p]) })
    }

    public static func messages<M: ProtoMessage>(_ n: Int, _ p: WritableKeyPath<Message, [M]>) -> Field {
        Field(n, write: { $1.messages(n, $0[keyPath: p]) }, read: { (m, f) throws(ProtobufError) in try f.append(to: &m[keyPath: p]) })
    }

    public static func strings(_ n: Int, _ p: WritableKeyPath<Message, [String]>) -> Field {
        Field(n, write: { $1.strings(n, $0[keyPath: p]) }, read: { (m, f) throws(ProtobufError) in try f.append(to: &m[keyPath: p]) })
    }

    public static func packedUInt32(_ n: Int, _ p: WritableKeyPath<Message, [UInt32]>) -> Field {
        Field(n, write: { $1.packedUInt32(n, $0[keyPath: p]) }, read: { (m, f) throws(ProtobufError) in try f.append(to: &m[keyPath: p]) })
    }

    public static func packedUInt64(_ n: Int, _ p: WritableKeyPath<Message, [UInt64]>) -> Field {
        Field(n, write: { $1.packedUInt64(n, $0[keyPath: p]) }, read: { (m, f) throws(ProtobufError) in try f.append(to: &m[keyPath: p]) })
    }
}

/// A protobuf enum: an open set of int32 values (a value this side does not know is kept).
public protocol ProtoEnum: RawRepresentable, Hashable, Sendable where RawValue == Int32 {
    init(rawValue: Int32)
}
