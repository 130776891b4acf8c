import Synchronization
import Threading

/// Objects this side serves on the bus under one root path (a GATT application, an
/// advertisement): each with interfaces and their properties. It answers the standard
/// interfaces itself — `ObjectManager.GetManagedObjects` (at any path under the root: the
/// objects below it), `Properties.Get/GetAll/Set`, `Introspectable.Introspect` — and hands every
/// other method call to the method handler, which answers it (now or later) with `answer`.
///
/// The bus connection's owner routes calls here (`handle`, on the connection's thread) and says
/// how messages go out (`send`), so the objects outlive a bus connection made again.
public final class ExportedObjects: Sendable {
    /// Interface → property → value (variants unwrapped).
    public typealias Interfaces = [String: [String: Value]]

    public static let introspectableInterface = "org.freedesktop.DBus.Introspectable"

    public let root: ObjectPath
    private let send: @Sendable (Message) -> Void
    private let objects = Mutex<[ObjectPath: Interfaces]>([:])
    private let methods = HandlerSlot<Message>()
    private let setter = Mutex<(@Sendable (ObjectPath, String, String, Value) -> BusError?)?>(nil)

    public init(root: ObjectPath, send: @escaping @Sendable (Message) -> Void) {
        self.root = root
        self.send = send
    }

    /// Receives the method calls of other interfaces on an object that exists (on the
    /// connection's thread: answer later, never wait). Without one, callers get `UnknownMethod`.
    public func setMethodHandler(_ handler: @escaping @Sendable (Message) -> Void) { methods.set(handler) }

    /// Decides a `Properties.Set`: nil accepts (the value is stored and `PropertiesChanged`
    /// sent), an error refuses. Without one, every property is read-only.
    public func setPropertyHandler(_ handler: @escaping @Sendable (_ path: ObjectPath, _ interface: String, _ name: String, _ value: Value) -> BusError?) {
        setter.withLock { $0 = handler }
    }

    // MARK: - The objects

    /// Adds an object, or replaces its interfaces. With `announce`, `InterfacesAdded` from the
    /// root tells the peers watching it (those that do not read the objects again themselves).
    public func add(_ path: ObjectPath, _ interfaces: Interfaces, announce: Bool = false) {
        precondition(path.isDescendant(of: root), "\(path) is not under \(root)")
        objects.withLock { $0[path] = interfaces }
        if announce {
            send(.signal(path: root, interface: Connection.objectManagerInterface, member: "InterfacesAdded",
                         [.objectPath(path), Self.interfaces(interfaces)]))
        }
    }

    /// Removes the object at `path` and every object below it; with `announce`,
    /// `InterfacesRemoved` for each.
    public func remove(under path: ObjectPath, announce: Bool = false) {
        let removed = objects.withLock { o -> [ObjectPath: Interfaces] in
            let gone = o.filter { $0.key.isDescendant(of: path) }
            for key in gone.keys { o[key] = nil }
            return gone
        }
        guard announce else { return }
        for (gone, interfaces) in removed.sorted(by: { $0.key > $1.key }) {
            send(.signal(path: root, interface: Connection.objectManagerInterface, member: "InterfacesRemoved",
                         [.objectPath(gone), .strings(interfaces.keys.sorted())]))
        }
    }

    public func properties(_ path: ObjectPath, _ interface: String) -> [String: Value]? {
        objects.withLock { $0[path]?[interface] }
    }

    /// The objects strictly below `path`.
    public func objects(below path: ObjectPath) -> [ObjectPath: Interfaces] {
        objects.withLock { $0.filter { $0.key != path && $0.key.isDescendant(of: path) } }
    }

    /// Changes properties of an object's interface and signals it (`PropertiesChanged`). False
    /// when there is no such object and interface.
    @discardableResult
    public func update(_ path: ObjectPath, _ interface: String, _ changes: [String: Value]) -> Bool {
        let known = objects.withLock { o -> Bool in
            guard o[path]?[interface] != nil else { return false }
            for (name, value) in changes { o[path]![interface]![name] = value }
            return true
        }
        if known { send(Self.propertiesChanged(path, interface, changes)) }
        return known
    }

    /// `PropertiesChanged(interface, changed, [])` from `path`.
    public static func propertiesChanged(_ path: ObjectPath, _ interface: String, _ changes: [String: Value]) -> Message {
        .signal(path: path, interface: Connection.propertiesInterface, member: "PropertiesChanged",
                [.string(interface), .stringVariantDictionary(changes.sorted { $0.key < $1.key }), .strings([])])
    }

