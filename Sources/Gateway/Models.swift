import BLE
import FoundationEssentials
import Sensors

// JSON shapes of the REST API; names as in openapi.yaml's components.

struct ManagerStateBody: Encodable {
    var state: String
    var code: Int
    var adapter: String?
    var reason: String?

    init(_ status: ManagerStatus) {
        state = status.state.name
        code = status.state.rawValue
        adapter = status.adapter
        reason = status.reason
    }
}

struct AdapterBody: Encodable {
    var id: String
    var address: String?
    var name: String?
    var alias: String?
    var powered: Bool
    var discovering: Bool
    var selected: Bool

    init(_ a: AdapterInfo) {
        id = a.id
        address = a.address?.description
        name = a.name
        alias = a.alias
        powered = a.powered
        discovering = a.discovering
        selected = a.selected
    }
}

struct AdapterList: Encodable { var adapters: [AdapterBody] }

/// CoreBluetooth's advertisement keys; byte values in hex, manufacturer data keyed by the
/// decimal company identifier (as Home Assistant and bleak key it).
struct AdvertisementBody: Encodable {
    var localName: String?
    var serviceUUIDs: [String]
    var manufacturerData: [String: String]
    var serviceData: [String: String]
    var txPowerLevel: Int?
    var isConnectable: Bool?

    init(_ a: AdvertisementData) {
        localName = a.localName
        serviceUUIDs = a.serviceUUIDs.map(\.uuidString)
        manufacturerData = Dictionary(uniqueKeysWithValues: a.manufacturerData.map { (String($0.key), ValueFormat.hex.encode($0.value)) })
        serviceData = Dictionary(uniqueKeysWithValues: a.serviceData.map { ($0.key.uuidString, ValueFormat.hex.encode($0.value)) })
        txPowerLevel = a.txPowerLevel
        isConnectable = a.isConnectable
    }
}

struct DeviceBody: Encodable {
    var id: String
    var address: String
    var addressType: String?
    var name: String?
    var rssi: Int?
    var lastSeen: Date?
    var state: String
    var paired: Bool
    var advertisement: AdvertisementBody
    /// While connected: the ATT MTU and `maximumWriteValueLength` for both write types.
    var mtu: Int?
    var maximumWriteValueLength: WriteLengths?
    /// While gattway keeps the device connected (`autoReconnect`).
    var reconnect: ReconnectBody?
    /// Present (true) when the device has not been seen for `--stale-after` or BlueZ forgot it.
    var stale: Bool?
    /// What its advertisement says, decoded, when a decoder knows its format (REST answers only).
    var sensor: SensorReading?

    init(_ p: PeripheralInfo, sensor: SensorReading? = nil) {
        self.sensor = sensor
        stale = p.stale ? true : nil
        reconnect = p.reconnect.map(ReconnectBody.init)
        if p.state == .connected {
            mtu = p.mtu
            maximumWriteValueLength = WriteLengths(mtu: p.mtu)
        }
        id = p.id.description
        address = p.id.description
        addressType = p.addressType
        name = p.name
        rssi = p.rssi
        lastSeen = p.lastSeen
        state = p.state.name
        paired = p.paired
        advertisement = AdvertisementBody(p.advertisement)
    }
}

struct DeviceList: Encodable { var devices: [DeviceBody] }

/// A kept device's reconnection: attempts since its link was last up, when the next starts,
/// and why the link went down or the last attempt failed.
struct ReconnectBody: Encodable {
    var autoReconnect = true
    var attempt: Int
    var nextAttempt: Date?
    var lastError: ErrorBody.Content?

    init(_ status: ReconnectStatus) {
        attempt = status.attempt
        nextAttempt = status.nextAttempt
        lastError = status.lastError.map { ErrorBody($0).error }
    }
}

// MARK: - Scanning

