import BLE
import DBus

/// bluetoothd's GATT cache of one device (its gatt_db, kept across connections as with the
/// default `Cache = always`): the services, characteristics and descriptors it discovered,
/// which are its D-Bus objects, with its client-side state of each (the cached values, notify
/// sessions, requests on the way). What the peripheral holds now is its `AttributeTable`;
/// after a firmware change the two differ until bluetoothd discovers again.
///
/// Entries are appended and never reused, so that an index (in an `Engine.ObjectRef`, or
/// captured by a timer) names the same entry for as long as the cache lives; a service that a
/// new discovery drops stays behind as a removed entry.
struct GATTCache: Sendable {
    struct Service: Sendable {
        let uuid: BluetoothUUID
        let handle: UInt16
        let endHandle: UInt16
        let primary: Bool
        let path: ObjectPath
        var characteristics: [Int] = []
        /// Still in the cache (false once a discovery dropped it).
        var present = true
    }

    struct Characteristic: CharacteristicProperties, Sendable {
        let uuid: BluetoothUUID
        let handle: UInt16
        let valueHandle: UInt16
        let service: Int
        let path: ObjectPath
        /// The ATT properties discovered, which `Flags` shows.
        let flags: [String]
        var descriptors: [Int] = []
        var state = CharacteristicState()
    }

    struct Descriptor: Sendable {
        let uuid: BluetoothUUID
        let handle: UInt16
        let characteristic: Int
        let path: ObjectPath
        var state = DescriptorState()
        var isCCCD: Bool { uuid == AttributeTable.cccd }
    }

    private(set) var services: [Service] = []
    var characteristics: [Characteristic] = []
    var descriptors: [Descriptor] = []
    /// A discovery ran (a device without services still has an empty, discovered cache).
    private(set) var discovered = false
    /// The Database Hash read after the last discovery: at a connection, the same hash on the
    /// peripheral spares the discovery (shared/gatt-client.c, db_hash_read_cb).
    var hash: [UInt8]?
    private var byValueHandle: [UInt16: Int] = [:]

    /// The services in the cache now, in handle order.
    var present: [Int] { services.indices.filter { services[$0].present }.sorted { services[$0].handle < services[$1].handle } }

    /// The cached characteristic a notification for `valueHandle` reaches.
    func characteristic(valueHandle: UInt16) -> Int? { byValueHandle[valueHandle] }

    /// Whether a characteristic with this UUID is cached (e.g. Service Changed, which bluetoothd
    /// registers for).
    func has(_ uuid: BluetoothUUID) -> Bool {
        characteristics.contains { $0.uuid == uuid && services[$0.service].present }
    }

    /// The cached CCCD of a characteristic, which StartNotify writes.
    func cccd(of c: Int) -> Int? { characteristics[c].descriptors.first { descriptors[$0].isCCCD } }

    /// Stores one service of the peripheral's table as discovered, with its characteristics
    /// and descriptors, as objects under `device`; returns its index. The object paths use the
    /// service, characteristic-declaration and descriptor handles, as bluetoothd's do.
    @discardableResult
    mutating func add(_ s: Int, of table: AttributeTable, under device: ObjectPath) -> Int {
        discovered = true
        let source = table.services[s]
        let index = services.count
        let servicePath = device.child("service" + hex4(source.handle))!
        services.append(Service(uuid: source.uuid, handle: source.handle, endHandle: source.endHandle,
                                primary: source.primary, path: servicePath))
        for c in source.characteristics {
            let info = table.characteristics[c]
            let ci = characteristics.count
            let path = servicePath.child("char" + hex4(info.handle))!
            characteristics.append(Characteristic(uuid: info.uuid, handle: info.handle, valueHandle: info.valueHandle,
                                                  service: index, path: path, flags: info.flags))
            services[index].characteristics.append(ci)
            byValueHandle[info.valueHandle] = ci
            for x in info.descriptors {
                let descriptor = table.descriptors[x]
                characteristics[ci].descriptors.append(descriptors.count)
                descriptors.append(Descriptor(uuid: descriptor.uuid, handle: descriptor.handle, characteristic: ci,
                                              path: path.child("desc" + hex4(descriptor.handle))!))
            }
        }
        return index
    }

    /// A discovery that found nothing still counts as one.
    mutating func markDiscovered() { discovered = true }

    /// Drops a service (its entries stay, no longer present).
    mutating func remove(_ s: Int) {
        services[s].present = false
        for c in services[s].characteristics where byValueHandle[characteristics[c].valueHandle] == c {
            byValueHandle[characteristics[c].valueHandle] = nil
        }
    }

    /// Whether the cached service matches one the peripheral declares: the same handles, UUID
    /// and kind, which is all a discovery compares (gatt_db_insert_service); a service that
    /// matches keeps its cached characteristics, changed or not.
    func matches(_ s: Int, _ other: AttributeTable.Service) -> Bool {
        let service = services[s]
        return service.handle == other.handle && service.endHandle == other.endHandle && service.uuid == other.uuid
            && service.primary == other.primary
    }
}
