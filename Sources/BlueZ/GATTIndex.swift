import BLE
import DBus
import Synchronization

/// Where things are in BlueZ's object tree: the adapters in use, each device's objects (one per
/// adapter that hears it), and per device object its GATT tree (services → characteristics →
/// descriptors, in handle order) with each attribute's object path.
/// A notification is found by one dictionary lookup; nothing scans the tree for it.
///
/// An entry is built from the mirror when first asked for and kept until an object of its own
/// comes or goes (InterfacesAdded/Removed), or one of its characteristics changes anything but
/// its value (Notifying, Flags); a reload drops everything. `update` runs first in the tree's
/// observer, so no one reads an entry older than the change being handled.
final class GATTIndex: Sendable {
    /// One device's GATT tree and paths.
    struct DeviceGATT: Sendable {
        var address: BluetoothAddress
        var services: [GATTService]
        var characteristicPaths: [UInt16: ObjectPath]
        var descriptorPaths: [UInt16: ObjectPath]
        /// Per characteristic path, what its notifications carry besides the value (`value` empty).
        var sources: [ObjectPath: ValueUpdate]
    }

    private struct State {
        /// Bumped by every drop, so that an entry built from an older mirror is not kept.
        var generation: UInt64 = 0
        /// The adapters in use, in name order, once looked up.
        var adapters: [ObjectPath]?
        var devices: [ObjectPath: DeviceGATT] = [:]
    }

    private let tree: ObjectTree
    /// The adapters the user chose, or all.
    let selection: AdapterSelection
    private let state = Mutex(State())
    /// Device entries built (tests count them).
    let builds = Atomic<Int>(0)

    init(tree: ObjectTree, selection: AdapterSelection) {
        self.tree = tree
        self.selection = selection
    }

    // MARK: - Keeping it current

    /// Called by the tree's observer with every change, before anything else handles it.
    func update(_ change: ObjectTree.Change) {
        switch change {
        case .reloaded:
            dropAll()
        case .added(let path, let interfaces):
            if interfaces[BlueZ.adapterInterface] != nil { dropAll() } else { drop(device: path, if: interfaces.keys) }
        case .removed(let path, let names):
            if names.contains(BlueZ.adapterInterface) { dropAll() } else { drop(device: path, if: names) }
        case .properties(let path, let interface, let changed, let invalidated):
            guard BlueZ.gattInterfaces.contains(interface) else { return }
            let onlyValue = invalidated.isEmpty && changed.keys.allSatisfy { $0 == "Value" || $0 == "MTU" }
            if !onlyValue { drop(device: path, if: [interface]) }
        }
    }

    private func dropAll() {
        state.withLock { s in
            s.generation += 1
            s.adapters = nil
            s.devices.removeAll()
        }
    }

    /// Drops the entry of the device `path` belongs to, if `interfaces` can change it.
    private func drop(device path: ObjectPath, if interfaces: some Sequence<String>) {
        guard interfaces.contains(where: { BlueZ.gattInterfaces.contains($0) || $0 == BlueZ.deviceInterface }),
              let device = device(of: path) else { return }
        state.withLock { s in
            s.generation += 1
            s.devices[device] = nil
        }
    }

    // MARK: - Lookups

    /// The adapters in use, in name order (hci0, hci1, ..., hci10): the chosen ones BlueZ has, or
    /// all it lists.
    func adapterPaths() -> [ObjectPath] {
        let (generation, kept) = state.withLock { ($0.generation, $0.adapters) }
        if let kept { return kept }
        let paths = tree.objects(with: BlueZ.adapterInterface, under: BlueZ.root).map(\.0)
            .filter { $0.parent == BlueZ.root && selection.includes(String($0.lastElement)) }
            .sorted { AdapterSelection.precedes(String($0.lastElement), String($1.lastElement)) }
        state.withLock { s in
            if s.generation == generation { s.adapters = paths }
        }
        return paths
    }

    /// The first adapter in use (for what names one: a log line, a state without a better one).
    func adapterPath() -> ObjectPath? { adapterPaths().first }

    /// Whether `path` is an adapter in use.
    func isInUse(adapter path: ObjectPath) -> Bool { adapterPaths().contains(path) }

    /// The device object `path` is or lies under, on an adapter in use.
    func device(of path: ObjectPath) -> ObjectPath? {
        var p = path
        while let parent = p.parent {
            if parent.parent == BlueZ.root { return isInUse(adapter: parent) ? p : nil }
            p = parent
        }
        return nil
    }

    /// The device's objects: one on each adapter in use that knows it, in adapter order.
    func devicePaths(_ id: BluetoothAddress) -> [ObjectPath] {
        let element = BlueZ.pathElement(id)
        return adapterPaths().compactMap { adapter in
            adapter.child(element).flatMap { tree.properties(at: $0, BlueZ.deviceInterface) != nil ? $0 : nil }
        }
    }

