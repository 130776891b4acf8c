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
    /// The kernel's management events for the adapters (`Engine+Management`).
    let management: ManagementStream
    /// Where each management frame is encoded (its capacity kept: no allocation per frame).
    var frameBuffer: [UInt8] = []

    static let root = ObjectPath.root
    static let bluezPath = ObjectPath(trusted: "/org/bluez")
    static let controlPath = ObjectPath(trusted: "/io/gattway/simulator")

    // MARK: adapters
    /// Every configured adapter, plugged in or not, in configuration order.
    var adapters: [AdapterState]
    /// Registered agents by owner (one per D-Bus client, as bluetoothd allows).
    var agents: [String: Agent] = [:]
    /// bluetoothd's queue of agents by owner: the first is the default agent (the first one
    /// registered, or the last that asked to be), the next one takes over when it goes.
    var defaultAgents: [String] = []

    // MARK: devices and objects
    /// The peripherals in the room (an address rotation adds one).
    var peripherals: [Peripheral] = []
    /// bluetoothd's Device1 entries: one per adapter for each peripheral, exported once that
    /// adapter heard it.
    var devices: [DeviceState] = []
    /// Every exported object path.
    var objects: [ObjectPath: ObjectRef] = [:]
    /// Method calls per "member path", for CallCount.
    var callCounts: [String: UInt32] = [:]
    private var nextID = 0
    var started = false
    /// bluetoothd is not running (`Restart`): nothing it would signal goes out.
    var down = false
    /// Hands a message to the simulator's queue (signals of the clients followed by `watch`).
    var deliver: (@Sendable (Message) -> Void)?
    /// Clients with registered applications whose PropertiesChanged signals are followed.
    var watched: [String: Watch] = [:]

    enum Watch: Equatable, Sendable {
        case pending
        case subscribed(SubscriptionID)
    }

    enum ObjectRef: Hashable, Sendable {
        case root, node, bluez, control
        case adapter(Int)
        case device(Int)
        case service(Int, Int)
        case characteristic(Int, Int)
        case descriptor(Int, Int)
    }

    init(connection: Connection, configuration: SimulatorConfiguration, tasks: TaskBag, management: ManagementStream,
         log: @escaping @Sendable (String) -> Void) {
        self.connection = connection
        self.tasks = tasks
        self.management = management
        self.log = log
        adapters = configuration.adapters.map(AdapterState.init)
        for config in configuration.devices { Engine.add(config, to: &peripherals, &devices, adapters: adapters) }
        for path in ["/", "/org", "/io", "/io/gattway"] { objects[ObjectPath(trusted: path)] = path == "/" ? .root : .node }
        objects[Engine.bluezPath] = .bluez
        for a in adapters.indices { objects[adapters[a].path] = .adapter(a) }
        objects[Engine.controlPath] = .control
        management.setControllers(Set(adapters.filter(\.present).compactMap(\.controller)))
    }

    /// A new peripheral, with its Device1 entry (not exported yet) on every adapter.
    static func add(_ config: SimulatorConfiguration.Device, to peripherals: inout [Peripheral], _ devices: inout [DeviceState],
                    adapters: [AdapterState]) {
        var peripheral = Peripheral(config: config, adapters: adapters.map(\.config))
        for a in adapters.indices {
            peripheral.entries.append(devices.count)
            var entry = DeviceState(config: config, adapterPath: adapters[a].path, adapter: a, peer: peripherals.count)
            entry.staleLink = config.faults.staleLink
            devices.append(entry)
        }
        peripherals.append(peripheral)
    }

    /// The settings of the adapter a Device1 entry belongs to.
    func adapterConfig(_ d: Int) -> SimulatorConfiguration.Adapter { adapters[devices[d].adapter].config }

    /// The entry through which the peripheral has its link (ATT up), if it has one.
    func linked(_ p: Int) -> Int? { peripherals[p].entries.first { devices[$0].hasGATT } }

    func setDeliver(_ deliver: @escaping @Sendable (Message) -> Void) { self.deliver = deliver }

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
        case .signal:
            if message.member == "NameOwnerChanged" { nameOwnerChanged(message) } else { applicationSignal(message) }
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
        case (Interface.adapter, .adapter(let a)): adapterCall(call, member: member, adapter: a, sender: sender)
        case (Interface.gattManager, .adapter(let a)): gattManagerCall(call, member: member, adapter: a, sender: sender)
        case (Interface.advertisingManager, .adapter(let a)): advertisingManagerCall(call, member: member, adapter: a, sender: sender)
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
        for a in adapters.indices where adapters[a].discoveryClients[name] != nil { removeDiscoveryClient(a, name) }
        for d in devices.indices {
            for c in devices[d].gatt.characteristics.indices where devices[d].gatt.characteristics[c].state.sessions[name] != nil {
                endSession(device: d, characteristic: c, sender: name)
            }
            if devices[d].pairing?.sender == name { pairingCallerLeft(d) }
        }
        localClientVanished(name)
        unwatch(name)
    }

    // MARK: - Objects

    func path(of ref: ObjectRef) -> ObjectPath? {
        switch ref {
        case .root: return Engine.root
        case .node: return nil
        case .bluez: return Engine.bluezPath
        case .adapter(let a): return adapters[a].path
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
        case .adapter: return standard + [Interface.adapter, Interface.gattManager, Interface.advertisingManager]
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
