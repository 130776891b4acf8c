import BLE
import DBus

// The peripheral role as bluetoothd 5.66 serves it (src/gatt-database.c, src/advertising.c):
// GATT applications a D-Bus client registers with GattManager1, advertisements it registers
// with LEAdvertisingManager1, each read from the client's objects when they are registered.

/// A GATT application (gatt-database.c's gatt_app): the client's object tree as GetManagedObjects
/// gave it, with the handles bluetoothd assigned.
struct GattApplication: Sendable {
    let owner: String
    let path: ObjectPath
    /// Empty while GetManagedObjects is on its way (the registration already counts).
    var services: [AppService] = []
}

struct AppService: Sendable {
    let path: ObjectPath
    let uuid: BluetoothUUID
    let primary: Bool
    /// Requested (0: any), then the one given.
    var handle: UInt16
    /// bluetoothd sets the object's Handle to the one it gave.
    let tellsHandle: Bool
    var end: UInt16 = 0
    var characteristics: [AppCharacteristic]
}

struct AppCharacteristic: Sendable {
    let path: ObjectPath
    let uuid: BluetoothUUID
    let flags: [String]
    /// The value handle, as bluetoothd's Handle property means it: requested (0: any), then given.
    var handle: UInt16
    let tellsHandle: Bool
    var descriptors: [AppDescriptor]
}

struct AppDescriptor: Sendable {
    let path: ObjectPath
    let uuid: BluetoothUUID
    let flags: [String]
    var handle: UInt16
    let tellsHandle: Bool
}

/// An advertisement registered with LEAdvertisingManager1 (advertising.c's btd_adv_client), its
/// properties as read at registration (later changes are ignored, as bluetoothd ignores them).
struct LEAdvertisement: Sendable {
    let owner: String
    let path: ObjectPath
    /// nil while GetAll is on its way.
    var data: AdvertisingData?
}

struct AdvertisingData: Sendable, Equatable {
    var connectable = false
    var localName: String?
    var serviceUUIDs: [BluetoothUUID] = []
    var manufacturerData: [UInt16: [UInt8]] = [:]
    var serviceData: [BluetoothUUID: [UInt8]] = [:]
    var includes: [String] = []
    var appearance: UInt16?
    var txPower: Int?
    var discoverable: Bool?

    static let supportedIncludes = ["tx-power", "appearance", "local-name"]

    /// Parses LEAdvertisement1's properties; nil when one has the wrong type or an unknown
    /// value, a broadcast asks to be discoverable (it may not set the flags), or MinInterval is
    /// above MaxInterval (bluetoothd: "Failed to parse advertisement."). No Type is a broadcast.
    init?(_ properties: [String: Value]) {
        var intervals: (min: UInt32, max: UInt32) = (0, 0)
        for (name, raw) in properties {
            let value = raw.unwrapped
            switch name {
            case "Type":
                guard let type = value.string, ["broadcast", "peripheral"].contains(type) else { return nil }
                connectable = type == "peripheral"
            case "ServiceUUIDs":
                guard let list = value.array else { return nil }
                serviceUUIDs = list.compactMap { $0.string.flatMap(BluetoothUUID.init) }
                guard serviceUUIDs.count == list.count else { return nil }
            case "ManufacturerData":
                guard let entries = value.dictionaryEntries else { return nil }
                for entry in entries {
                    guard case .uint16(let company) = entry.key, let bytes = entry.value.unwrapped.bytes else { return nil }
                    manufacturerData[company] = bytes
                }
            case "ServiceData":
                guard let entries = value.dictionaryEntries else { return nil }
                for entry in entries {
                    guard let uuid = entry.key.string.flatMap(BluetoothUUID.init), let bytes = entry.value.unwrapped.bytes else { return nil }
                    serviceData[uuid] = bytes
                }
            case "LocalName":
                guard let s = value.string else { return nil }
                localName = s
            case "Includes":
                guard let list = value.array?.compactMap(\.string), list.allSatisfy(Self.supportedIncludes.contains) else { return nil }
                includes = list
            case "Appearance":
                guard case .uint16(let n) = value else { return nil }
                appearance = n
            case "TxPower":
                guard case .int16(let n) = value else { return nil }
                txPower = Int(n)
            case "Discoverable":
                guard let b = value.bool else { return nil }
                discoverable = b
            case "MinInterval", "MaxInterval":
                guard case .uint32(let ms) = value else { return nil }
                if name == "MinInterval" { intervals.min = ms } else { intervals.max = ms }
            default:
                // SolicitUUIDs, Data, Duration, Timeout, SecondaryChannel: read, not simulated.
                continue
            }
        }
        if discoverable == true && !connectable { return nil }
        if intervals.min > intervals.max { return nil }
    }
}

