import CDBus

/// A D-Bus object path, validated when made: libdbus aborts the process on an invalid one.
public struct ObjectPath: Hashable, Sendable, Comparable, CustomStringConvertible {
    public let rawValue: String

    public init?(_ string: String) {
        guard Validate.path(string) else { return nil }
        rawValue = string
    }

    /// A path the program wrote itself; a mistake in one is a programming error.
    public init(trusted string: String) {
        precondition(Validate.path(string), "invalid object path \(string)")
        rawValue = string
    }

    public static let root = ObjectPath(trusted: "/")

    public var description: String { rawValue }

    /// `child("dev_00")` of `/org/bluez/hci0` is `/org/bluez/hci0/dev_00`; nil if the element is invalid.
    /// Exactly one element: an empty one (which made the root its own child) and one with a `/`
    /// (which made a grandchild) are refused.
    public func child(_ element: String) -> ObjectPath? {
        guard !element.isEmpty, !element.utf8.contains(UInt8(ascii: "/")) else { return nil }
        return ObjectPath(rawValue == "/" ? "/" + element : rawValue + "/" + element)
    }

    /// The last element ("dev_00_11" of "/org/bluez/hci0/dev_00_11").
    public var lastElement: Substring {
        guard let slash = rawValue.utf8.lastIndex(of: UInt8(ascii: "/")) else { return rawValue[...] }
        return rawValue[rawValue.index(after: slash)...]
    }

    /// The parent path, nil for "/".
    /// On the notification path (two steps per value): a byte scan, not a Character one, and no
    /// second validation, since the parent of a valid path is valid.
    public var parent: ObjectPath? {
        let utf8 = rawValue.utf8
        guard rawValue != "/", let slash = utf8.lastIndex(of: UInt8(ascii: "/")) else { return nil }
        return ObjectPath(valid: slash == utf8.startIndex ? "/" : String(rawValue[..<slash]))
    }

    /// A path known valid: a parent of a valid one, or one libdbus read from a message it
    /// had validated already.
    init(valid string: String) {
        rawValue = string
    }

    /// True when `self` is `ancestor` or lies below it.
    public func isDescendant(of ancestor: ObjectPath) -> Bool {
        if ancestor.rawValue == "/" || rawValue == ancestor.rawValue { return true }
        // Compared in place (every signal matched against a path_namespace rule comes here).
        let own = rawValue.utf8, prefix = ancestor.rawValue.utf8
        guard own.count > prefix.count, own.starts(with: prefix) else { return false }
        return own[own.index(own.startIndex, offsetBy: prefix.count)] == UInt8(ascii: "/")
    }

    public static func < (a: ObjectPath, b: ObjectPath) -> Bool { a.rawValue < b.rawValue }
}

/// A D-Bus type signature such as `a{sv}`.
public struct Signature: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String
    public init?(_ string: String) {
        guard Validate.signature(string) else { return nil }
        rawValue = string
    }
    init(trusted: String) { rawValue = trusted }
    public var description: String { rawValue }
}

/// Checks names before they reach libdbus, which aborts on invalid input.
public enum Validate {
    public static func path(_ s: String) -> Bool { check(s, dbus_validate_path) }
    public static func interface(_ s: String) -> Bool { check(s, dbus_validate_interface) }
    public static func member(_ s: String) -> Bool { check(s, dbus_validate_member) }
    public static func errorName(_ s: String) -> Bool { check(s, dbus_validate_error_name) }
    public static func busName(_ s: String) -> Bool { check(s, dbus_validate_bus_name) }
    public static func utf8(_ s: String) -> Bool {
        !s.utf8.contains(0) && check(s, dbus_validate_utf8)
    }
    public static func signature(_ s: String) -> Bool {
        var error = gw_dbus_error_init()
        defer { dbus_error_free(&error) }
        return dbus_signature_validate(s, &error) != 0
    }

    private static func check(_ s: String,
                              _ fn: (UnsafePointer<CChar>?, UnsafeMutablePointer<CDBus.DBusError>?) -> dbus_bool_t) -> Bool {
        if s.utf8.contains(0) { return false }
        var error = gw_dbus_error_init()
        defer { dbus_error_free(&error) }
        return fn(s, &error) != 0
    }
}
