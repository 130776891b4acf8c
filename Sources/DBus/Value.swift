import Glibc

/// A D-Bus value with its type. Containers carry their element signature so that empty
/// arrays and dictionaries marshal correctly.
///
/// Only `variant` is boxed (`indirect`): the containers hold arrays, which are references
/// already, and boxing every case cost an allocation per value read (a PropertiesChanged of an
/// advertisement is some fifteen values, at thousands a second).
public enum Value: Hashable, Sendable {
    case byte(UInt8)
    case bool(Bool)
    case int16(Int16)
    case uint16(UInt16)
    case int32(Int32)
    case uint32(UInt32)
    case int64(Int64)
    case uint64(UInt64)
    case double(Double)
    case string(String)
    case objectPath(ObjectPath)
    case signature(Signature)
    /// `ay`: byte arrays are common enough (every GATT value) to get their own case.
    case bytes([UInt8])
    /// `a<element>` for any element but `y` and dict entries.
    case array(element: Signature, [Value])
    /// `a{<key><value>}`; entries keep their order.
    case dictionary(key: Signature, value: Signature, [DictionaryEntry])
    case structure([Value])
    indirect case variant(Value)
    /// `h`: a file descriptor. A received one belongs to the receiver, which must close it;
    /// a sent one is duplicated by libdbus, so the sender keeps (and closes) its own.
    case unixFD(Int32)

    public struct DictionaryEntry: Hashable, Sendable {
        public var key: Value
        public var value: Value
        public init(_ key: Value, _ value: Value) { self.key = key; self.value = value }
    }

    /// The value's complete type signature.
    public var signature: Signature {
        switch self {
        case .byte: return Signature(trusted: "y")
        case .bool: return Signature(trusted: "b")
        case .int16: return Signature(trusted: "n")
        case .uint16: return Signature(trusted: "q")
        case .int32: return Signature(trusted: "i")
        case .uint32: return Signature(trusted: "u")
        case .int64: return Signature(trusted: "x")
        case .uint64: return Signature(trusted: "t")
        case .double: return Signature(trusted: "d")
        case .string: return Signature(trusted: "s")
        case .objectPath: return Signature(trusted: "o")
        case .signature: return Signature(trusted: "g")
        case .bytes: return Signature(trusted: "ay")
        case .array(let element, _): return Signature(trusted: "a" + element.rawValue)
        case .dictionary(let k, let v, _): return Signature(trusted: "a{\(k.rawValue)\(v.rawValue)}")
        case .structure(let fields): return Signature(trusted: "(" + fields.map(\.signature.rawValue).joined() + ")")
        case .variant: return Signature(trusted: "v")
        case .unixFD: return Signature(trusted: "h")
        }
    }
}

// MARK: - Descriptors

private func closeDescriptor(_ fd: Int32) { _ = Glibc.close(fd) }

extension Value {
    /// Closes every file descriptor inside `value` (received ones belong to the receiver).
    static func closeDescriptors(_ value: Value) {
        switch value {
        case .unixFD(let fd): closeDescriptor(fd)
        case .array(_, let items), .structure(let items): items.forEach(closeDescriptors)
        case .dictionary(_, _, let entries): entries.forEach { closeDescriptors($0.key); closeDescriptors($0.value) }
        case .variant(let inner): closeDescriptors(inner)
        default: break
        }
    }
}

// MARK: - Building values from Swift

extension Value {
    /// `a{sv}` from string keys; the common BlueZ options and properties shape.
    public static func stringVariantDictionary(_ entries: [(String, Value)]) -> Value {
        .dictionary(key: Signature(trusted: "s"), value: Signature(trusted: "v"),
                    entries.map { DictionaryEntry(.string($0.0), .variant($0.1)) })
    }

    /// `as`
    public static func strings(_ items: [String]) -> Value {
        .array(element: Signature(trusted: "s"), items.map(Value.string))
    }

    /// `ao`
    public static func objectPaths(_ items: [ObjectPath]) -> Value {
        .array(element: Signature(trusted: "o"), items.map(Value.objectPath))
    }

    /// An empty dictionary of the given key and value signatures.
    public static func emptyDictionary(key: String, value: String) -> Value {
        .dictionary(key: Signature(trusted: key), value: Signature(trusted: value), [])
    }
}

// MARK: - Reading values

extension Value {
    /// The content of a variant, or the value itself.
    public var unwrapped: Value {
        if case .variant(let inner) = self { return inner.unwrapped }
        return self
    }

    public var string: String? {
        switch unwrapped {
        case .string(let s): return s
        case .objectPath(let p): return p.rawValue
        default: return nil
        }
    }
    public var objectPath: ObjectPath? {
        if case .objectPath(let p) = unwrapped { return p }
        return nil
    }
    public var bool: Bool? {
        if case .bool(let b) = unwrapped { return b }
        return nil
    }
    /// Any integer type, widened.
    public var integer: Int? {
        switch unwrapped {
        case .byte(let v): return Int(v)
        case .int16(let v): return Int(v)
        case .uint16(let v): return Int(v)
        case .int32(let v): return Int(v)
        case .uint32(let v): return Int(v)
        case .int64(let v): return Int(v)
        case .uint64(let v): return Int(exactly: v)
        default: return nil
        }
    }
    public var bytes: [UInt8]? {
        switch unwrapped {
        case .bytes(let b): return b
        case .array(_, let items):
            var out: [UInt8] = []
            for item in items { guard case .byte(let b) = item else { return nil }; out.append(b) }
            return out
        default: return nil
        }
    }
    public var array: [Value]? {
        switch unwrapped {
        case .array(_, let items): return items
        case .bytes(let b): return b.map(Value.byte)
        default: return nil
        }
    }
    public var strings: [String]? { array?.compactMap(\.string) }
    public var dictionaryEntries: [DictionaryEntry]? {
        if case .dictionary(_, _, let entries) = unwrapped { return entries }
        return nil
    }
    /// An `a{s*}` as a Swift dictionary (values as they are, variants included).
    public var stringDictionary: [String: Value]? {
        guard let entries = dictionaryEntries else { return nil }
        var out: [String: Value] = [:]
        for entry in entries { if let k = entry.key.string { out[k] = entry.value } }
        return out
    }
}
