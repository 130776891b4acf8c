import BLE
import DBus

/// The simulator's state and behaviour. Every incoming message is handled here, one at a time
/// and in arrival order (the `Simulator` feeds them in through one queue); a handler never
/// waits: anything that takes time is a task in `tasks` that calls back in later. Signals and
/// replies go out through `Connection.send`, which keeps their order, so what a client sees
/// is the order in which this actor emitted it.
actor Engine {
    let connection: Connection
    let tasks: TaskBag
    let log: @Sendable (String) -> Void
    let adapterConfig: SimulatorConfiguration.Adapter

    static let root = ObjectPath.root
    static let bluezPath = ObjectPath(trusted: "/org/bluez")
    static let adapterPath = ObjectPath(trusted: "/org/bluez/hci0")
    static let controlPath = ObjectPath(trusted: "/io/gattway/simulator")

    // MARK: adapter
    var powered: Bool
    var adapterAlias: String?
    var discoverable = false
    var discoverableTimeout: UInt32 = 180
    var pairable = true
    var pairableTimeout: UInt32 = 0
    var discovering = false
    /// Discovery sessions and pre-set filters, by D-Bus sender.
    var discoveryClients: [String: DiscoveryClient] = [:]
    /// Devices reported during the current discovery (their RSSI is invalidated when it stops).
    var discoveryFound: Set<Int> = []
    /// Registered agents by owner (one per D-Bus client, as bluetoothd allows).
    var agents: [String: Agent] = [:]
    /// bluetoothd's queue of agents by owner: the first is the default agent (the first one
    /// registered, or the last that asked to be), the next one takes over when it goes.
    var defaultAgents: [String] = []

    // MARK: devices and objects
    var devices: [DeviceState]
    /// Every exported object path.
    var objects: [ObjectPath: ObjectRef] = [:]
    /// Method calls per "member path", for CallCount.
    var callCounts: [String: UInt32] = [:]
    private var nextID = 0
    var started = false
    /// bluetoothd is not running (`Restart`): nothing it would signal goes out.
    var down = false

    enum ObjectRef: Hashable, Sendable {
        case root, node, bluez, adapter, control
        case device(Int)
        case service(Int, Int)
        case characteristic(Int, Int)
        case descriptor(Int, Int)
    }

    init(connection: Connection, configuration: SimulatorConfiguration, tasks: TaskBag, log: @escaping @Sendable (String) -> Void) {
        self.connection = connection
        self.tasks = tasks
        self.log = log
        adapterConfig = configuration.adapter
        powered = configuration.adapter.powered
        devices = configuration.devices.map { DeviceState(config: $0, adapterPath: Engine.adapterPath) }
        for path in ["/", "/org", "/io", "/io/gattway"] { objects[ObjectPath(trusted: path)] = path == "/" ? .root : .node }
        objects[Engine.bluezPath] = .bluez
        objects[Engine.adapterPath] = .adapter
        objects[Engine.controlPath] = .control
    }

    func makeID() -> Int {
        nextID += 1
        return nextID
    }

    // MARK: - Sending

    func send(_ message: Message) {
        if down && message.kind == .signal { return }
        do { try connection.send(message) } catch { log("cannot send \(message.member ?? message.errorName ?? "reply"): \(error)") }
    }

    func reply(_ call: Message, _ body: [Value] = []) {
        guard !call.noReplyExpected else { return }
        send(call.reply(body))
    }

    func fail(_ call: Message, _ error: BusError) {
        guard !call.noReplyExpected else { return }
        send(call.errorReply(error))
    }

    /// PropertiesChanged for `names`: each goes into `changed` with its current value, or into
    /// `invalidated` when the property does not exist now (as gdbus does).
    func propertiesChanged(_ ref: ObjectRef, _ interface: String, _ names: [String]) {
        guard let path = path(of: ref), let current = properties(ref, interface) else { return }
        // An attribute that is not (or no longer) exported has nothing to signal.
        switch ref {
        case .service, .characteristic, .descriptor: guard objects[path] == ref else { return }
        default: break
        }
        var changed: [(String, Value)] = []
        var invalidated: [String] = []
        for name in names {
            if let value = current.first(where: { $0.0 == name })?.1 { changed.append((name, value)) } else { invalidated.append(name) }
        }
        send(.signal(path: path, interface: Interface.properties, member: "PropertiesChanged",
                     [.string(interface), .stringVariantDictionary(changed), .strings(invalidated)]))
    }

    /// Exports an object and announces it.
    func export(_ ref: ObjectRef) {
        guard let path = path(of: ref) else { return }
        objects[path] = ref
        send(.signal(path: Engine.root, interface: Interface.objectManager, member: "InterfacesAdded",
                     [.objectPath(path), interfacesValue(ref)]))
    }

    /// Withdraws an object and announces it.
    func unexport(_ ref: ObjectRef) {
        guard let path = path(of: ref), objects.removeValue(forKey: path) != nil else { return }
        send(.signal(path: Engine.root, interface: Interface.objectManager, member: "InterfacesRemoved",
                     [.objectPath(path), .strings(interfaces(of: ref))]))
    }

    // MARK: - Dispatch

    func handle(_ message: Message) {
        switch message.kind {
        case .signal: nameOwnerChanged(message)
        case .methodCall: dispatch(message)
        default: break
        }
    }

    private func dispatch(_ call: Message) {
        guard let path = call.path, let member = call.member else { return }
        guard let ref = objects[path] else { return fail(call, DBusError.unknownObject(call)) }
        let available = interfaces(of: ref)
        let interface: String
        if let named = call.interface {
            guard available.contains(named) else { return fail(call, DBusError.unknownMethod(call)) }
            interface = named
        } else {
            guard let found = available.first(where: { Interface.method($0, member) != nil }) else {
                return fail(call, DBusError.unknownMethod(call))
            }
            interface = found
        }
        // gdbus matches a method by name and exact signature; anything else is unknown.
        guard let method = Interface.method(interface, member), method.input == call.signature else {
            return fail(call, DBusError.unknownMethod(call))
        }
        callCounts[member + " " + path.rawValue, default: 0] &+= 1
        let sender = call.sender ?? ""
        switch (interface, ref) {
        case (Interface.introspectable, _): reply(call, [.string(introspect(path, ref))])
        case (Interface.properties, _): propertiesCall(call, ref)
        case (Interface.objectManager, _): reply(call, [managedObjects()])
        case (Interface.agentManager, _): agentManagerCall(call, member: member, sender: sender)
        case (Interface.profileManager, _): reply(call)
        case (Interface.adapter, _): adapterCall(call, member: member, sender: sender)
        case (Interface.device, .device(let d)): deviceCall(call, member: member, device: d, sender: sender)
        case (Interface.characteristic, .characteristic(let d, let c)): characteristicCall(call, member: member, device: d, characteristic: c, sender: sender)
        case (Interface.descriptor, .descriptor(let d, let x)): descriptorCall(call, member: member, device: d, descriptor: x)
        case (Interface.control, _): controlCall(call, member: member)
        default: fail(call, DBusError.unknownMethod(call))
        }
    }

    /// A D-Bus client went away: its discovery, filters, notification sessions and pairing end.
    private func nameOwnerChanged(_ signal: Message) {
        guard signal.member == "NameOwnerChanged", signal.body.count == 3,
              let name = signal.body[0].string, name.hasPrefix(":"), signal.body[2].string == "" else { return }
        clientVanished(name)
    }

    func clientVanished(_ name: String) {
        if agents[name] != nil { dropAgent(name) }
        if discoveryClients[name] != nil { removeDiscoveryClient(name) }
        for d in devices.indices {
            for c in devices[d].gatt.characteristics.indices where devices[d].gatt.characteristics[c].state.sessions[name] != nil {
                endSession(device: d, characteristic: c, sender: name)
            }
            if devices[d].pairing?.sender == name { pairingCallerLeft(d) }
        }
    }

    // MARK: - Objects

    func path(of ref: ObjectRef) -> ObjectPath? {
        switch ref {
        case .root: return Engine.root
        case .node: return nil
        case .bluez: return Engine.bluezPath
        case .adapter: return Engine.adapterPath
        case .control: return Engine.controlPath
        case .device(let d): return devices[d].path
        case .service(let d, let s): return devices[d].gatt.services[s].path
        case .characteristic(let d, let c): return devices[d].gatt.characteristics[c].path
        case .descriptor(let d, let x): return devices[d].gatt.descriptors[x].path
        }
    }

    func interfaces(of ref: ObjectRef) -> [String] {
        let standard = [Interface.introspectable, Interface.properties]
        switch ref {
        case .root: return standard + [Interface.objectManager]
        case .node: return [Interface.introspectable]
        case .bluez: return standard + [Interface.agentManager, Interface.profileManager]
        case .adapter: return standard + [Interface.adapter]
        case .control: return standard + [Interface.control]
        case .device: return standard + [Interface.device]
        case .service: return standard + [Interface.service]
        case .characteristic: return standard + [Interface.characteristic]
        case .descriptor: return standard + [Interface.descriptor]
        }
    }

    /// `a{sa{sv}}` of one object, with the empty standard interfaces as gdbus lists them.
    func interfacesValue(_ ref: ObjectRef) -> Value {
        .dictionary(key: Types.s, value: Types.asv, interfaces(of: ref).map { name in
            .init(.string(name), .stringVariantDictionary(properties(ref, name) ?? []))
        })
    }

    func managedObjects() -> Value {
        let exported = objects.filter { entry in
            switch entry.value {
            case .root, .node, .control: return false
            default: return true
            }
        }.sorted { $0.key < $1.key }
        return .dictionary(key: Types.o, value: Types.asasv, exported.map { .init(.objectPath($0.key), interfacesValue($0.value)) })
    }

    private func introspect(_ path: ObjectPath, _ ref: ObjectRef) -> String {
        let prefix = path.rawValue == "/" ? "/" : path.rawValue + "/"
        var children: Set<String> = []
        for other in objects.keys where other.rawValue.hasPrefix(prefix) && other != path {
            if let first = other.rawValue.dropFirst(prefix.count).split(separator: "/").first { children.insert(String(first)) }
        }
        return Interface.introspection(interfaces: interfaces(of: ref), children: children.sorted())
    }

    // MARK: - Properties

    /// The properties an object's interface has now (nil: no such interface).
    func properties(_ ref: ObjectRef, _ interface: String) -> [(String, Value)]? {
        guard interfaces(of: ref).contains(interface) else { return nil }
        switch (ref, interface) {
        case (.adapter, Interface.adapter): return adapterProperties()
        case (.device(let d), Interface.device): return deviceProperties(d)
        case (.service(let d, let s), Interface.service): return serviceProperties(d, s)
        case (.characteristic(let d, let c), Interface.characteristic): return characteristicProperties(d, c)
        case (.descriptor(let d, let x), Interface.descriptor): return descriptorProperties(d, x)
        default: return []
        }
    }

    private func adapterProperties() -> [(String, Value)] {
        [
            ("Address", .string(adapterConfig.address.description)),
            ("AddressType", .string("public")),
            ("Name", .string(adapterConfig.name)),
            ("Alias", .string(adapterAlias ?? adapterConfig.name)),
            ("Class", .uint32(0)),
            ("Powered", .bool(powered)),
            ("Discoverable", .bool(discoverable)),
            ("DiscoverableTimeout", .uint32(discoverableTimeout)),
            ("Pairable", .bool(pairable)),
            ("PairableTimeout", .uint32(pairableTimeout)),
            ("Discovering", .bool(discovering)),
            ("UUIDs", .strings([0x1800, 0x1801, 0x180A].map { BluetoothUUID(uint16: $0).uuidString })),
            ("Modalias", .string("usb:v1D6Bp0246d0542")),
            ("Roles", .strings(["central", "peripheral"])),
        ]
    }

    private func deviceProperties(_ d: Int) -> [(String, Value)] {
        let device = devices[d]
        var p: [(String, Value)] = [
            ("Address", .string(device.address.description)),
            ("AddressType", .string(device.config.addressType)),
        ]
        if let name = device.name { p.append(("Name", .string(name))) }
        p += [
            ("Alias", .string(device.displayAlias)),
            ("Paired", .bool(device.paired)),
            ("Bonded", .bool(device.bonded)),
            ("Trusted", .bool(device.trusted)),
            ("Blocked", .bool(device.blocked)),
            ("LegacyPairing", .bool(false)),
        ]
        if let rssi = device.rssi { p.append(("RSSI", .int16(Int16(clamping: rssi)))) }
        p += [
            ("Connected", .bool(device.connected)),
            ("UUIDs", .strings(device.uuids.map(\.uuidString))),
            ("Adapter", .objectPath(Engine.adapterPath)),
        ]
        if !device.manufacturerData.isEmpty {
            p.append(("ManufacturerData", .dictionary(key: Types.q, value: Types.v, device.manufacturerData.sorted { $0.key < $1.key }.map {
                .init(.uint16($0.key), .variant(.bytes($0.value)))
            })))
        }
        if !device.serviceData.isEmpty {
            p.append(("ServiceData", .dictionary(key: Types.s, value: Types.v, device.serviceData.sorted { $0.key < $1.key }.map {
                .init(.string($0.key.uuidString), .variant(.bytes($0.value)))
            })))
        }
        if let tx = device.txPower { p.append(("TxPower", .int16(Int16(clamping: tx)))) }
        p.append(("ServicesResolved", .bool(device.servicesResolved)))
        if adapterConfig.experimental, let flags = device.advertisingFlags { p.append(("AdvertisingFlags", .bytes(flags))) }
        return p
    }

    private func serviceProperties(_ d: Int, _ s: Int) -> [(String, Value)] {
        let service = devices[d].gatt.services[s]
        return [
            ("UUID", .string(service.uuid.uuidString)),
            ("Device", .objectPath(devices[d].path)),
            ("Primary", .bool(service.primary)),
            ("Includes", .objectPaths([])),
        ]
    }

    private func characteristicProperties(_ d: Int, _ c: Int) -> [(String, Value)] {
        let info = devices[d].gatt.characteristics[c]
        let state = info.state
        var p: [(String, Value)] = [
            ("UUID", .string(info.uuid.uuidString)),
            ("Service", .objectPath(devices[d].gatt.services[info.service].path)),
        ]
        if let cached = state.cached, !cached.isEmpty { p.append(("Value", .bytes(cached))) }
        if info.canNotify { p.append(("Notifying", .bool(state.notifying))) }
        p.append(("Flags", .strings(info.flags)))
        if info.hasWriteWithoutResponse { p.append(("WriteAcquired", .bool(false))) }
        if info.flags.contains("notify") { p.append(("NotifyAcquired", .bool(false))) }
        if devices[d].hasGATT { p.append(("MTU", .uint16(UInt16(devices[d].mtu)))) }
        return p
    }

    private func descriptorProperties(_ d: Int, _ x: Int) -> [(String, Value)] {
        let info = devices[d].gatt.descriptors[x]
        var p: [(String, Value)] = [
            ("UUID", .string(info.uuid.uuidString)),
            ("Characteristic", .objectPath(devices[d].gatt.characteristics[info.characteristic].path)),
        ]
        if let cached = info.state.cached, !cached.isEmpty { p.append(("Value", .bytes(cached))) }
        return p
    }

    /// Properties.Get, GetAll and Set, with gdbus's errors.
    private func propertiesCall(_ call: Message, _ ref: ObjectRef) {
        guard let interface = call.body.first?.string else { return fail(call, DBusError.invalidArgs("No arguments given")) }
        guard let current = properties(ref, interface) else {
            return fail(call, DBusError.invalidArgs("No such interface '\(interface)'"))
        }
        switch call.member {
        case "GetAll":
            reply(call, [.stringVariantDictionary(current)])
        case "Get":
            let name = call.body[1].string ?? ""
            guard let value = current.first(where: { $0.0 == name })?.1 else {
                return fail(call, DBusError.invalidArgs("No such property '\(name)'"))
            }
            reply(call, [.variant(value)])
        default:
            let name = call.body[1].string ?? ""
            guard let declared = Interface.property(interface, name) else {
                return fail(call, BusError(name: "org.freedesktop.DBus.Error.UnknownProperty", message: "No such property '\(name)'"))
            }
            guard declared.writable else {
                return fail(call, BusError(name: "org.freedesktop.DBus.Error.PropertyReadOnly", message: "Property '\(name)' is not writable"))
            }
            let value = call.body[2].unwrapped
            guard value.signature.rawValue == declared.type else {
                return fail(call, BusError(name: "org.freedesktop.DBus.Error.InvalidSignature", message: "Invalid signature for '\(name)'"))
            }
            setProperty(call, ref, name, value)
        }
    }

    /// Properties.Set: gdbus answers at once and signals the change afterwards.
    private func setProperty(_ call: Message, _ ref: ObjectRef, _ name: String, _ value: Value) {
        var changed: [String] = []
        switch (ref, name) {
        case (.adapter, "Powered"):
            return setPowered(value.bool ?? true, call: call)
        case (.adapter, "Alias"):
            let alias = value.string ?? ""
            adapterAlias = alias.isEmpty ? nil : alias
            changed = [name]
        case (.adapter, "Discoverable"):
            discoverable = value.bool ?? false
            changed = [name]
        case (.adapter, "Pairable"):
            pairable = value.bool ?? false
            changed = [name]
        case (.adapter, "DiscoverableTimeout"):
            discoverableTimeout = UInt32(value.integer ?? 0)
            changed = [name]
        case (.adapter, "PairableTimeout"):
            pairableTimeout = UInt32(value.integer ?? 0)
            changed = [name]
        case (.device(let d), "Alias"):
            let alias = value.string ?? ""
            let new: String? = alias.isEmpty ? nil : alias
            if new != devices[d].alias {
                devices[d].alias = new
                changed = [name]
            }
        case (.device(let d), "Trusted"):
            let trusted = value.bool ?? false
            if trusted != devices[d].trusted {
                devices[d].trusted = trusted
                changed = [name]
            }
        case (.device(let d), "Blocked"):
            reply(call)
            return setBlocked(d, value.bool ?? false)
        default:
            return fail(call, BusError(name: "org.freedesktop.DBus.Error.UnknownProperty", message: "No such property '\(name)'"))
        }
        reply(call)
        if !changed.isEmpty { propertiesChanged(ref, ref == .adapter ? Interface.adapter : Interface.device, changed) }
    }
}

/// Signatures used to build containers.
enum Types {
    static let s = Signature("s")!
    static let o = Signature("o")!
    static let q = Signature("q")!
    static let v = Signature("v")!
    static let asv = Signature("a{sv}")!
    static let asasv = Signature("a{sa{sv}}")!
}
