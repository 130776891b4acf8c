import BLE
import Testing

/// Advertising data read from its AD structures, as the kernel's management socket reports it.
@Suite struct AdvertisementStructuresTests {
    static func read(_ bytes: [UInt8], connectable: Bool? = true) -> AdvertisementData {
        AdvertisementData(advertisingData: bytes, connectable: connectable)
    }

    @Test func everyField() {
        let bytes: [UInt8] = [
            0x02, 0x01, 0x06,                               // flags
            0x05, 0x03, 0x0D, 0x18, 0x0F, 0x18,             // 180D, 180F
            0x05, 0x05, 0x78, 0x56, 0x34, 0x12,             // 32-bit 12345678
            0x11, 0x07, 0x9E, 0xCA, 0xDC, 0x24, 0x0E, 0xE5, 0xA9, 0xE0, 0x93, 0xF3, 0xA3, 0xB5, 0x01, 0x00, 0x40, 0x6E, // NUS
            0x05, 0x09, 0x48, 0x52, 0x4D, 0x31,             // "HRM1"
            0x02, 0x0A, 0xF4,                               // -12 dBm
            0x05, 0x16, 0xD2, 0xFC, 0x40, 0x01,             // BTHome service data
            0x05, 0xFF, 0x4C, 0x00, 0x02, 0x15,             // Apple 004C: 02 15
            0x03, 0x2A, 0x01, 0x02,                         // another type, kept
        ]
        let ad = Self.read(bytes)
        #expect(ad.flags == 0x06)
        #expect(ad.serviceUUIDs == [BluetoothUUID("180D")!, BluetoothUUID("180F")!, BluetoothUUID("12345678")!,
                                    BluetoothUUID("6E400001-B5A3-F393-E0A9-E50E24DCCA9E")!])
        #expect(ad.localName == "HRM1")
        #expect(ad.txPowerLevel == -12)
        #expect(ad.serviceData == [BluetoothUUID("FCD2")!: [0x40, 0x01]])
        #expect(ad.manufacturerData == [0x004C: [0x02, 0x15]])
        #expect(ad.otherStructures == [0x2A: [0x01, 0x02]])
        #expect(ad.isConnectable == true)
        #expect(ad.raw == bytes)
    }

    @Test func aCompleteNameWinsOverAShortenedOneWhateverTheOrder() {
        #expect(Self.read([0x03, 0x09, 0x41, 0x42, 0x02, 0x08, 0x41]).localName == "AB")
        #expect(Self.read([0x02, 0x08, 0x41, 0x03, 0x09, 0x41, 0x42]).localName == "AB")
        #expect(Self.read([0x02, 0x08, 0x41]).localName == "A")
    }

    @Test func structuresTooShortForTheirTypeAreLeftOut() {
        let ad = Self.read([0x02, 0xFF, 0x4C, 0x02, 0x16, 0x0D, 0x04, 0x03, 0x0D, 0x18, 0x0F, 0x01, 0x01])
        #expect(ad.manufacturerData.isEmpty)
        #expect(ad.serviceData.isEmpty)
        #expect(ad.serviceUUIDs == [BluetoothUUID("180D")!])
        #expect(ad.flags == nil)
    }

    @Test func aStructureRunningPastTheEndEndsTheReading() {
        let ad = Self.read([0x02, 0x01, 0x06, 0x09, 0xFF, 0x4C, 0x00])
        #expect(ad.flags == 0x06)
        #expect(ad.manufacturerData.isEmpty)
    }

    @Test func aUUIDListedTwiceIsListedOnce() {
        #expect(Self.read([0x03, 0x02, 0x0D, 0x18, 0x03, 0x03, 0x0D, 0x18]).serviceUUIDs == [BluetoothUUID("180D")!])
    }
    /// Read lazily: what the bytes give is the same whichever field is asked first, from
    /// several threads at once, and a copy changed keeps the others' fields.
    @Test func fieldsReadAtTheFirstUseAreTheSameFromEveryThreadAndCopiesStayApart() async {
        let bytes: [UInt8] = [0x02, 0x01, 0x06, 0x03, 0x03, 0x0F, 0x18, 0x05, 0xFF, 0x4C, 0x00, 0x02, 0x15, 0x04, 0x08, 0x48, 0x52, 0x4D]
        let ad = Self.read(bytes)
        #expect(ad.localName == "HRM")  // read at once, with no other field
        let seen = await withTaskGroup(of: [String].self) { group in
            for _ in 0..<8 {
                group.addTask { ["\(ad.flags ?? 0)", "\(ad.serviceUUIDs)", "\(ad.manufacturerData)", "\(ad.serviceData)"] }
            }
            return await group.reduce(into: Set<[String]>()) { $0.insert($1) }
        }
        #expect(seen == [["6", "[\(BluetoothUUID("180F")!)]", "[76: [2, 21]]", "[:]"]])
        var changed = Self.read(bytes)
        changed.manufacturerData[0x004C] = [0x01]
        #expect(changed.flags == 0x06 && changed.serviceUUIDs == [BluetoothUUID("180F")!] && changed.localName == "HRM")
        let shared = changed
        changed.txPowerLevel = 4
        #expect(shared.txPowerLevel == nil && changed.manufacturerData == [0x004C: [0x01]] && shared.manufacturerData == [0x004C: [0x01]])
    }

    /// The name an earlier scan response gave holds when the bytes carry none; theirs wins.
    @Test func aNameGivenHoldsUnlessTheBytesCarryOne() {
        #expect(AdvertisementData(advertisingData: [0x02, 0x01, 0x06], connectable: true, name: "Kept").localName == "Kept")
        #expect(AdvertisementData(advertisingData: [0x03, 0x09, 0x41, 0x42], connectable: true, name: "Kept").localName == "AB")
    }
}