    /// Sends the answer to a call unless its caller asked for none.
    public func answer(_ call: Message, _ reply: Message) {
        if !call.noReplyExpected { send(reply) }
    }

    // MARK: - Calls

    /// A method call on the bus connection: true when it is for a path under the root (then it
    /// is answered, here or by the method handler).
    public func handle(_ call: Message) -> Bool {
        guard let path = call.path, path.isDescendant(of: root) else { return false }
        switch call.interface {
        case Connection.objectManagerInterface? where call.member == "GetManagedObjects":
            answer(call, call.reply([Self.managedObjects(objects(below: path))]))
        case Connection.propertiesInterface?:
            answer(call, properties(call, path))
        case Self.introspectableInterface? where call.member == "Introspect":
            answer(call, call.reply([.string(introspection(path))]))
        default:
            guard objects.withLock({ $0[path] != nil }) else {
                answer(call, call.errorReply(BusError(name: Self.error + "UnknownObject", message: "no object at \(path)")))
                return true
            }
            if !methods(call) {
                answer(call, call.errorReply(BusError(name: Self.error + "UnknownMethod", message: "no method \(call.member ?? "")")))
            }
        }
        return true
    }

    private static let error = "org.freedesktop.DBus.Error."

    private func properties(_ call: Message, _ path: ObjectPath) -> Message {
        let interface = call.body.first?.string ?? ""
        guard let props = objects.withLock({ $0[path] })?[interface] else {
            return call.errorReply(BusError(name: Self.error + "UnknownInterface", message: "\(path) has no interface \(interface)"))
        }
        switch call.member {
        case "GetAll":
            return call.reply([.stringVariantDictionary(props.sorted { $0.key < $1.key })])
        case "Get":
            let name = call.body.count > 1 ? call.body[1].string ?? "" : ""
            guard let value = props[name] else {
                return call.errorReply(BusError(name: Self.error + "UnknownProperty", message: "\(interface) has no property \(name)"))
            }
            return call.reply([.variant(value)])
        case "Set":
            guard call.body.count > 2, let name = call.body[1].string, props[name] != nil else {
                return call.errorReply(BusError(name: Self.error + "UnknownProperty", message: "no such property of \(interface)"))
            }
            let value = call.body[2].unwrapped
            guard let decide = setter.withLock({ $0 }) else {
                return call.errorReply(BusError(name: Self.error + "PropertyReadOnly", message: "\(name) is read-only"))
            }
            if let refusal = decide(path, interface, name, value) { return call.errorReply(refusal) }
            update(path, interface, [name: value])
            return call.reply()
        default:
            return call.errorReply(BusError(name: Self.error + "UnknownMethod", message: "no method \(call.member ?? "")"))
        }
    }

    /// `a{oa{sa{sv}}}`, sorted so that answers compare.
    static func managedObjects(_ objects: [ObjectPath: Interfaces]) -> Value {
        .dictionary(key: Signature(trusted: "o"), value: Signature(trusted: "a{sa{sv}}"), objects.sorted { $0.key < $1.key }.map {
            .init(.objectPath($0.key), interfaces($0.value))
        })
    }

    /// `a{sa{sv}}`
    static func interfaces(_ interfaces: Interfaces) -> Value {
        .dictionary(key: Signature(trusted: "s"), value: Signature(trusted: "a{sv}"), interfaces.sorted { $0.key < $1.key }.map {
            .init(.string($0.key), .stringVariantDictionary($0.value.sorted { $0.key < $1.key }))
        })
    }

    /// Minimal: the object's interfaces by name (no members) and its direct children.
    private func introspection(_ path: ObjectPath) -> String {
        let (own, children) = objects.withLock { o -> ([String], Set<String>) in
            var children = Set<String>()
            let prefix = path.rawValue == "/" ? "/" : path.rawValue + "/"
            for key in o.keys where key.rawValue.hasPrefix(prefix) {
                children.insert(String(key.rawValue.dropFirst(prefix.count).prefix { $0 != "/" }))
            }
            return (o[path].map { Array($0.keys) } ?? [], children)
        }
        var xml = "<!DOCTYPE node PUBLIC \"-//freedesktop//DTD D-BUS Object Introspection 1.0//EN\"\n"
            + " \"http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd\">\n<node>\n"
        let standard = [Self.introspectableInterface, Connection.propertiesInterface, Connection.objectManagerInterface]
        for name in standard + own.sorted() { xml += "  <interface name=\"\(name)\"/>\n" }
        for child in children.sorted() { xml += "  <node name=\"\(child)\"/>\n" }
        return xml + "</node>\n"
    }
}
