import BLE
import DBus
import FoundationEssentials
import Testing
@testable import BlueZ

@Suite struct DevicePropertiesTests {
    @Test func advertisementFromDevice1() {
        let props: [String: Value] = [
            "Address": .string("F0:00:00:00:00:04"),
            "Alias": .string("F0-00-00-00-00-04"),
            "UUIDs": .strings(["0000180d-0000-1000-8000-00805f9b34fb"]),
            "ManufacturerData": .dictionary(key: Signature("q")!, value: Signature("v")!, [.init(.uint16(0x004C), .variant(.bytes([2, 0x15])))]),
            "ServiceData": .dictionary(key: Signature("s")!, value: Signature("v")!, [.init(.string("0000feaa-0000-1000-8000-00805f9b34fb"), .variant(.bytes([0x10])))]),
            "TxPower": .int16(4),
            "RSSI": .int16(-70),
            "Connected": .bool(false),
        ]
        let info = DeviceProperties.peripheral(props, lastSeen: nil)
        #expect(info?.id == BluetoothAddress("F0:00:00:00:00:04"))
        #expect(info?.name == nil, "an alias that is only the address is no name")
        #expect(info?.rssi == -70)
        #expect(info?.advertisement.manufacturerData == [0x004C: [2, 0x15]])
        #expect(info?.advertisement.serviceData == [BluetoothUUID("feaa")!: [0x10]])
        #expect(info?.advertisement.serviceUUIDs == [BluetoothUUID("180d")!])
        #expect(info?.advertisement.txPowerLevel == 4)
        #expect(info?.state == .disconnected)
        #expect(info?.advertisement.flags == nil && info?.advertisement.otherStructures == [:], "absent unless bluetoothd is experimental")
    }

    /// bluetoothd --experimental exports the Flags byte and the AD structures it handles no other way.
    @Test func experimentalFlagsAndAdvertisingData() {
        let props: [String: Value] = [
            "Address": .string("F0:00:00:00:00:04"),
            "AdvertisingFlags": .bytes([0x06]),
            "AdvertisingData": .dictionary(key: Signature("y")!, value: Signature("v")!, [.init(.byte(0x2A), .variant(.bytes([1, 2])))]),
        ]
        let info = DeviceProperties.peripheral(props, lastSeen: nil)
        #expect(info?.advertisement.flags == 0x06)
        #expect(info?.advertisement.otherStructures == [0x2A: [1, 2]])
    }

    @Test func rssi127MeansUnknown() {
        #expect(DeviceProperties.rssi(["RSSI": .int16(127)]) == nil)
        #expect(DeviceProperties.rssi([:]) == nil)
    }

    /// The scanner updates a device's snapshot from the advertised properties that changed:
    /// the result is what reading all of them again gives, for each of those properties.
    @Test(arguments: [
        ("RSSI", Value.int16(-40)),
        ("ManufacturerData", .dictionary(key: Signature("q")!, value: Signature("v")!, [.init(.uint16(0xFFFF), .variant(.bytes([7])))])),
        ("ServiceData", .dictionary(key: Signature("s")!, value: Signature("v")!, [.init(.string("0000fcd2-0000-1000-8000-00805f9b34fb"), .variant(.bytes([0x40])))])),
        ("TxPower", .int16(-8)),
    ])
    func updatedFromAdvertisedProperties(name: String, value: Value) {
        var props: [String: Value] = [
            "Address": .string("F0:00:00:00:00:04"), "Name": .string("Thermo"), "RSSI": .int16(-70), "TxPower": .int16(4),
            "ManufacturerData": .dictionary(key: Signature("q")!, value: Signature("v")!, [.init(.uint16(0x004C), .variant(.bytes([2])))]),
        ]
        let before = DeviceProperties.peripheral(props, lastSeen: nil)!
        props[name] = value
        #expect(DeviceProperties.advertised.contains(name))
        let seen = Date(timeIntervalSince1970: 1_000)
        let updated = DeviceProperties.updated(before, props, changed: [name], lastSeen: seen)
        #expect(updated == DeviceProperties.peripheral(props, lastSeen: seen))
        #expect(updated != before)
    }
}