/// Why bluetoothd refuses an application: always `org.bluez.Error.Failed`, with the text of
/// the step that failed (client_ready_cb).
struct ApplicationError: Error {
    let message: String
    var busError: BusError { BlueZError.failed(message) }

    static let noObject = ApplicationError(message: "No object received")
    /// An object it could not take (a characteristic of no service, unknown flags...), or no service.
    static let noValidService = ApplicationError(message: "No valid service object found")
    /// An attribute gatt_db would not add (a bad UUID or Handle, GAP/GATT, a taken handle range).
    static let noEntry = ApplicationError(message: "Failed to create entry in database")
}

extension GattApplication {
    /// The services of a GetManagedObjects answer, in its order (bluetoothd adds them to its
    /// database in the order its proxies arrived): objects under the application's path only,
    /// other interfaces ignored. As client_ready_cb does: first each object is taken (services,
    /// then characteristics by their service, then descriptors by their characteristic, flags
    /// parsed), then the attributes are read for the database.
    static func parse(_ answer: Value, root: ObjectPath) throws(ApplicationError) -> [AppService] {
        let prefix = root.rawValue == "/" ? "/" : root.rawValue + "/"
        var objects: [(ObjectPath, [String: [String: Value]])] = []
        for entry in answer.dictionaryEntries ?? [] {
            guard let path = entry.key.objectPath, path == root || path.rawValue.hasPrefix(prefix) else { continue }
            objects.append((path, Connection.interfaces(entry.value)))
        }
        guard !objects.isEmpty else { throw .noObject }
        let services = objects.filter { $0.1[Interface.service] != nil }.map(\.0)
        var characteristics: [ObjectPath] = []
        for (path, interfaces) in objects {
            guard let p = interfaces[Interface.characteristic] else { continue }
            guard let service = p["Service"]?.unwrapped.objectPath, services.contains(service),
                  p["Flags"]?.unwrapped.strings?.allSatisfy(SimulatorConfiguration.Characteristic.knownFlags.contains) == true else {
                throw .noValidService
            }
            characteristics.append(path)
        }
        for (_, interfaces) in objects {
            guard let p = interfaces[Interface.descriptor] else { continue }
            guard let owner = p["Characteristic"]?.unwrapped.objectPath, characteristics.contains(owner),
                  (p["Flags"]?.unwrapped.strings ?? []).allSatisfy(descriptorFlags.contains) else { throw .noValidService }
        }
        guard !services.isEmpty else { throw .noValidService }

        func uuid(_ p: [String: Value]) throws(ApplicationError) -> BluetoothUUID {
            guard let u = p["UUID"]?.unwrapped.string.flatMap(BluetoothUUID.init) else { throw .noEntry }
            return u
        }
        /// The Handle asked for (0: any), and whether bluetoothd tells the one it gives (it
        /// sets Handle only on an object that has the property and asked for none).
        func handle(_ p: [String: Value]) throws(ApplicationError) -> (UInt16, Bool) {
            guard let raw = p["Handle"] else { return (0, false) }
            guard case .uint16(let h) = raw.unwrapped else { throw .noEntry }
            return (h, h == 0)
        }
        var out: [AppService] = []
        for (path, interfaces) in objects {
            guard let p = interfaces[Interface.service] else { continue }
            // The GAP and GATT services are bluetoothd's own; Primary must be given.
            let id = try uuid(p)
            guard ![BluetoothUUID(uint16: 0x1800), BluetoothUUID(uint16: 0x1801)].contains(id),
                  let primary = p["Primary"]?.unwrapped.bool else { throw .noEntry }
            let (h, tells) = try handle(p)
            out.append(AppService(path: path, uuid: id, primary: primary, handle: h, tellsHandle: tells, characteristics: []))
        }
        for (path, interfaces) in objects {
            guard let p = interfaces[Interface.characteristic], let s = out.firstIndex(where: { $0.path == p["Service"]?.unwrapped.objectPath })
            else { continue }
            let (h, tells) = try handle(p)
            out[s].characteristics.append(AppCharacteristic(path: path, uuid: try uuid(p), flags: p["Flags"]?.unwrapped.strings ?? [],
                                                            handle: h, tellsHandle: tells, descriptors: []))
        }
        for (path, interfaces) in objects {
            guard let p = interfaces[Interface.descriptor] else { continue }
            let owner = p["Characteristic"]?.unwrapped.objectPath
            guard let s = out.firstIndex(where: { $0.characteristics.contains { $0.path == owner } }),
                  let c = out[s].characteristics.firstIndex(where: { $0.path == owner }) else { continue }
            let (h, tells) = try handle(p)
            out[s].characteristics[c].descriptors.append(AppDescriptor(path: path, uuid: try uuid(p), flags: p["Flags"]?.unwrapped.strings ?? [],
                                                                       handle: h, tellsHandle: tells))
        }
        return out
    }