struct ManufacturerDataFilterBody: Codable, Equatable, Sendable, StrictDecodable {
    var companyIdentifier: Int
    var dataPrefix: String?
    var mask: String?
    enum CodingKeys: String, CodingKey, CaseIterable { case companyIdentifier, dataPrefix, mask }
}

struct ServiceDataFilterBody: Codable, Equatable, Sendable, StrictDecodable {
    var service: String
    var dataPrefix: String?
    var mask: String?
    enum CodingKeys: String, CodingKey, CaseIterable { case service, dataPrefix, mask }
}

/// `POST /v1/scan`: every field optional.
struct ScanRequest: Codable, Equatable, Sendable, StrictDecodable {
    var services: [String]?
    var allowDuplicates: Bool?
    var name: String?
    var namePrefix: String?
    var manufacturerData: [ManufacturerDataFilterBody]?
    var serviceData: [ServiceDataFilterBody]?
    var rssi: Int?
    var active: Bool?
    var timeout: Double?

    enum CodingKeys: String, CodingKey, CaseIterable {
        case services, allowDuplicates, name, namePrefix, manufacturerData, serviceData, rssi, active, timeout
    }
    static var nested: [CodingKeys: any StrictDecodable.Type] {
        [.manufacturerData: ManufacturerDataFilterBody.self, .serviceData: ServiceDataFilterBody.self]
    }

    func options() throws(BLEError) -> ScanOptions {
        var options = ScanOptions()
        for (i, text) in (services ?? []).enumerated() {
            options.services.append(try Parse.uuid(text, field: "services[\(i)]"))
        }
        options.allowDuplicates = allowDuplicates ?? false
        options.name = name
        options.namePrefix = namePrefix
        for (i, f) in (manufacturerData ?? []).enumerated() {
            guard let company = UInt16(exactly: f.companyIdentifier) else {
                throw BLEError(.invalidParameters, "manufacturerData[\(i)].companyIdentifier must be 0...65535")
            }
            options.manufacturerData.append(ManufacturerDataFilter(
                companyIdentifier: company,
                dataPrefix: try Parse.hex(f.dataPrefix, field: "manufacturerData[\(i)].dataPrefix") ?? [],
                mask: try Parse.hex(f.mask, field: "manufacturerData[\(i)].mask")))
        }
        for (i, f) in (serviceData ?? []).enumerated() {
            options.serviceData.append(ServiceDataFilter(
                service: try Parse.uuid(f.service, field: "serviceData[\(i)].service"),
                dataPrefix: try Parse.hex(f.dataPrefix, field: "serviceData[\(i)].dataPrefix") ?? [],
                mask: try Parse.hex(f.mask, field: "serviceData[\(i)].mask")))
        }
        options.rssi = rssi
        options.active = active ?? true
        options.timeout = timeout
        return options
    }

    /// The options as a client sent them (for `GET /v1/scan`).
    init(_ o: ScanOptions) {
        services = o.services.map(\.uuidString)
        allowDuplicates = o.allowDuplicates
        name = o.name
        namePrefix = o.namePrefix
        manufacturerData = o.manufacturerData.map {
            ManufacturerDataFilterBody(companyIdentifier: Int($0.companyIdentifier), dataPrefix: ValueFormat.hex.encode($0.dataPrefix),
                                       mask: $0.mask.map { ValueFormat.hex.encode($0) })
        }
        serviceData = o.serviceData.map {
            ServiceDataFilterBody(service: $0.service.uuidString, dataPrefix: ValueFormat.hex.encode($0.dataPrefix),
                                  mask: $0.mask.map { ValueFormat.hex.encode($0) })
        }
        rssi = o.rssi
        active = o.active
        timeout = o.timeout
    }
}

struct ScanStatusBody: Encodable {
    var scanning: Bool
    var filters: ScanRequest?
    var startedAt: Date?
    var stopsAt: Date?
    var discovered: Int

