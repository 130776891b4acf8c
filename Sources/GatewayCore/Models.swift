import BLE
import FoundationEssentials
import Sensors

// JSON shapes of the REST API; names as in openapi.yaml's components.

package struct ManagerStateBody: Encodable {
    package var state: String
    package var code: Int
    package var adapter: String?
    package var reason: String?

    package init(_ status: ManagerStatus) {
        state = status.state.name
        code = status.state.rawValue
        adapter = status.adapter
        reason = status.reason
    }
}

/// CoreBluetooth's advertisement keys; byte values in hex, manufacturer data keyed by the
/// decimal company identifier (as Home Assistant and bleak key it).
package struct AdvertisementBody: Encodable {
    package var localName: String?
    package var serviceUUIDs: [String]
    package var manufacturerData: [String: String]
    package var serviceData: [String: String]
    package var txPowerLevel: Int?
    package var isConnectable: Bool?

    package init(_ a: AdvertisementData) {
        localName = a.localName
        serviceUUIDs = a.serviceUUIDs.map(\.uuidString)
        manufacturerData = Dictionary(uniqueKeysWithValues: a.manufacturerData.map { (String($0.key), ValueFormat.hex.encode($0.value)) })
        serviceData = Dictionary(uniqueKeysWithValues: a.serviceData.map { ($0.key.uuidString, ValueFormat.hex.encode($0.value)) })
        txPowerLevel = a.txPowerLevel
        isConnectable = a.isConnectable
    }
}

package struct DeviceBody: Encodable {
    package var id: String
    package var address: String
    package var addressType: String?
    package var name: String?
    package var rssi: Int?
    package var lastSeen: Date?
    package var state: String
    package var paired: Bool
    /// Paired with keys kept (BlueZ's `Bonded`), and allowed to connect without asking (`Trusted`).
    package var bonded: Bool
    package var trusted: Bool
    package var advertisement: AdvertisementBody
    /// While connected: the ATT MTU and `maximumWriteValueLength` for both write types.
    package var mtu: Int?
    package var maximumWriteValueLength: WriteLengths?
    /// While gattway keeps the device connected (`autoReconnect`).
    package var reconnect: ReconnectBody?
    /// Present (true) when the device has not been seen for `--stale-after` or BlueZ forgot it.
    package var stale: Bool?
    /// What its advertisement says, decoded, when a decoder knows its format (REST answers only).
    package var sensor: SensorReading?

    package init(_ p: PeripheralInfo, sensor: SensorReading? = nil) {
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
        bonded = p.bonded
        trusted = p.trusted
        advertisement = AdvertisementBody(p.advertisement)
    }
}

/// A kept device's reconnection: attempts since its link was last up, when the next starts,
/// and why the link went down or the last attempt failed.
package struct ReconnectBody: Encodable {
    package var autoReconnect = true
    package var attempt: Int
    package var nextAttempt: Date?
    package var lastError: ErrorBody.Content?

    package init(_ status: ReconnectStatus) {
        attempt = status.attempt
        nextAttempt = status.nextAttempt
        lastError = status.lastError.map { ErrorBody($0).error }
    }
}

// MARK: - Scanning

package struct ManufacturerDataFilterBody: Codable, Equatable, Sendable, StrictDecodable {
    package var companyIdentifier: Int
    package var dataPrefix: String?
    package var mask: String?
    package enum CodingKeys: String, CodingKey, CaseIterable { case companyIdentifier, dataPrefix, mask }
}

package struct ServiceDataFilterBody: Codable, Equatable, Sendable, StrictDecodable {
    package var service: String
    package var dataPrefix: String?
    package var mask: String?
    package enum CodingKeys: String, CodingKey, CaseIterable { case service, dataPrefix, mask }
}

