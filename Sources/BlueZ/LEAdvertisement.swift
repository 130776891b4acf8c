import BLE
import DBus

/// An advertisement as BlueZ reads it (doc/advertising-api.txt): an `org.bluez.LEAdvertisement1`
/// object at `/io/gattway/adv/<id>`, registered with the adapter's `LEAdvertisingManager1`.
enum LEAdvertisement {
    static let root = ObjectPath(trusted: "/io/gattway/adv")
    static let interface = "org.bluez.LEAdvertisement1"
    static let managerInterface = "org.bluez.LEAdvertisingManager1"

    static func path(_ id: Int) -> ObjectPath { root.child("\(id)")! }

    static func id(_ path: ObjectPath) -> Int? { path.parent == root ? Int(path.lastElement) : nil }

    /// The object's properties; optional ones only when set.
    static func properties(_ definition: AdvertisementDefinition) -> [String: Value] {
        var props: [String: Value] = ["Type": .string(definition.connectable ? "peripheral" : "broadcast")]
        if !definition.serviceUUIDs.isEmpty { props["ServiceUUIDs"] = .strings(definition.serviceUUIDs.map(\.uuidString)) }
        if !definition.manufacturerData.isEmpty {
            props["ManufacturerData"] = .dictionary(key: Signature("q")!, value: Signature("v")!, definition.manufacturerData.sorted { $0.key < $1.key }.map {
                .init(.uint16($0.key), .variant(.bytes($0.value)))
            })
        }
        if !definition.serviceData.isEmpty {
            props["ServiceData"] = .dictionary(key: Signature("s")!, value: Signature("v")!, definition.serviceData.sorted { $0.key.uuidString < $1.key.uuidString }.map {
                .init(.string($0.key.uuidString), .variant(.bytes($0.value)))
            })
        }
        if let name = definition.localName { props["LocalName"] = .string(name) }
        if definition.includeTxPower { props["Includes"] = .strings(["tx-power"]) }
        if let appearance = definition.appearance { props["Appearance"] = .uint16(appearance) }
        if let interval = definition.intervalMs {
            props["MinInterval"] = .uint32(interval.lowerBound)
            props["MaxInterval"] = .uint32(interval.upperBound)
        }
        // A connectable advertisement is one a phone lists: LE General Discoverable.
        if definition.connectable { props["Discoverable"] = .bool(true) }
        return props
    }

    /// The adapter's room for advertisements (`SupportedInstances`, `ActiveInstances`).
    static func instances(_ props: [String: Value]?) -> PeripheralStatus.Instances? {
        guard let props, let supported = props["SupportedInstances"]?.integer else { return nil }
        return PeripheralStatus.Instances(supported: supported, active: props["ActiveInstances"]?.integer ?? 0)
    }
}
