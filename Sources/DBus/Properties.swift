/// org.freedesktop.DBus.Properties and ObjectManager, as a client uses them.
extension Connection {
    public static let propertiesInterface = "org.freedesktop.DBus.Properties"
    public static let objectManagerInterface = "org.freedesktop.DBus.ObjectManager"

    /// `GetManagedObjects`: path → interface → property → value.
    public func managedObjects(of service: String, at path: ObjectPath = .root,
                               timeout: Duration = .seconds(25)) async throws(BusError) -> [ObjectPath: [String: [String: Value]]] {
        let reply = try await call(.methodCall(destination: service, path: path, interface: Connection.objectManagerInterface,
                                               member: "GetManagedObjects"), timeout: timeout)
        var out: [ObjectPath: [String: [String: Value]]] = [:]
        for entry in reply.body.first?.dictionaryEntries ?? [] {
            guard let objectPath = entry.key.objectPath else { continue }
            out[objectPath] = Connection.interfaces(entry.value)
        }
        return out
    }

    /// `a{sa{sv}}` (an InterfacesAdded or GetManagedObjects entry) as nested dictionaries; variants unwrapped.
    public static func interfaces(_ value: Value) -> [String: [String: Value]] {
        var out: [String: [String: Value]] = [:]
        for entry in value.dictionaryEntries ?? [] {
            guard let name = entry.key.string else { continue }
            out[name] = (entry.value.stringDictionary ?? [:]).mapValues(\.unwrapped)
        }
        return out
    }

    public func getProperty(_ service: String, _ path: ObjectPath, _ interface: String, _ name: String) async throws(BusError) -> Value {
        let reply = try await call(.methodCall(destination: service, path: path, interface: Connection.propertiesInterface,
                                               member: "Get", [.string(interface), .string(name)]))
        return reply.body.first?.unwrapped ?? .structure([])
    }

    public func getAllProperties(_ service: String, _ path: ObjectPath, _ interface: String,
                                 timeout: Duration = .seconds(25)) async throws(BusError) -> [String: Value] {
        let reply = try await call(.methodCall(destination: service, path: path, interface: Connection.propertiesInterface,
                                               member: "GetAll", [.string(interface)]), timeout: timeout)
        return (reply.body.first?.stringDictionary ?? [:]).mapValues(\.unwrapped)
    }

    public func setProperty(_ service: String, _ path: ObjectPath, _ interface: String, _ name: String, _ value: Value) async throws(BusError) {
        _ = try await call(.methodCall(destination: service, path: path, interface: Connection.propertiesInterface,
                                       member: "Set", [.string(interface), .string(name), .variant(value)]))
    }
}
