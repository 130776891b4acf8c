import BLE
import ESPHomeAPI
import Testing
@testable import ESPHomeProxy

/// AD structures rebuilt from what BlueZ reports, byte for byte as a device would send them.
@Suite struct RawAdvertisementTests {
    private static let device = BluetoothAddress("F0:00:00:00:00:06")!

    private static func info(_ ad: AdvertisementData, addressType: String? = "public", rssi: Int? = -66) -> PeripheralInfo {
        PeripheralInfo(id: device, addressType: addressType, name: "ignored: Alias", rssi: rssi, lastSeen: nil,
                       state: .disconnected, paired: false, advertisement: ad)
    }

    static let cases: [(String, AdvertisementData, [UInt8])] = [
        ("nothing", AdvertisementData(), []),
        ("flags and the complete local name", AdvertisementData(localName: "Sim", flags: 0x06),
         [0x02, 0x01, 0x06, 0x04, 0x09, 0x53, 0x69, 0x6D]),
        ("16-bit UUIDs little-endian, one structure", AdvertisementData(serviceUUIDs: [BluetoothUUID("180d")!, BluetoothUUID("180f")!]),
         [0x05, 0x03, 0x0D, 0x18, 0x0F, 0x18]),
        ("a 32-bit UUID", AdvertisementData(serviceUUIDs: [BluetoothUUID("12345678")!]),
         [0x05, 0x05, 0x78, 0x56, 0x34, 0x12]),
        ("a 128-bit UUID, reversed", AdvertisementData(serviceUUIDs: [BluetoothUUID("6e400001-b5a3-f393-e0a9-e50e24dcca9e")!]),
         [0x11, 0x07, 0x9E, 0xCA, 0xDC, 0x24, 0x0E, 0xE5, 0xA9, 0xE0, 0x93, 0xF3, 0xA3, 0xB5, 0x01, 0x00, 0x40, 0x6E]),
        ("TX power, signed", AdvertisementData(txPowerLevel: -4), [0x02, 0x0A, 0xFC]),
        ("16-bit service data (BTHome)", AdvertisementData(serviceData: [BluetoothUUID("fcd2")!: [0x40, 0x00, 0x01]]),
         [0x06, 0x16, 0xD2, 0xFC, 0x40, 0x00, 0x01]),
        ("128-bit service data", AdvertisementData(serviceData: [BluetoothUUID("6e400001-b5a3-f393-e0a9-e50e24dcca9e")!: [0xAA]]),
         [0x12, 0x21, 0x9E, 0xCA, 0xDC, 0x24, 0x0E, 0xE5, 0xA9, 0xE0, 0x93, 0xF3, 0xA3, 0xB5, 0x01, 0x00, 0x40, 0x6E, 0xAA]),
        ("manufacturer data, company little-endian, sorted", AdvertisementData(manufacturerData: [0x004C: [0x02, 0x15], 0x0006: [1]]),
         [0x04, 0xFF, 0x06, 0x00, 0x01, 0x05, 0xFF, 0x4C, 0x00, 0x02, 0x15]),
        ("other structures after, not those built", AdvertisementData(flags: 0x1A, otherStructures: [0x2A: [9], 0x01: [0xFF]]),
         [0x02, 0x01, 0x1A, 0x02, 0x2A, 0x09]),
    ]

    @Test(arguments: cases)
    func structures(_ name: String, _ ad: AdvertisementData, _ bytes: [UInt8]) {
        #expect(RawAdvertisement.data(Self.info(ad)) == bytes, "\(name)")
    }

    @Test func theOrderIsFlagsNameUUIDsTxPowerServiceDataManufacturerData() {
        let ad = AdvertisementData(localName: "A", serviceUUIDs: [BluetoothUUID("180d")!], manufacturerData: [0xFFFF: [7]],
                                   serviceData: [BluetoothUUID("180f")!: [8]], txPowerLevel: 0, flags: 0x06)
        let types = Self.types(RawAdvertisement.data(Self.info(ad)))
        #expect(types == [0x01, 0x09, 0x03, 0x0A, 0x16, 0xFF])
    }

    @Test func addressTypeRSSIAndTheAddressAsAnInteger() {
        let message = RawAdvertisement.message(Self.info(AdvertisementData(), addressType: "random", rssi: -80))
        #expect(message.address == 0xF000_0000_0006)
        #expect(message.addressType == 1 && message.rssi == -80)
        #expect(RawAdvertisement.message(Self.info(AdvertisementData(), addressType: "public")).addressType == 0)
        // Heard without a measured RSSI (HCI's 127, as the real-BlueZ lab's controllers report):
        // still an advertisement, at Home Assistant's "no RSSI" (-127), not dropped.
        #expect(RawAdvertisement.message(Self.info(AdvertisementData(), rssi: nil)).rssi == -127)
        #expect(RawAdvertisement.device(0xF000_0000_0006) == Self.device)
        #expect(RawAdvertisement.address(BluetoothAddress("AA:BB:CC:DD:EE:FF")!) == 0xAABB_CCDD_EEFF)
    }

    /// Each structure's type, walking the lengths: the bytes are well formed.
    private static func types(_ data: [UInt8]) -> [UInt8] {
        var types: [UInt8] = []
        var i = 0
        while i < data.count {
            types.append(data[i + 1])
            i += Int(data[i]) + 1
        }
        #expect(i == data.count)
        return types
    }
}
