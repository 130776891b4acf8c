import BLE
import FoundationEssentials
import GatewayCore
import Sensors

// JSON shapes of the HTTP API's own routes (those every door shows are GatewayCore's Bodies.swift);
// names as in openapi.yaml's components.

struct AdapterList: Encodable { var adapters: [AdapterBody] }

struct DeviceList: Encodable { var devices: [DeviceBody] }

struct ScanStatusBody: Encodable {
    var scanning: Bool
    var filters: ScanRequest?
    var startedAt: Date?
    var stopsAt: Date?
    var discovered: Int
    /// "active" or "passive": how the controllers scan for the running scan now.
    var mode: String?

    init(_ s: ScanStatus) {
        scanning = s.scanning
        filters = s.options.map(ScanRequest.init)
        startedAt = s.startedAt
        stopsAt = s.stopsAt
        discovered = s.discovered
        mode = s.mode?.rawValue
    }
}

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


struct ConnectRequest: StrictDecodable {
    var timeout: Double?
    /// Keep the device connected: reconnect after an unexpected disconnection (default: the
    /// gateway's `--auto-reconnect`).
    var autoReconnect: Bool?
    /// The adapter to connect through (default: the one that heard the device best lately and
    /// has a free link slot).
    var adapter: String?
    enum CodingKeys: String, CodingKey, CaseIterable { case timeout, autoReconnect, adapter }
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
