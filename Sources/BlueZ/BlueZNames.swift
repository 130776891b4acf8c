import BLE
import DBus

/// Every BlueZ name and spelling gattway uses, in one place.
enum BlueZ {
    static let service = "org.bluez"
    static let adapterInterface = "org.bluez.Adapter1"
    static let deviceInterface = "org.bluez.Device1"
    static let gattServiceInterface = "org.bluez.GattService1"
    static let gattCharacteristicInterface = "org.bluez.GattCharacteristic1"
    static let gattDescriptorInterface = "org.bluez.GattDescriptor1"
    static let gattInterfaces: Set<String> = [gattServiceInterface, gattCharacteristicInterface, gattDescriptorInterface]

    static let busService = "org.freedesktop.DBus"
    static let errorPrefix = "org.bluez.Error."
    static let root = ObjectPath(trusted: "/org/bluez")

    /// "dev_AA_BB_CC_DD_EE_FF", the last element of a device's object path.
    static func pathElement(_ address: BluetoothAddress) -> String { "dev_" + address.joined(by: "_") }

    /// The address in a device's path element, or nil for any other element.
    static func address(pathElement: Substring) -> BluetoothAddress? {
        guard pathElement.hasPrefix("dev_") else { return nil }
        return BluetoothAddress(pathElement.dropFirst(4), separator: "_")
    }

    /// "service0010" → 0x0010: BlueZ 5.66 has no Handle property on remote objects.
    static func handle(_ path: ObjectPath, prefix: String) -> UInt16? {
        let last = path.lastElement
        guard last.hasPrefix(prefix) else { return nil }
        return UInt16(last.dropFirst(prefix.count), radix: 16)
    }

    /// A GATT object's handle (from its path) and UUID.
    static func identity(_ path: ObjectPath, _ props: [String: Value], prefix: String) -> (UInt16, BluetoothUUID)? {
        guard let handle = handle(path, prefix: prefix), let uuid = props["UUID"]?.string.flatMap({ BluetoothUUID($0) }) else {
            return nil
        }
        return (handle, uuid)
    }

    /// CoreBluetooth's properties from BlueZ's `Flags` strings ("read", "write-without-response",
    /// ...); permission flags such as "encrypt-read" are not properties and are ignored here.
    static func properties(flags: [String]) -> CharacteristicProperties {
        var p: CharacteristicProperties = []
        for flag in flags {
            switch flag {
            case "broadcast": p.insert(.broadcast)
            case "read": p.insert(.read)
            case "write-without-response": p.insert(.writeWithoutResponse)
            case "write": p.insert(.write)
            case "notify": p.insert(.notify)
            case "indicate": p.insert(.indicate)
            case "authenticated-signed-writes": p.insert(.authenticatedSignedWrites)
            case "extended-properties": p.insert(.extendedProperties)
            case "reliable-write": p.insert(.reliableWrite)
            case "writable-auxiliaries": p.insert(.writableAuxiliaries)
            default: break
            }
        }
        return p
    }
}
