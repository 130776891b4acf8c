import BLE
import Testing

/// An ATC1441 thermometer: service data 0x181A only, no advertised service UUIDs.
private let thermometer = AdvertisementData(localName: "ATC_8A1B2C", serviceData: [BluetoothUUID("181A")!: [0xA4, 0xC1]])
private let address = BluetoothAddress("A4:C1:38:8A:1B:2C")!

@Suite struct WatchOptionsTests {
    @Test func noCriterionFollowsEveryDevice() {
        #expect(WatchOptions().matches(address, name: nil, rssi: nil, advertisement: AdvertisementData()))
    }

    @Test func serviceDataCountsAsTheService() {
        #expect(WatchOptions(services: [BluetoothUUID("181A")!]).matches(address, name: nil, rssi: -70, advertisement: thermometer))
        #expect(!WatchOptions(services: [BluetoothUUID("FCD2")!]).matches(address, name: nil, rssi: -70, advertisement: thermometer))
    }

    @Test func everyCriterionMustHold() {
        let options = WatchOptions(devices: [address], namePrefix: "ATC_", rssi: -80)
        #expect(options.matches(address, name: nil, rssi: -70, advertisement: thermometer))
        #expect(!options.matches(BluetoothAddress("A4:C1:38:00:00:01")!, name: nil, rssi: -70, advertisement: thermometer))
        #expect(!options.matches(address, name: nil, rssi: -90, advertisement: thermometer))
        #expect(!options.matches(address, name: nil, rssi: nil, advertisement: thermometer), "an unknown RSSI is below any floor")
        #expect(!options.matches(address, name: "Other", rssi: -70, advertisement: AdvertisementData()))
    }

    @Test func validationNamesTheField() {
        #expect(throws: BLEError.self) { try WatchOptions(namePrefix: "").validate() }
        #expect(throws: BLEError.self) { try WatchOptions(rssi: 21).validate() }
        #expect(throws: BLEError.self) {
            try WatchOptions(devices: Array(repeating: address, count: WatchOptions.maximumEntries + 1)).validate()
        }
        #expect(throws: Never.self) { try WatchOptions(services: [BluetoothUUID("181A")!], rssi: -127).validate() }
    }
}
