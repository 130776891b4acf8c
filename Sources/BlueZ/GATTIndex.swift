import BLE
import DBus
import Synchronization

/// Where things are in BlueZ's object tree: the adapter in use, and per device its GATT tree
/// (services → characteristics → descriptors, in handle order) with each attribute's object path.
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
        /// `.some(nil)`: no adapter.
        var adapter: ObjectPath?? = nil
        var devices: [ObjectPath: DeviceGATT] = [:]
    }

    private let tree: ObjectTree
    /// "hci0" when the user chose one; otherwise the first adapter BlueZ lists.
    let adapterName: String?
    private let state = Mutex(State())
    /// Device entries built (tests count them).
    let builds = Atomic<Int>(0)

    init(tree: ObjectTree, adapterName: String?) {
        self.tree = tree
        self.adapterName = adapterName
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
            s.adapter = nil
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

    /// The adapter in use: the chosen one, or the first BlueZ lists.
    func adapterPath() -> ObjectPath? {
        let (generation, kept) = state.withLock { ($0.generation, $0.adapter) }
        if let kept { return kept }
        let adapters = tree.objects(with: BlueZ.adapterInterface, under: BlueZ.root)
        let path = adapterName.map { name in adapters.first { $0.0.lastElement == name }?.0 } ?? adapters.first?.0
        state.withLock { s in
            if s.generation == generation { s.adapter = .some(path) }
        }
        return path
    }

    /// The device object `path` is or lies under, on the adapter in use.
    func device(of path: ObjectPath) -> ObjectPath? {
        guard let adapter = adapterPath() else { return nil }
        var p = path
        while let parent = p.parent {
            if parent == adapter { return p }
            p = parent
        }
        return nil
    }

    /// The path of a device the adapter knows, or `unknownDevice`.
    func devicePath(_ id: BluetoothAddress) throws(BLEError) -> ObjectPath {
        guard let adapter = adapterPath(), let path = adapter.child(BlueZ.pathElement(id)),
              tree.properties(at: path, BlueZ.deviceInterface) != nil else {
            throw BLEError(.unknownDevice, "no device \(id) is known to the adapter; scan for it first")
        }
        return path
    }

    /// What a notification from the characteristic at `path` carries besides its value: two
    /// parent steps and two dictionary lookups once the device's entry is built.
    func source(ofCharacteristic path: ObjectPath) -> ValueUpdate? {
        guard let device = path.parent?.parent else { return nil }
        if let known = state.withLock({ $0.devices[device]?.sources[path] }) { return known }
        guard device.parent == adapterPath() else { return nil }
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
