import BLE
import ESPHomeAPI

/// An advertisement as the API carries it raw: the address as a 48-bit integer with its type,
/// the RSSI, and the advertising data as AD structures (length, type, data): the bytes the
/// controller reported when the kernel's management socket passed them on, else rebuilt from
/// what BlueZ's D-Bus properties give (the fields it parsed, not the bytes it received).
enum RawAdvertisement {
    /// AD types (Bluetooth Assigned Numbers, "Common Data Types").
    typealias ADType = AdvertisementData.ADType

    /// What the structures `data` builds carry: never copied from `otherStructures` as well.
    static let built: Set<UInt8> = [ADType.flags, ADType.incompleteUUIDs16, ADType.completeUUIDs16, ADType.incompleteUUIDs32,
                                    ADType.completeUUIDs32, ADType.incompleteUUIDs128, ADType.completeUUIDs128,
                                    ADType.shortenedLocalName, ADType.completeLocalName, ADType.txPowerLevel,
                                    ADType.serviceData16, ADType.serviceData32, ADType.serviceData128, ADType.manufacturerData]

    /// What goes for the RSSI when the controller measured none (HCI's 127, which BlueZ passes
    /// on and gattway reads as no RSSI; the real-BlueZ lab's emulated controllers report only
    /// that): Home Assistant's own "no RSSI" value, the weakest signal, never a strong one.
    static let noRSSI: Int32 = -127

    /// The API's message for one report of `info`, an advertisement heard.
    static func message(_ info: PeripheralInfo) -> BluetoothLERawAdvertisement {
        BluetoothLERawAdvertisement(address: address(info.id), rssi: info.rssi.map { Int32($0) } ?? noRSSI,
                                           addressType: addressType(info.addressType), data: data(info))
    }

    /// AA:BB:CC:DD:EE:FF as 0xAABBCCDDEEFF.
    static func address(_ id: BluetoothAddress) -> UInt64 { id.integer }

    /// The address of the API's integer (its low 48 bits).
    static func device(_ address: UInt64) -> BluetoothAddress {
        BluetoothAddress(integer: address & 0xFFFF_FFFF_FFFF)!
    }

    /// 0 public, 1 random (BlueZ's "public" / "random").
    static func addressType(_ type: String?) -> UInt32 { type == "random" ? 1 : 0 }

    /// The AD structures, in the order devices usually send them: flags, name, service UUIDs
    /// (16-, 32- then 128-bit, each list complete as far as the stack knows), TX power, service
    /// data, manufacturer data, then any other structure the stack passed on. Multi-byte values
    /// are little-endian, as on the air. A structure's data longer than 254 bytes (no
    /// advertisement carries one) is left out rather than cut.
    static func data(_ info: PeripheralInfo) -> [UInt8] {
        let ad = info.advertisement
        if let raw = ad.raw { return raw }
        var out: [UInt8] = []
        out.reserveCapacity(62)
        func structure(_ type: UInt8, _ body: [UInt8]) {
            guard body.count <= 254 else { return }
            out.append(UInt8(body.count + 1))
            out.append(type)
            out += body
        }
        if let flags = ad.flags { structure(ADType.flags, [flags]) }
        if let name = ad.localName, !name.isEmpty { structure(ADType.completeLocalName, Array(name.utf8)) }
        var uuids16: [UInt8] = [], uuids32: [UInt8] = [], uuids128: [UInt8] = []
        for uuid in ad.serviceUUIDs {
            if let short = uuid.uint16 {
                uuids16 += littleEndian(UInt64(short), 2)
            } else if let short = uuid.uint32 {
                uuids32 += littleEndian(UInt64(short), 4)
            } else {
                uuids128 += uuid.bytes.reversed()
            }
        }
        if !uuids16.isEmpty { structure(ADType.completeUUIDs16, uuids16) }
        if !uuids32.isEmpty { structure(ADType.completeUUIDs32, uuids32) }
        if !uuids128.isEmpty { structure(ADType.completeUUIDs128, uuids128) }
        if let tx = ad.txPowerLevel, let level = Int8(exactly: tx) { structure(ADType.txPowerLevel, [UInt8(bitPattern: level)]) }
        // Sorted, so that the same advertisement gives the same bytes (dictionaries have no order).
        for (uuid, bytes) in ad.serviceData.sorted(by: { $0.key < $1.key }) {
            if let short = uuid.uint16 {
                structure(ADType.serviceData16, littleEndian(UInt64(short), 2) + bytes)
            } else if let short = uuid.uint32 {
                structure(ADType.serviceData32, littleEndian(UInt64(short), 4) + bytes)
            } else {
                structure(ADType.serviceData128, uuid.bytes.reversed() + bytes)
            }
        }
        for (company, bytes) in ad.manufacturerData.sorted(by: { $0.key < $1.key }) {
            structure(ADType.manufacturerData, littleEndian(UInt64(company), 2) + bytes)
        }
        for (type, bytes) in ad.otherStructures.sorted(by: { $0.key < $1.key }) where !built.contains(type) {
            structure(type, bytes)
        }
        return out
    }

    private static func littleEndian(_ value: UInt64, _ count: Int) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: value >> (8 * UInt64($0))) }
    }
}
