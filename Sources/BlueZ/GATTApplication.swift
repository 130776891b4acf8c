import BLE
import DBus

/// A GATT application's objects as BlueZ reads them (doc/gatt-api.txt, "GATT Manager
/// hierarchy"): one application per adapter at `/io/gattway/app/<adapter>`, a service at
/// `…/service<id>` (the service's id, so paths outlive re-registrations), its characteristics at
/// `…/char<index>` and their descriptors at `…/desc<index>`.
enum GATTApplication {
    static let root = ObjectPath(trusted: "/io/gattway/app")
    static let managerInterface = "org.bluez.GattManager1"

    static func path(adapter: String) -> ObjectPath { root.child(adapter)! }

    static func path(adapter: String, _ attribute: LocalAttribute) -> ObjectPath {
        let service = path(adapter: adapter).child("service\(attribute.service)")!
        guard attribute.characteristic >= 0 else { return service }
        let characteristic = service.child("char\(attribute.characteristic)")!
        return attribute.descriptor.map { characteristic.child("desc\($0)")! } ?? characteristic
    }

    /// The adapter and attribute a path names (characteristic -1: the service itself).
    static func attribute(_ path: ObjectPath) -> (adapter: String, attribute: LocalAttribute)? {
        guard path.isDescendant(of: root) else { return nil }
        let parts = path.rawValue.dropFirst(root.rawValue.count + 1).split(separator: "/")
        func number(_ part: Substring, _ prefix: String) -> Int? {
            part.hasPrefix(prefix) ? Int(part.dropFirst(prefix.count)) : nil
        }
        guard parts.count >= 2, parts.count <= 4, let service = number(parts[1], "service") else { return nil }
        var attribute = LocalAttribute(service: service, characteristic: -1)
        if parts.count >= 3 {
            guard let c = number(parts[2], "char") else { return nil }
            attribute.characteristic = c
        }
        if parts.count == 4 {
            guard let d = number(parts[3], "desc") else { return nil }
            attribute.descriptor = d
        }
        return (String(parts[0]), attribute)
    }

    // MARK: - Flags

    /// BlueZ's `Flags` of a characteristic: its properties, and the security its permissions ask.
    static func flags(_ properties: CharacteristicProperties, _ permissions: AttributePermissions) -> [String] {
        let names: [(CharacteristicProperties, String)] = [
            (.broadcast, "broadcast"), (.read, "read"), (.writeWithoutResponse, "write-without-response"), (.write, "write"),
            (.notify, "notify"), (.indicate, "indicate"), (.authenticatedSignedWrites, "authenticated-signed-writes"),
            (.reliableWrite, "reliable-write"), (.writableAuxiliaries, "writable-auxiliaries"),
        ]
        return names.filter { properties.contains($0.0) }.map(\.1) + securityFlags(permissions)
    }

    /// A descriptor's `Flags`: read and write as its permissions allow, with their security.
    static func flags(_ permissions: AttributePermissions) -> [String] {
        (permissions.allowsRead ? ["read"] : []) + (permissions.allowsWrite ? ["write"] : []) + securityFlags(permissions)
    }

    private static func securityFlags(_ permissions: AttributePermissions) -> [String] {
        let names: [(AttributePermissions, String)] = [
            (.readEncryptionRequired, "encrypt-read"), (.writeEncryptionRequired, "encrypt-write"),
            (.readAuthenticationRequired, "encrypt-authenticated-read"), (.writeAuthenticationRequired, "encrypt-authenticated-write"),
        ]
        return names.filter { permissions.contains($0.0) }.map(\.1)
    }

    // MARK: - Objects

    /// A service's objects. `handles` asks BlueZ for the handles it gave before (0: any);
    /// `includes` are the paths of the services it includes.
    static func objects(adapter: String, _ registered: RegisteredService, includes: [ObjectPath]) -> [ObjectPath: ExportedObjects.Interfaces] {
        let id = registered.id
        let servicePath = path(adapter: adapter, LocalAttribute(service: id, characteristic: -1))
        var out: [ObjectPath: ExportedObjects.Interfaces] = [:]
        var service: [String: Value] = [
            "UUID": .string(registered.service.uuid.uuidString), "Primary": .bool(registered.service.primary),
            "Handle": .uint16(registered.handle ?? 0),
        ]
        if !includes.isEmpty { service["Includes"] = .objectPaths(includes) }
        out[servicePath] = [BlueZ.gattServiceInterface: service]
        for (c, characteristic) in registered.service.characteristics.enumerated() {
            let charPath = path(adapter: adapter, LocalAttribute(service: id, characteristic: c))
            var props: [String: Value] = [
                "UUID": .string(characteristic.uuid.uuidString), "Service": .objectPath(servicePath),
                "Flags": .strings(flags(characteristic.properties, characteristic.permissions)),
                "Handle": .uint16(registered.characteristicHandles[c] ?? 0),
            ]
            if !characteristic.properties.isDisjoint(with: [.notify, .indicate]) { props["Notifying"] = .bool(false) }
            out[charPath] = [BlueZ.gattCharacteristicInterface: props]
            for (d, descriptor) in characteristic.descriptors.enumerated() {
                out[path(adapter: adapter, LocalAttribute(service: id, characteristic: c, descriptor: d))] = [BlueZ.gattDescriptorInterface: [
                    "UUID": .string(descriptor.uuid.uuidString), "Characteristic": .objectPath(charPath),
                    "Flags": .strings(flags(descriptor.permissions)), "Handle": .uint16(0),
                ]]
            }
        }
        return out
    }

    /// Why BlueZ (or a central) could not use this definition, if so.
    static func problem(_ service: LocalService) -> String? {
        let cccd = BluetoothUUID(uint16: 0x2902), extended = BluetoothUUID(uint16: 0x2900)
        if service.characteristics.isEmpty { return "service \(service.uuid) has no characteristics" }
        for characteristic in service.characteristics {
            let name = "characteristic \(characteristic.uuid)"
            if characteristic.properties.isEmpty { return "\(name) has no properties" }
            if characteristic.value.count > maxValue { return "\(name)'s value is \(characteristic.value.count) bytes; at most \(maxValue)" }
            for descriptor in characteristic.descriptors {
                if descriptor.uuid == cccd || descriptor.uuid == extended {
                    return "\(name): descriptor \(descriptor.uuid) is the stack's own (it adds it as the properties need)"
                }
                if descriptor.value.count > maxValue { return "\(name): descriptor \(descriptor.uuid)'s value is over \(maxValue) bytes" }
            }
        }
        return nil
    }

    /// An attribute value's largest size (Core spec Vol 3 Part F 3.2.9).
    static let maxValue = 512
}