    /// Where BlueZ puts the device's object on the adapter in use named `adapter`, whether or not
    /// the object is there yet; nil when no such adapter is in use.
    func devicePath(_ id: BluetoothAddress, onAdapter adapter: Substring) -> ObjectPath? {
        adapterPaths().first { $0.lastElement == adapter }?.child(BlueZ.pathElement(id))
    }

    /// The device's object: the one whose link is up, else the first adapter's that knows it; or
    /// `unknownDevice`.
    func devicePath(_ id: BluetoothAddress) throws(BLEError) -> ObjectPath {
        let paths = devicePaths(id)
        if paths.count > 1, let linked = paths.first(where: { tree.properties(at: $0, BlueZ.deviceInterface)?["Connected"]?.bool == true }) {
            return linked
        }
        guard let path = paths.first else {
            throw BLEError(.unknownDevice, "no device \(id) is known to the adapter; scan for it first")
        }
        return path
    }

    /// What a notification from the characteristic at `path` carries besides its value: two
    /// parent steps and two dictionary lookups once the device's entry is built.
    func source(ofCharacteristic path: ObjectPath) -> ValueUpdate? {
        guard let device = path.parent?.parent else { return nil }
        if let known = state.withLock({ $0.devices[device]?.sources[path] }) { return known }
        guard let adapter = device.parent, isInUse(adapter: adapter) else { return nil }
        return gatt(device)?.sources[path]
    }

    /// The device's GATT entry, built from the mirror if it is not kept.
    func gatt(_ device: ObjectPath) -> DeviceGATT? {
        let (generation, kept) = state.withLock { ($0.generation, $0.devices[device]) }
        if let kept { return kept }
        guard let entry = build(device) else { return nil }
        state.withLock { s in
            if s.generation == generation { s.devices[device] = entry }
        }
        return entry
    }

    /// The connection's ATT MTU: BlueZ puts it on every characteristic.
    func mtu(_ device: ObjectPath) -> Int? {
        guard let path = gatt(device)?.characteristicPaths.values.min() else { return nil }
        return tree.properties(at: path, BlueZ.gattCharacteristicInterface)?["MTU"]?.integer
    }

    // MARK: - Building an entry

    private func build(_ device: ObjectPath) -> DeviceGATT? {
        guard let address = tree.properties(at: device, BlueZ.deviceInterface).flatMap(DeviceProperties.address) else { return nil }
        builds.add(1, ordering: .relaxed)
        var services: [ObjectPath: GATTService] = [:]
        var characteristics: [ObjectPath: (service: ObjectPath, value: GATTCharacteristic)] = [:]
        var descriptors: [(characteristic: ObjectPath, path: ObjectPath, value: GATTDescriptor)] = []
        for (path, interfaces) in tree.subtree(under: device) {
            guard let parent = path.parent else { continue }
            if let props = interfaces[BlueZ.gattServiceInterface], parent == device,
               let (handle, uuid) = BlueZ.identity(path, props, prefix: "service") {
                services[path] = GATTService(handle: handle, uuid: uuid, isPrimary: props["Primary"]?.bool ?? true, characteristics: [])
            } else if let props = interfaces[BlueZ.gattCharacteristicInterface],
                      let (handle, uuid) = BlueZ.identity(path, props, prefix: "char") {
                let flags = props["Flags"]?.strings ?? []
                characteristics[path] = (parent, GATTCharacteristic(
                    handle: handle, uuid: uuid, serviceHandle: 0, properties: BlueZ.properties(flags: flags), flags: flags,
                    isNotifying: props["Notifying"]?.bool ?? false, descriptors: []))
            } else if let props = interfaces[BlueZ.gattDescriptorInterface],
                      let (handle, uuid) = BlueZ.identity(path, props, prefix: "desc") {
                descriptors.append((parent, path, GATTDescriptor(handle: handle, uuid: uuid)))
            }
        }
        var entry = DeviceGATT(address: address, services: [], characteristicPaths: [:], descriptorPaths: [:], sources: [:])
        for d in descriptors where characteristics[d.characteristic] != nil {
            characteristics[d.characteristic]?.value.descriptors.append(d.value)
            entry.descriptorPaths[d.value.handle] = d.path
        }
        for (path, c) in characteristics {
            guard let service = services[c.service] else { continue }
            var characteristic = c.value
            characteristic.serviceHandle = service.handle
            characteristic.descriptors.sort { $0.handle < $1.handle }
            services[c.service]?.characteristics.append(characteristic)
            entry.characteristicPaths[characteristic.handle] = path
            entry.sources[path] = ValueUpdate(device: address, serviceHandle: service.handle, serviceUUID: service.uuid,
                                              characteristicHandle: characteristic.handle, characteristicUUID: characteristic.uuid, value: [])
        }
        entry.services = services.values.map { service in
            var s = service
            s.characteristics.sort { $0.handle < $1.handle }
            return s
        }.sorted { $0.handle < $1.handle }
        return entry
    }
}
