import BLE

/// A service as clients define it (`POST /v1/peripheral/services`, and the state file keeps it
/// so): `CBMutableService` in JSON. `local(blocklist:)` checks it whole, so that nothing of a bad
/// definition is registered.
///
/// ```
/// {"uuid": "5a1e0001-0000-4000-8000-00805f9b34fb", "primary": true, "characteristics": [
///    {"uuid": "5a1e0002-…", "properties": ["read", "write", "notify"], "permissions": ["readable", "writeable"],
///     "value": "hello", "format": "utf8", "descriptors": [{"uuid": "2901", "value": "Greeting", "format": "utf8"}]}]}
/// ```
package struct ServiceDefinition: StrictDecodable, Encodable, Sendable, Equatable {
    package var uuid: String
    package var primary: Bool?
    package var characteristics: [CharacteristicDefinition]
    package var includes: [String]?
    package var adapter: String?
    package enum CodingKeys: String, CodingKey, CaseIterable { case uuid, primary, characteristics, includes, adapter }
    package static var nested: [CodingKeys: any StrictDecodable.Type] { [.characteristics: CharacteristicDefinition.self] }

    /// The longest value an attribute may hold (the ATT maximum).
    package static let maximumValueLength = 512
    /// The properties a local characteristic may have: those BlueZ serves for an application.
    static let properties: [(CharacteristicProperties, String)] = CharacteristicProperties.names.filter {
        [.read, .write, .writeWithoutResponse, .notify, .indicate, .authenticatedSignedWrites, .reliableWrite, .writableAuxiliaries].contains($0.0)
    }

    package func local(blocklist: Blocklist) throws(BLEError) -> LocalService {
        let service = try Parse.uuid(uuid, field: "uuid")
        // Only what the list excludes whole (a HID keyboard, a firmware-update service): what
        // it keeps from reads or writes protects a remote device's data, not this side's.
        if let entry = blocklist.entry(forbidding: .discovery, path: [service]) {
            throw BLEError(.uuidNotAllowed, "uuid: service \(service.uuidString) is on the GATT blocklist (\(entry.label), from"
                           + " \(entry.sources.joined(separator: ", "))): a client may not serve it; --blocklist configures the list")
        }
        guard !characteristics.isEmpty else {
            throw BLEError(.invalidParameters, "characteristics: a service needs at least one characteristic")
        }
        var seen = Set<BluetoothUUID>()
        var local: [LocalCharacteristic] = []
        for (i, c) in characteristics.enumerated() {
            let made = try c.local(field: "characteristics[\(i)]", service: service, blocklist: blocklist)
            guard seen.insert(made.uuid).inserted else {
                throw BLEError(.invalidParameters, "characteristics[\(i)].uuid: \(made.uuid.uuidString) is already a characteristic of this service;"
                               + " the API names characteristics by UUID, so each is there once")
            }
            local.append(made)
        }
        let includes = try (includes ?? []).enumerated().map { (i, text) throws(BLEError) in try Parse.uuid(text, field: "includes[\(i)]") }
        return LocalService(uuid: service, primary: primary ?? true, characteristics: local, includes: includes, adapter: adapter)
    }
}