    init(_ s: ScanStatus) {
        scanning = s.scanning
        filters = s.options.map(ScanRequest.init)
        startedAt = s.startedAt
        stopsAt = s.stopsAt
        discovered = s.discovered
    }
}

/// Parsing of path and body values, each failure naming its field.
enum Parse {
    static func uuid(_ text: String, field: String) throws(BLEError) -> BluetoothUUID {
        guard let uuid = BluetoothUUID(text) else {
            throw BLEError(.invalidParameters, "\(field): \"\(text)\" is not a Bluetooth UUID (use 180d, 0x180D, 8 hex digits or the 128-bit form)")
        }
        return uuid
    }

    /// A device id in a path (no field: the message says what it is), or an address in a body's field.
    static func address(_ text: String, field: String? = nil) throws(BLEError) -> BluetoothAddress {
        guard let address = BluetoothAddress(text) else {
            guard let field else {
                throw BLEError(.invalidParameters, "\"\(text)\" is not a device id; use the address, AA:BB:CC:DD:EE:FF")
            }
            throw BLEError(.invalidParameters, "\(field): \"\(text)\" is not a Bluetooth address (AA:BB:CC:DD:EE:FF)")
        }
        return address
    }

    /// `{service}`, `{char}`, `{desc}` or a stream's `characteristic`: a handle or a UUID.
    static func selector(_ text: String) throws(BLEError) -> AttributeSelector {
        guard let selector = AttributeSelector(text) else {
            throw BLEError(.invalidParameters, "\"\(text)\" is neither a handle (0x0027) nor a UUID (2a19, or the 128-bit form)")
        }
        return selector
    }

    /// A comma-separated query value, as OpenAPI's `form` style writes an array: `""` is the
    /// empty list, an empty entry is refused (each entry is then parsed as it is, spaces included).
    static func list(_ text: String, field: String) throws(BLEError) -> [String] {
        guard !text.isEmpty else { return [] }
        let entries = text.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        guard !entries.contains("") else {
            throw BLEError(.invalidParameters, "\(field): an empty entry in \"\(text)\"; separate the entries with single commas")
        }
        return entries
    }

    static func hex(_ text: String?, field: String) throws(BLEError) -> [UInt8]? {
        guard let text else { return nil }
        do { return try ValueFormat.hex.decode(text) } catch {
            throw BLEError(.invalidParameters, "\(field): \(error.message)")
        }
    }
}

// MARK: - GATT

/// Handles print as "0x0027", the form the API accepts back.
func handleText(_ handle: UInt16) -> String { AttributeSelector.format(handle) }

struct DescriptorBody: Encodable {
    var handle: String
    var uuid: String
    var name: String?

    init(_ d: GATTDescriptor) {
        handle = handleText(d.handle)
        uuid = d.uuid.uuidString
        name = d.uuid.name
    }
}

struct CharacteristicBody: Encodable {
    var handle: String
    var uuid: String
    var name: String?
    var service: String
    /// CoreBluetooth's `CBCharacteristicProperties` names.
    var properties: [String]
    /// BlueZ's flags as they are, permissions included ("encrypt-read", ...).
    var flags: [String]
    var isNotifying: Bool
    var descriptors: [DescriptorBody]?

    init(_ c: GATTCharacteristic, withDescriptors: Bool) {
        handle = handleText(c.handle)
        uuid = c.uuid.uuidString
        name = c.uuid.name
        service = handleText(c.serviceHandle)
        properties = c.properties.names
        flags = c.flags
        isNotifying = c.isNotifying
        descriptors = withDescriptors ? c.descriptors.map(DescriptorBody.init) : nil
    }
}

struct ServiceBody: Encodable {
    var handle: String
    var uuid: String
    var name: String?
    var isPrimary: Bool
    var characteristics: [CharacteristicBody]?

    init(_ s: GATTService, withCharacteristics: Bool) {
        handle = handleText(s.handle)
        uuid = s.uuid.uuidString
        name = s.uuid.name
        isPrimary = s.isPrimary
        characteristics = withCharacteristics ? s.characteristics.map { CharacteristicBody($0, withDescriptors: true) } : nil
    }
}