/// `POST /v1/scan`: every field optional.
package struct ScanRequest: Codable, Equatable, Sendable, StrictDecodable {
    package var services: [String]?
    package var allowDuplicates: Bool?
    package var name: String?
    package var namePrefix: String?
    package var manufacturerData: [ManufacturerDataFilterBody]?
    package var serviceData: [ServiceDataFilterBody]?
    package var rssi: Int?
    package var active: Bool?
    package var timeout: Double?

    package enum CodingKeys: String, CodingKey, CaseIterable {
        case services, allowDuplicates, name, namePrefix, manufacturerData, serviceData, rssi, active, timeout
    }
    package static var nested: [CodingKeys: any StrictDecodable.Type] {
        [.manufacturerData: ManufacturerDataFilterBody.self, .serviceData: ServiceDataFilterBody.self]
    }

    package func options() throws(BLEError) -> ScanOptions {
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
    package init(_ o: ScanOptions) {
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

/// Parsing of path and body values, each failure naming its field.
package enum Parse {
    /// A value format (`format=`): hex when absent.
    package static func format(_ text: String?) throws(BLEError) -> ValueFormat {
        guard let text else { return .hex }
        guard let format = ValueFormat(rawValue: text) else {
            throw BLEError(.invalidParameters, "format must be hex, base64 or utf8, not \"\(text)\"")
        }
        return format
    }

    package static func uuid(_ text: String, field: String) throws(BLEError) -> BluetoothUUID {
        guard let uuid = BluetoothUUID(text) else {
            throw BLEError(.invalidParameters, "\(field): \"\(text)\" is not a Bluetooth UUID (use 180d, 0x180D, 8 hex digits or the 128-bit form)")
        }
        return uuid
    }

    /// A device id in a path (no field: the message says what it is), or an address in a body's field.
    package static func address(_ text: String, field: String? = nil) throws(BLEError) -> BluetoothAddress {
        guard let address = BluetoothAddress(text) else {
            guard let field else {
                throw BLEError(.invalidParameters, "\"\(text)\" is not a device id; use the address, AA:BB:CC:DD:EE:FF")
            }
            throw BLEError(.invalidParameters, "\(field): \"\(text)\" is not a Bluetooth address (AA:BB:CC:DD:EE:FF)")
        }
        return address
    }

    /// `{service}`, `{char}`, `{desc}` or a stream's `characteristic`: a handle or a UUID.
    package static func selector(_ text: String) throws(BLEError) -> AttributeSelector {
        guard let selector = AttributeSelector(text) else {
            throw BLEError(.invalidParameters, "\"\(text)\" is neither a handle (0x0027) nor a UUID (2a19, or the 128-bit form)")
        }
        return selector
    }

    /// A comma-separated query value, as OpenAPI's `form` style writes an array: `""` is the
    /// empty list, an empty entry is refused (each entry is then parsed as it is, spaces included).
    package static func list(_ text: String, field: String) throws(BLEError) -> [String] {
        guard !text.isEmpty else { return [] }
        let entries = text.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        guard !entries.contains("") else {
            throw BLEError(.invalidParameters, "\(field): an empty entry in \"\(text)\"; separate the entries with single commas")
        }
        return entries
    }

    package static func hex(_ text: String?, field: String) throws(BLEError) -> [UInt8]? {
        guard let text else { return nil }
        do { return try ValueFormat.hex.decode(text) } catch {
            throw BLEError(.invalidParameters, "\(field): \(error.message)")
        }
    }
}

// MARK: - GATT

/// Handles print as "0x0027", the form the API accepts back.
package func handleText(_ handle: UInt16) -> String { AttributeSelector.format(handle) }

package struct ValueBody: Encodable {
    /// Where an answered value came from: `read` now by this request; `notification` the
    /// device sent it by itself (a notification or indication) `age` ago; `cache` an earlier
    /// read (any client's) answered it `age` ago.
    package enum Source: String, Encodable { case read, notification, cache }

    package var handle: String
    package var uuid: String
    package var value: String
    package var format: String
    package var length: Int
    package var source: Source
    /// Seconds since the value was read or notified, to the millisecond.
    package var age: Double

    package init(_ read: AttributeValue, format: ValueFormat, source: Source, age: Duration) {
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

/// `maximumWriteValueLength(for:)` for both write types.
package struct WriteLengths: Encodable {
    package var withResponse: Int
    package var withoutResponse: Int

    package init(mtu: Int?) {
        withResponse = WriteType.withResponse.maximumWriteValueLength(mtu: mtu)
        withoutResponse = WriteType.withoutResponse.maximumWriteValueLength(mtu: mtu)
    }
}
