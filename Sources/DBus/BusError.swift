/// An error from the bus or a peer (`name` is the D-Bus error name, e.g.
/// `org.bluez.Error.Failed`), or from this binding itself.
public struct BusError: Error, Sendable, Equatable, CustomStringConvertible {
    public var name: String
    public var message: String

    public init(name: String, message: String) {
        self.name = name
        self.message = message
    }

    public var description: String { message.isEmpty ? name : "\(name): \(message)" }

    // Errors raised by this binding, named as libdbus names the same situations.
    static func noMemory() -> BusError { BusError(name: "org.freedesktop.DBus.Error.NoMemory", message: "out of memory") }
    static func disconnected() -> BusError {
        BusError(name: "org.freedesktop.DBus.Error.Disconnected", message: "connection is closed")
    }
    static func invalidArgs(_ message: String) -> BusError {
        BusError(name: "org.freedesktop.DBus.Error.InvalidArgs", message: message)
    }
    public static func timedOut(_ message: String = "no reply within the deadline") -> BusError {
        BusError(name: "org.freedesktop.DBus.Error.Timeout", message: message)
    }
}