package struct CharacteristicDefinition: StrictDecodable, Encodable, Sendable, Equatable {
    package var uuid: String
    package var properties: [String]
    package var permissions: [String]?
    package var value: String?
    package var format: String?
    package var descriptors: [DescriptorDefinition]?
    package enum CodingKeys: String, CodingKey, CaseIterable { case uuid, properties, permissions, value, format, descriptors }
    package static var nested: [CodingKeys: any StrictDecodable.Type] { [.descriptors: DescriptorDefinition.self] }

    func local(field: String, service: BluetoothUUID, blocklist: Blocklist) throws(BLEError) -> LocalCharacteristic {
        let uuid = try Parse.uuid(uuid, field: "\(field).uuid")
        if let entry = blocklist.entry(forbidding: .discovery, path: [uuid]) {
            throw BLEError(.uuidNotAllowed, "\(field).uuid: \(uuid.uuidString) is on the GATT blocklist (\(entry.label)): a client may not serve it")
        }
        var props = CharacteristicProperties()
        for name in properties {
            guard let p = ServiceDefinition.properties.first(where: { $0.1 == name }) else {
                throw BLEError(.invalidParameters, "\(field).properties: unknown property \"\(name)\"; known: "
                               + ServiceDefinition.properties.map(\.1).joined(separator: ", "))
            }
            props.insert(p.0)
        }
        guard !props.isEmpty else { throw BLEError(.invalidParameters, "\(field).properties: a characteristic needs at least one property") }
        let perms = try Self.permissions(permissions, field: "\(field).permissions", default: props)
        if props.contains(.read) && !perms.allowsRead {
            throw BLEError(.invalidParameters, "\(field): the read property needs a read permission (readable, readEncryptionRequired or readAuthenticationRequired)")
        }
        if !props.isDisjoint(with: [.write, .writeWithoutResponse, .authenticatedSignedWrites, .reliableWrite]) && !perms.allowsWrite {
            throw BLEError(.invalidParameters, "\(field): a write property needs a write permission (writeable, writeEncryptionRequired or writeAuthenticationRequired)")
        }
        let value = try Self.value(value, format: format, field: field)
        var descriptors: [LocalDescriptor] = []
        for (i, d) in (self.descriptors ?? []).enumerated() {
            let made = try d.local(field: "\(field).descriptors[\(i)]")
            guard !descriptors.contains(where: { $0.uuid == made.uuid }) else {
                throw BLEError(.invalidParameters, "\(field).descriptors[\(i)].uuid: \(made.uuid.uuidString) is there twice")
            }
            descriptors.append(made)
        }
        return LocalCharacteristic(uuid: uuid, properties: props, permissions: perms, value: value, descriptors: descriptors)
    }

    /// Permissions by name; absent: those the properties need, unencrypted.
    static func permissions(_ names: [String]?, field: String, default props: CharacteristicProperties) throws(BLEError) -> AttributePermissions {
        guard let names else {
            var perms = AttributePermissions()
            if props.contains(.read) { perms.insert(.readable) }
            if !props.isDisjoint(with: [.write, .writeWithoutResponse, .authenticatedSignedWrites, .reliableWrite]) { perms.insert(.writeable) }
            return perms
        }
        var perms = AttributePermissions()
        for name in names {
            guard let p = AttributePermissions.names.first(where: { $0.1 == name }) else {
                throw BLEError(.invalidParameters, "\(field): unknown permission \"\(name)\"; known: "
                               + AttributePermissions.names.map(\.1).joined(separator: ", "))
            }
            perms.insert(p.0)
        }
        return perms
    }

    /// A value in its format, at most 512 bytes.
    static func value(_ text: String?, format: String?, field: String) throws(BLEError) -> [UInt8] {
        let format = try Parse.format(format)
        guard let text else { return [] }
        let bytes: [UInt8]
        do { bytes = try format.decode(text) } catch { throw BLEError(.invalidParameters, "\(field).value: \(error.message)") }
        guard bytes.count <= ServiceDefinition.maximumValueLength else {
            throw BLEError(.invalidParameters, "\(field).value: \(bytes.count) bytes; an attribute holds at most \(ServiceDefinition.maximumValueLength)")
        }
        return bytes
    }
}

package struct DescriptorDefinition: StrictDecodable, Encodable, Sendable, Equatable {
    package var uuid: String
    package var value: String?
    package var format: String?
    package var permissions: [String]?
    package enum CodingKeys: String, CodingKey, CaseIterable { case uuid, value, format, permissions }

    /// The stack's own descriptors: BlueZ adds them from the characteristic's properties.
    static let stacks: [BluetoothUUID: String] = [
        BluetoothUUID(uint16: 0x2900): "extended properties", BluetoothUUID(uint16: 0x2902): "client characteristic configuration (notify, indicate)",
    ]

    func local(field: String) throws(BLEError) -> LocalDescriptor {
        let uuid = try Parse.uuid(uuid, field: "\(field).uuid")
        if let what = Self.stacks[uuid] {
            throw BLEError(.invalidParameters, "\(field).uuid: \(uuid.uuidString), the \(what), is the stack's: it comes with the characteristic's properties")
        }
        let perms = try CharacteristicDefinition.permissions(permissions, field: "\(field).permissions", default: .read)
        return LocalDescriptor(uuid: uuid, value: try CharacteristicDefinition.value(value, format: format, field: field), permissions: perms)
    }
}
