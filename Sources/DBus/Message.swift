/// A D-Bus message as plain Swift data. libdbus messages never leave the connection's
/// thread; this is what the rest of the program sees and builds.
public struct Message: Sendable {
    public enum Kind: Sendable, Equatable { case methodCall, methodReturn, error, signal }

    public var kind: Kind
    public var path: ObjectPath?
    public var interface: String?
    public var member: String?
    public var errorName: String?
    public var destination: String?
    public var sender: String?
    public var serial: UInt32 = 0
    public var replySerial: UInt32 = 0
    public var noReplyExpected = false
    public var body: [Value]

    public init(kind: Kind, path: ObjectPath? = nil, interface: String? = nil, member: String? = nil,
                errorName: String? = nil, destination: String? = nil, body: [Value] = []) {
        self.kind = kind
        self.path = path
        self.interface = interface
        self.member = member
        self.errorName = errorName
        self.destination = destination
        self.body = body
    }

    public static func methodCall(destination: String, path: ObjectPath, interface: String, member: String,
                                  _ body: [Value] = []) -> Message {
        Message(kind: .methodCall, path: path, interface: interface, member: member,
                destination: destination, body: body)
    }

    public static func signal(path: ObjectPath, interface: String, member: String, _ body: [Value] = []) -> Message {
        Message(kind: .signal, path: path, interface: interface, member: member, body: body)
    }

    /// The reply to this method call carrying `body`.
    public func reply(_ body: [Value] = []) -> Message {
        var m = Message(kind: .methodReturn, destination: sender, body: body)
        m.replySerial = serial
        return m
    }

    /// The error reply to this method call.
    public func errorReply(_ error: BusError) -> Message {
        var m = Message(kind: .error, errorName: error.name, destination: sender,
                        body: error.message.isEmpty ? [] : [.string(error.message)])
        m.replySerial = serial
        return m
    }

    /// The signature of the body, e.g. `sa{sv}as`.
    public var signature: String { body.map(\.signature.rawValue).joined() }

    /// For an error message: the error it carries.
    public var error: BusError? {
        guard kind == .error else { return nil }
        return BusError(name: errorName ?? "org.freedesktop.DBus.Error.Failed", message: body.first?.string ?? "")
    }
}
