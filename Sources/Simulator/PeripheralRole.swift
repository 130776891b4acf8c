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
    var end: UInt16 = 0
    var characteristics: [AppCharacteristic]
}

struct AppCharacteristic: Sendable {
    let path: ObjectPath
    let uuid: BluetoothUUID
    let flags: [String]
    /// The value handle, as bluetoothd's Handle property means it: requested (0: any), then given.
    var handle: UInt16
    var descriptors: [AppDescriptor]
}

struct AppDescriptor: Sendable {
    let path: ObjectPath
    let uuid: BluetoothUUID
    let flags: [String]
    var handle: UInt16
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
    /// value (bluetoothd: "Failed to parse advertisement.").
    init?(_ properties: [String: Value]) {
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
            default:
                // SolicitUUIDs, Data, Duration, Timeout, intervals, SecondaryChannel: read, not simulated.
                continue
            }
        }
    }
}

/// What bluetoothd answers RegisterApplication with when the tree is not usable.
enum ApplicationError: Error {
    case invalid
    case failed(String)

    var busError: BusError {
        switch self {
        case .invalid: BlueZError.invalidArguments()
        case .failed(let message): BlueZError.failed(message)
        }
    }
}

extension GattApplication {
    /// The services of a GetManagedObjects answer, in its order (bluetoothd adds them to its
    /// database in the order its proxies arrived): objects under the application's path only,
    /// other interfaces ignored.
    static func parse(_ answer: Value, root: ObjectPath) throws(ApplicationError) -> [AppService] {
        let prefix = root.rawValue == "/" ? "/" : root.rawValue + "/"
        var objects: [(ObjectPath, [String: [String: Value]])] = []
        for entry in answer.dictionaryEntries ?? [] {
            guard let path = entry.key.objectPath, path == root || path.rawValue.hasPrefix(prefix) else { continue }
            objects.append((path, Connection.interfaces(entry.value)))
        }
        guard !objects.isEmpty else { throw .failed("No object received") }
        func uuid(_ p: [String: Value]) throws(ApplicationError) -> BluetoothUUID {
            guard let u = p["UUID"]?.unwrapped.string.flatMap(BluetoothUUID.init) else { throw .invalid }
            return u
        }
        func handle(_ p: [String: Value]) throws(ApplicationError) -> UInt16 {
            guard let raw = p["Handle"] else { return 0 }
            guard case .uint16(let h) = raw.unwrapped else { throw .invalid }
            return h
        }
        func flags(_ p: [String: Value], known: [String]) throws(ApplicationError) -> [String] {
            guard let list = p["Flags"]?.unwrapped.strings, list.allSatisfy(known.contains) else { throw .invalid }
            return list
        }
        var services: [AppService] = []
        for (path, interfaces) in objects {
            guard let p = interfaces[Interface.service] else { continue }
            let primary = p["Primary"]?.unwrapped.bool ?? true
            services.append(AppService(path: path, uuid: try uuid(p), primary: primary, handle: try handle(p), characteristics: []))
        }
        for (path, interfaces) in objects {
            guard let p = interfaces[Interface.characteristic] else { continue }
            guard let s = services.firstIndex(where: { $0.path == p["Service"]?.unwrapped.objectPath }) else { throw .invalid }
            services[s].characteristics.append(AppCharacteristic(
                path: path, uuid: try uuid(p), flags: try flags(p, known: SimulatorConfiguration.Characteristic.knownFlags),
                handle: try handle(p), descriptors: []))
        }
        for (path, interfaces) in objects {
            guard let p = interfaces[Interface.descriptor] else { continue }
            let owner = p["Characteristic"]?.unwrapped.objectPath
            guard let s = services.firstIndex(where: { $0.characteristics.contains { $0.path == owner } }),
                  let c = services[s].characteristics.firstIndex(where: { $0.path == owner }) else { throw .invalid }
            services[s].characteristics[c].descriptors.append(AppDescriptor(
                path: path, uuid: try uuid(p), flags: try flags(p, known: descriptorFlags), handle: try handle(p)))
        }
        guard !services.isEmpty else { throw .failed("No valid service object found") }
        return services
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