    static let descriptorFlags = ["read", "write", "encrypt-read", "encrypt-write", "encrypt-authenticated-read",
                                  "encrypt-authenticated-write", "secure-read", "secure-write", "authorize"]
}

extension AppService {
    /// Where its attributes are, for the attribute table.
    var placement: AttributeTable.Placement {
        AttributeTable.Placement(end: end, characteristics: characteristics.map { ($0.handle, $0.descriptors.map(\.handle)) })
    }

    /// The service as the simulator's attribute table takes it.
    var configuration: SimulatorConfiguration.Service {
        SimulatorConfiguration.Service(uuid: uuid, primary: primary, handle: Int(handle), characteristics: characteristics.map { c in
            SimulatorConfiguration.Characteristic(uuid: c.uuid, flags: c.flags, descriptors: c.descriptors.map {
                SimulatorConfiguration.Descriptor(uuid: $0.uuid, value: [], flags: $0.flags)
            })
        })
    }

    /// How many handles bluetoothd reserves for it: the declaration, per characteristic its
    /// declaration, value, CCCD and extended properties when its flags need them, and descriptors.
    var handleCount: Int { 1 + configuration.characteristics.map(AttributeTable.handleCount).reduce(0, +) }

    /// Places the service at `start` (its handle) as gatt_db does: each attribute at the next
    /// handle, or at the one the client asked for when it is further on; nil when a requested
    /// handle is behind or the attributes do not fit the service's range.
    func placed(at start: UInt16) -> AppService? {
        var copy = self
        copy.handle = start
        let last = Int(start) + handleCount - 1
        guard last <= 0xFFFF else { return nil }
        copy.end = UInt16(last)
        var next = Int(start) + 1
        for (i, c) in characteristics.enumerated() {
            if c.handle != 0 {
                guard Int(c.handle) - 1 >= next else { return nil }
                next = Int(c.handle) - 1
            }
            copy.characteristics[i].handle = UInt16(next + 1)
            next += AttributeTable.handleCount(of: configuration.characteristics[i]) - c.descriptors.count
            for (k, x) in c.descriptors.enumerated() {
                if x.handle != 0 {
                    guard Int(x.handle) >= next else { return nil }
                    next = Int(x.handle)
                }
                copy.characteristics[i].descriptors[k].handle = UInt16(next)
                next += 1
            }
        }
        return next - 1 <= last ? copy : nil
    }
}
