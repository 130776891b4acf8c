import DBus
import Synchronization
import Threading

/// A mirror of org.bluez's object tree: path → interface → property → value. The one place it
/// is written.
///
/// Writers (signals on the D-Bus thread, `load` and `refresh` from tasks) take turns: each
/// change is applied and handed to the observer before the next writer starts, so the observer
/// sees changes in the order they were applied. Signals are applied as they arrive. While `GetManagedObjects` is under
/// way they are held back; when its reply comes, those with a serial above the reply's are
/// applied on top of it (bluetoothd numbers its signals and replies in the order it sends
/// them), so no change is lost and none is applied twice. Only signals from the connection
/// that answered `GetManagedObjects` (bluetoothd's unique name) count: any bus peer can send
/// a signal to gattway directly, and a forged one must not change what gattway believes.
final class ObjectTree: Sendable {
    typealias Interfaces = [String: [String: Value]]

    /// A change, as observers see it.
    enum Change: Sendable {
        case added(ObjectPath, Interfaces)
        case removed(ObjectPath, [String])
        case properties(ObjectPath, interface: String, changed: [String: Value], invalidated: [String])
        case reloaded
    }

    private struct State {
        var objects: [ObjectPath: Interfaces] = [:]
        var loading = true
        var held: [Message] = []
        /// bluetoothd's unique name, from the last `GetManagedObjects` reply.
        var owner: String?
    }

    private let state = Mutex(State())
    /// Held by a writer from applying its change until the observer has seen it.
    private let turn = Mutex(())
    private let observerSlot = HandlerSlot<Change>()
    /// Objects looked at by the scans (`objects(with:)`, `subtree`): what a test counts to show
    /// that a notification needs none.
    let visits = Atomic<Int>(0)

    init() {}

    /// Sets the one observer of changes. It runs on the writer's thread, in order, and may read
    /// the tree but must not write it (that writer holds the turn).
    func setObserver(_ observer: @escaping @Sendable (Change) -> Void) { observerSlot.set(observer) }

    /// Applies a change under the tree's lock, then hands it to the observer, in one turn.
    private func write(_ apply: (inout State) -> [Change]) {
        turn.withLock { _ in
            let changes = state.withLock { s -> [Change] in apply(&s) }
            for change in changes { observerSlot(change) }
        }
    }

    /// Starts holding signals back until `load` completes.
    func beginLoading() { state.withLock { $0.loading = true; $0.held.removeAll() } }

    /// bluetoothd's unique bus name, as the last load found it.
    var owner: String? { state.withLock { $0.owner } }

    /// Installs a `GetManagedObjects` result whose reply had serial `replySerial` and came from `owner`.
    ///
    /// A held signal older than the reply is already part of the snapshot, so it is not applied;
    /// but a characteristic's new `Value` in it was a notification, and observers still hear of
    /// it (after `.reloaded`, in order), or it would be lost to every client.
    func load(_ objects: [ObjectPath: Interfaces], replySerial: UInt32, owner: String?) {
        write { s in
            s.objects = objects
            s.loading = false
            s.owner = owner
            let held = s.held.filter { $0.sender == owner }
            s.held.removeAll()
            var changes: [Change] = [.reloaded]
            for signal in held {
                if signal.serial > replySerial {
                    if let change = ObjectTree.apply(signal, to: &s.objects) { changes.append(change) }
                } else if let value = ObjectTree.notifiedValue(signal) {
                    changes.append(value)
                }
            }
            return changes
        }
    }

    /// A PropertiesChanged that carries a characteristic's `Value`, as a value-only change.
    private static func notifiedValue(_ signal: Message) -> Change? {
        guard signal.member == "PropertiesChanged", let path = signal.path, signal.body.count >= 2,
              signal.body[0].string == "org.bluez.GattCharacteristic1",
              let value = signal.body[1].stringDictionary?["Value"]?.unwrapped else { return nil }
        return .properties(path, interface: "org.bluez.GattCharacteristic1", changed: ["Value": value], invalidated: [])
    }

    /// Ends a load that failed, keeping the objects: the signals held meanwhile apply on top.
    func resume() {
        write { s in
            s.loading = false
            let held = s.held.filter { $0.sender == s.owner }
            s.held.removeAll()
            return held.compactMap { ObjectTree.apply($0, to: &s.objects) }
        }
    }

