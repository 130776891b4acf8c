import BLE
import ESPHomeAPI

/// A device's GATT table as the API sends it: services in messages of about `pageBudget` bytes
/// (one service at least), then the done message. Handles are the ATT handles gattway reports
/// (a characteristic's is its declaration's, as in BlueZ's object paths).
enum ServicePages {
    static let pageBudget = 1024

    static func messages(address: UInt64, services: [GATTService], shortUUIDs: Bool) -> [any APIMessage] {
        var pages: [any APIMessage] = []
        var page: [BluetoothGATTService] = []
        var size = 0
        for service in services {
            let message = self.service(service, shortUUIDs: shortUUIDs)
            let bytes = message.serialized().count
            if !page.isEmpty && size + bytes > pageBudget {
                pages.append(BluetoothGATTGetServicesResponse(address: address, services: page))
                page = []
                size = 0
            }
            page.append(message)
            size += bytes
        }
        if !page.isEmpty { pages.append(BluetoothGATTGetServicesResponse(address: address, services: page)) }
        pages.append(BluetoothGATTGetServicesDoneResponse(address: address))
        return pages
    }

    static func service(_ s: GATTService, shortUUIDs: Bool) -> BluetoothGATTService {
        let (uuid, short) = split(s.uuid, shortUUIDs)
        return BluetoothGATTService(uuid: uuid, handle: UInt32(s.handle), characteristics: s.characteristics.map { c in
            let (uuid, short) = split(c.uuid, shortUUIDs)
            return BluetoothGATTCharacteristic(
                uuid: uuid, handle: UInt32(c.handle),
                // The declaration's property byte; CoreBluetooth's bits above it are extended properties.
                properties: c.properties.rawValue & 0xFF,
                descriptors: c.descriptors.map { d in
                    let (uuid, short) = split(d.uuid, shortUUIDs)
                    return BluetoothGATTDescriptor(uuid: uuid, handle: UInt32(d.handle), shortUUID: short)
                },
                shortUUID: short)
        }, shortUUID: short)
    }

    /// A UUID as the API carries it: a 16- or 32-bit one in `short_uuid` for clients of API 1.12
    /// and later (as ESPHome decides), else the 128 bits as two integers, most significant first.
    static func split(_ uuid: BluetoothUUID, _ shortUUIDs: Bool) -> (uuid: [UInt64], short: UInt32) {
        if shortUUIDs, let short = uuid.uint32 { return ([], short) }
        let bytes = uuid.bytes
        let high = bytes[0..<8].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        let low = bytes[8..<16].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        return ([high, low], 0)
    }
}
