/// A bus match rule (what signals to route to this connection) that can also test a
/// message locally, so that each subscriber sees only its own signals.
public struct MatchRule: Hashable, Sendable {
    public var sender: String?
    public var path: ObjectPath?
    public var pathNamespace: ObjectPath?
    public var interface: String?
    public var member: String?
    /// The first argument, when it is a string (e.g. the name in NameOwnerChanged).
    public var arg0: String?

    public init(sender: String? = nil, path: ObjectPath? = nil, pathNamespace: ObjectPath? = nil,
                interface: String? = nil, member: String? = nil, arg0: String? = nil) {
        self.sender = sender
        self.path = path
        self.pathNamespace = pathNamespace
        self.interface = interface
        self.member = member
        self.arg0 = arg0
    }

    /// The rule in the bus's syntax, after checking every part (libdbus and the bus reject
    /// malformed rules, and a quote would end a value early).
    func ruleString() throws(BusError) -> String {
        if let s = sender, !Validate.busName(s) { throw .invalidArgs("invalid sender \"\(s)\"") }
        if let i = interface, !Validate.interface(i) { throw .invalidArgs("invalid interface \"\(i)\"") }
        if let m = member, !Validate.member(m) { throw .invalidArgs("invalid member \"\(m)\"") }
        if let a = arg0, a.contains("'") || !Validate.utf8(a) { throw .invalidArgs("invalid arg0 \"\(a)\"") }
        var parts = ["type='signal'"]
        if let sender { parts.append("sender='\(sender)'") }
        if let path { parts.append("path='\(path)'") }
        if let pathNamespace { parts.append("path_namespace='\(pathNamespace)'") }
        if let interface { parts.append("interface='\(interface)'") }
        if let member { parts.append("member='\(member)'") }
        if let arg0 { parts.append("arg0='\(arg0)'") }
        return parts.joined(separator: ",")
    }

    /// Whether a received signal belongs to this rule. A well-known sender name cannot be
    /// compared with the unique name a signal carries; the bus has already filtered on it, so
    /// only unique names and the bus driver's own name are compared here.
    public func matches(_ message: Message) -> Bool {
        guard message.kind == .signal else { return false }
        if let sender, sender.hasPrefix(":") || sender == "org.freedesktop.DBus", message.sender != sender { return false }
        if let path, message.path != path { return false }
        if let pathNamespace, !(message.path?.isDescendant(of: pathNamespace) ?? false) { return false }
        if let interface, message.interface != interface { return false }
        if let member, message.member != member { return false }
        if let arg0, message.body.first?.string != arg0 { return false }
        return true
    }
}