    /// Empties the tree (org.bluez left the bus).
    func clear() {
        write { s in
            s.objects.removeAll(); s.loading = true; s.held.removeAll(); s.owner = nil
            return [.reloaded]
        }
    }

    /// Applies an InterfacesAdded, InterfacesRemoved or PropertiesChanged signal.
    func apply(_ signal: Message) {
        write { s in
            if s.loading {
                if s.held.count < 10_000 { s.held.append(signal) }
                return []
            }
            guard signal.sender == s.owner else { return [] }
            return ObjectTree.apply(signal, to: &s.objects).map { [$0] } ?? []
        }
    }

    /// Merges properties read with `GetAll` (BlueZ does not always signal a change, e.g. the
    /// Connected=true after Connect; FIELD-NOTES).
    func refresh(_ path: ObjectPath, _ interface: String, _ props: [String: Value]) {
        write { s in
            guard s.objects[path] != nil else { return [] }
            let old = s.objects[path]?[interface] ?? [:]
            let changed = props.filter { old[$0.key] != $0.value }
            guard !changed.isEmpty else { return [] }
            s.objects[path]?[interface, default: [:]].merge(changed) { _, new in new }
            return [.properties(path, interface: interface, changed: changed, invalidated: [])]
        }
    }

    func interfaces(at path: ObjectPath) -> Interfaces? { state.withLock { $0.objects[path] } }

    /// Objects in the mirror.
    var count: Int { state.withLock { $0.objects.count } }

    func properties(at path: ObjectPath, _ interface: String) -> [String: Value]? {
        state.withLock { $0.objects[path]?[interface] }
    }

    /// Every object below `root` (inclusive) that has `interface`, with that interface's properties.
    func objects(with interface: String, under root: ObjectPath = .root) -> [(ObjectPath, [String: Value])] {
        state.withLock { s in
            visits.add(s.objects.count, ordering: .relaxed)
            return s.objects.compactMap { path, interfaces in
                guard path.isDescendant(of: root), let props = interfaces[interface] else { return nil }
                return (path, props)
            }.sorted { $0.0 < $1.0 }
        }
    }

    /// Every object strictly below `root`, with all its interfaces, in path order.
    func subtree(under root: ObjectPath) -> [(ObjectPath, Interfaces)] {
        state.withLock { s in
            visits.add(s.objects.count, ordering: .relaxed)
            return s.objects.filter { $0.key != root && $0.key.isDescendant(of: root) }
                .map { ($0.key, $0.value) }.sorted { $0.0 < $1.0 }
        }
    }

    /// A PropertiesChanged's changes (variants unwrapped) and invalidations merged into an
    /// interface's properties, in one pass; what changed, or nil when the object lacks the interface.
    private static func merge(_ entries: [Value.DictionaryEntry], _ invalidated: [String],
                              into props: inout [String: Value]?) -> [String: Value]? {
        guard props != nil else { return nil }
        var changed: [String: Value] = Dictionary(minimumCapacity: entries.count)
        for entry in entries {
            guard let name = entry.key.string else { continue }
            let value = entry.value.unwrapped
            changed[name] = value
            props![name] = value
        }
        for name in invalidated { props![name] = nil }
        return changed
    }

    private static func apply(_ signal: Message, to objects: inout [ObjectPath: Interfaces]) -> Change? {
        switch signal.member {
        case "InterfacesAdded":
            guard signal.body.count >= 2, let path = signal.body[0].objectPath else { return nil }
            let added = Connection.interfaces(signal.body[1])
            objects[path, default: [:]].merge(added) { _, new in new }
            return .added(path, added)
        case "InterfacesRemoved":
            guard signal.body.count >= 2, let path = signal.body[0].objectPath else { return nil }
            let names = signal.body[1].strings ?? []
            for name in names { objects[path]?[name] = nil }
            if objects[path]?.isEmpty == true { objects[path] = nil }
            return .removed(path, names)
        case "PropertiesChanged":
            guard let path = signal.path, signal.body.count >= 2, let interface = signal.body[0].string,
                  let object = objects.index(forKey: path) else { return nil }
            let invalidated = signal.body.count > 2 ? (signal.body[2].strings ?? []) : []
            // The object's properties changed in place: the path is looked up (and hashed) once.
            guard let changed = merge(signal.body[1].dictionaryEntries ?? [], invalidated, into: &objects.values[object][interface])
            else { return nil }
            return .properties(path, interface: interface, changed: changed, invalidated: invalidated)
        default:
            return nil
        }
    }
}