struct ServiceList: Encodable { var services: [ServiceBody] }
struct CharacteristicList: Encodable { var characteristics: [CharacteristicBody] }
struct DescriptorList: Encodable { var descriptors: [DescriptorBody] }

/// The whole resolved tree of a connected device.
struct GATTBody: Encodable {
    var device: String
    var mtu: Int?
    var maximumWriteValueLength: WriteLengths
    var services: [ServiceBody]
}

/// `maximumWriteValueLength(for:)` for both write types.
struct WriteLengths: Encodable {
    var withResponse: Int
    var withoutResponse: Int

    init(mtu: Int?) {
        withResponse = WriteType.withResponse.maximumWriteValueLength(mtu: mtu)
        withoutResponse = WriteType.withoutResponse.maximumWriteValueLength(mtu: mtu)
    }
}

struct ConnectRequest: StrictDecodable {
    var timeout: Double?
    /// Keep the device connected: reconnect after an unexpected disconnection (default: the
    /// gateway's `--auto-reconnect`).
    var autoReconnect: Bool?
    enum CodingKeys: String, CodingKey, CaseIterable { case timeout, autoReconnect }
}

struct ValueBody: Encodable {
    /// Where an answered value came from: `read` now by this request; `notification` the
    /// device sent it by itself (a notification or indication) `age` ago; `cache` an earlier
    /// read (any client's) answered it `age` ago.
    enum Source: String, Encodable { case read, notification, cache }

    var handle: String
    var uuid: String
    var value: String
    var format: String
    var length: Int
    var source: Source
    /// Seconds since the value was read or notified, to the millisecond.
    var age: Double

    init(_ read: AttributeValue, format: ValueFormat, source: Source, age: Duration) {
        handle = handleText(read.handle)
        uuid = read.uuid.uuidString
        value = format.encode(read.value)
        self.format = format.rawValue
        length = read.value.count
        self.source = source
        let ms = age.components.seconds * 1000 + age.components.attoseconds / 1_000_000_000_000_000
        self.age = Double(max(ms, 0)) / 1000
    }
}

struct WriteRequest: StrictDecodable {
    var value: String
    var format: String?
    var withResponse: Bool?
    /// Without response, split a value longer than maximumWriteValueLength into MTU-sized
    /// writes (default) or refuse it (false).
    var fragment: Bool?
    enum CodingKeys: String, CodingKey, CaseIterable { case value, format, withResponse, fragment }
}

struct WriteResult: Encodable {
    var handle: String
    var uuid: String
    var written: Int
    var withResponse: Bool
    /// How many ATT writes carried the value (more than one when fragmented without response).
    var writes: Int

    init(_ outcome: WriteOutcome) {
        handle = handleText(outcome.handle)
        uuid = outcome.uuid.uuidString
        written = outcome.written
        withResponse = outcome.type == .withResponse
        writes = outcome.writes
    }
}

struct NotifyState: Encodable {
    var handle: String
    var uuid: String
    var isNotifying: Bool
}

/// `GET /v1/blocklist`: the GATT blocklist in force, one entry per UUID.
struct BlocklistBody: Encodable {
    struct Entry: Encodable {
        var uuid: String
        /// "all" (hidden), "reads" or "writes".
        var exclude: String
        /// The lines that listed it: "default:3", "/etc/gattway/blocklist.txt:7".
        var sources: [String]
    }
    var entries: [Entry]

    init(_ blocklist: Blocklist) {
        entries = blocklist.entries.map { entry in
            let exclude = switch entry.exclusions {
            case .reads: "reads"
            case .writes: "writes"
            default: "all"
            }
            return Entry(uuid: entry.uuid.uuidString, exclude: exclude, sources: entry.sources)
        }
    }
}
