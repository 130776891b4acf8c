import BLE
import DBus
import FoundationEssentials

/// Reading org.bluez.Device1 and Adapter1 properties into the BLE model.
enum DeviceProperties {
    static func address(_ props: [String: Value]) -> BluetoothAddress? {
        props["Address"]?.string.flatMap { BluetoothAddress($0) }
    }

    /// BlueZ's `Name` is what the device advertised; `Alias` falls back to the address with
    /// dashes, which is no name at all.
    static func name(_ props: [String: Value]) -> String? {
        if let name = props["Name"]?.string { return name }
        guard let alias = props["Alias"]?.string, BluetoothAddress(alias) == nil else { return nil }
        return alias
    }

    static func manufacturerData(_ props: [String: Value]) -> [UInt16: [UInt8]] {
        var manufacturer: [UInt16: [UInt8]] = [:]
        for entry in props["ManufacturerData"]?.dictionaryEntries ?? [] {
            if let id = entry.key.integer, let company = UInt16(exactly: id), let bytes = entry.value.bytes {
                manufacturer[company] = bytes
            }
        }
        return manufacturer
    }

    static func serviceData(_ props: [String: Value]) -> [BluetoothUUID: [UInt8]] {
        var serviceData: [BluetoothUUID: [UInt8]] = [:]
        for entry in props["ServiceData"]?.dictionaryEntries ?? [] {
            if let uuid = entry.key.string.flatMap({ BluetoothUUID($0) }), let bytes = entry.value.bytes {
                serviceData[uuid] = bytes
            }
        }
        return serviceData
    }

    static func advertisement(_ props: [String: Value]) -> AdvertisementData {
        let manufacturer = manufacturerData(props)
        let serviceData = serviceData(props)
        // Both experimental in 5.66 (bluetoothd --experimental): usually absent.
        var other: [UInt8: [UInt8]] = [:]
        for entry in props["AdvertisingData"]?.dictionaryEntries ?? [] {
            if let type = entry.key.integer, let key = UInt8(exactly: type), let bytes = entry.value.bytes { other[key] = bytes }
        }
        return AdvertisementData(
            localName: props["Name"]?.string,
            serviceUUIDs: (props["UUIDs"]?.strings ?? []).compactMap { BluetoothUUID($0) },
            manufacturerData: manufacturer,
            serviceData: serviceData,
            txPowerLevel: props["TxPower"]?.integer,
            // BlueZ 5.66 does not say whether an advertisement was connectable.
            isConnectable: nil,
            flags: props["AdvertisingFlags"]?.bytes?.first,
            otherStructures: other)
    }

    /// RSSI, when BlueZ has a current one (it reports 127 or nothing when it does not).
    static func rssi(_ props: [String: Value]) -> Int? {
        guard let rssi = props["RSSI"]?.integer, rssi != 127, rssi != 0 else { return nil }
        return rssi
    }

    /// The Device1 properties an advertisement changes by itself: `updated` reads just these.
    static let advertised: Set<String> = ["RSSI", "ManufacturerData", "ServiceData", "TxPower"]

    /// `info` (what `peripheral` made of earlier properties) after a change of `changed`, all
    /// of them `advertised`: the same as `peripheral(props)`, without reading the rest again.
    static func updated(_ info: PeripheralInfo, _ props: [String: Value], changed: some Collection<String>, lastSeen: Date?) -> PeripheralInfo {
        var info = info
        info.lastSeen = lastSeen
        for name in changed {
            switch name {
            case "RSSI": info.rssi = rssi(props)
            case "ManufacturerData": info.advertisement.manufacturerData = manufacturerData(props)
            case "ServiceData": info.advertisement.serviceData = serviceData(props)
            case "TxPower": info.advertisement.txPowerLevel = props["TxPower"]?.integer
            default: break
            }
        }
        return info
    }

    /// `info` once BlueZ forgot the device: the pairing, the bond and the trust went with its object.
    static func forgotten(_ info: PeripheralInfo) -> PeripheralInfo {
        var info = info
        // Stale until heard again (a new sighting replaces it).
        info.stale = true
        info.paired = false
        info.bonded = false
        info.trusted = false
        return info
    }

    static func peripheral(_ props: [String: Value], lastSeen: Date?) -> PeripheralInfo? {
        guard let id = address(props) else { return nil }
        var info = PeripheralInfo(id: id, addressType: props["AddressType"]?.string, name: name(props), rssi: rssi(props),
                                  lastSeen: lastSeen, state: props["Connected"]?.bool == true ? .connected : .disconnected,
                                  paired: props["Paired"]?.bool ?? false, advertisement: advertisement(props))
        info.bonded = props["Bonded"]?.bool ?? false
        info.trusted = props["Trusted"]?.bool ?? false
        return info
    }
}
