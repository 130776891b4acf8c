import BLE
import FoundationEssentials
import Testing

private let heartRate = "0000180d-0000-1000-8000-00805f9b34fb"
private let nordicUART = "6e400001-b5a3-f393-e0a9-e50e24dcca9e"

@Suite struct BluetoothUUIDTests {
    @Test(arguments: [
        ("180D", heartRate),
        ("180d", heartRate),
        ("0x180d", heartRate),
        ("0X180D", heartRate),
        ("0000180D", heartRate),
        ("0x0000180d", heartRate),
        ("0000180D-0000-1000-8000-00805F9B34FB", heartRate),
        ("0000180d00001000800000805f9b34fb", heartRate),
        ("2A37", "00002a37-0000-1000-8000-00805f9b34fb"),
        ("12345678", "12345678-0000-1000-8000-00805f9b34fb"),
        ("0xABCDEF01", "abcdef01-0000-1000-8000-00805f9b34fb"),
        ("6E400001-B5A3-F393-E0A9-E50E24DCCA9E", nordicUART),
        ("6e400001-B5a3-f393-E0A9-e50e24dcca9e", nordicUART),
        ("6E400001B5A3F393E0A9E50E24DCCA9E", nordicUART),
        ("00000000-0000-0000-0000-000000000000", "00000000-0000-0000-0000-000000000000"),
        ("FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF", "ffffffff-ffff-ffff-ffff-ffffffffffff"),
    ])
    func parsesToCanonicalForm(input: String, canonical: String) throws {
        let uuid = try #require(BluetoothUUID(input))
        #expect(uuid.uuidString == canonical)
        #expect(uuid.description == canonical)
        #expect(BluetoothUUID(uuid.uuidString) == uuid)
    }

    @Test(arguments: [
        "", "1", "18", "180", "180D0", "0x", "0x18", "0x180", "x180D", "0x0x180d", "180G", "18 0D",
        " 180D", "180D ", "-180", "+180D", "１８０Ｄ", "0x6E400001B5A3F393E0A9E50E24DCCA9E",
        "6E400001-B5A3-F393-E0A9-E50E24DCCA9", "6E400001-B5A3-F393-E0A9-E50E24DCCA9EE",
        "6E40000-1B5A3-F393-E0A9-E50E24DCCA9E", "6E400001_B5A3_F393_E0A9_E50E24DCCA9E",
        "6E400001-B5A3-F393-E0A9-E50E24DCCA9G", "6E400001-B5A3-F393-E0A9-E50E-4DCCA9E",
        "{6E400001-B5A3-F393-E0A9-E50E24DCCA9E}", "6E400001B5A3F393E0A9E50E24DCCA9", "123456789",
    ])
    func rejectsInvalidForms(input: String) {
        #expect(BluetoothUUID(input) == nil)
    }

    @Test func everySpellingOfOneUUIDIsEqualAndHashesAlike() throws {
        let spellings = ["180D", "180d", "0x180D", "0000180d", heartRate, heartRate.uppercased(),
                         heartRate.replacing("-", with: "")]
        let uuids = try spellings.map { try #require(BluetoothUUID($0)) }
        #expect(Set(uuids).count == 1)
        #expect(uuids.allSatisfy { $0 == BluetoothUUID(uint16: 0x180D) })
        #expect(uuids.allSatisfy { $0 == BluetoothUUID(uint32: 0x180D) })
    }

    @Test(arguments: [
        ("180D", "180F"),
        ("180D", "0000180d-0000-1000-8000-00805f9b34fc"),
        ("180D", "0001180D"),
        ("180D", "0000180d-0001-1000-8000-00805f9b34fb"),
        (nordicUART, "6e400002-b5a3-f393-e0a9-e50e24dcca9e"),
    ])
    func differentUUIDsAreNotEqual(a: String, b: String) throws {
        #expect(try #require(BluetoothUUID(a)) != #require(BluetoothUUID(b)))
    }

    @Test func integerAndByteInitialisers() throws {
        #expect(BluetoothUUID(uint16: 0x2A37) == BluetoothUUID("2a37"))
        #expect(BluetoothUUID(uint32: 0x1234_5678) == BluetoothUUID("12345678-0000-1000-8000-00805f9b34fb"))
        let bytes: [UInt8] = [0x6E, 0x40, 0x00, 0x01, 0xB5, 0xA3, 0xF3, 0x93,
                              0xE0, 0xA9, 0xE5, 0x0E, 0x24, 0xDC, 0xCA, 0x9E]
        let uuid = try #require(BluetoothUUID(bytes: bytes))
        #expect(uuid.uuidString == nordicUART)
        #expect(uuid.bytes == bytes)
        #expect(BluetoothUUID(uint16: 0x180D).bytes
            == [0x00, 0x00, 0x18, 0x0D, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0x80, 0x5F, 0x9B, 0x34, 0xFB])
    }

    @Test(arguments: [0, 15, 17, 32])
    func byteInitialiserWantsSixteenBytes(count: Int) {
        #expect(BluetoothUUID(bytes: Array(repeating: 0, count: count)) == nil)
    }

    @Test(arguments: [
        ("180D", "180d", 0x180D as UInt16?),
        ("0x2A37", "2a37", 0x2A37),
        ("0000FFFF", "ffff", 0xFFFF),
        ("0000", "0000", 0x0000),
        ("12345678", "12345678", nil),
        ("0001FFFF", "0001ffff", nil),
        (nordicUART, nil, nil),
        ("0000180d-0001-1000-8000-00805f9b34fb", nil, nil),
        ("0000180d-0000-1000-8000-00805f9b34fc", nil, nil),
    ] as [(String, String?, UInt16?)])
    func shortFormAndUInt16(input: String, shortForm: String?, uint16: UInt16?) throws {
        let uuid = try #require(BluetoothUUID(input))
        #expect(uuid.shortForm == shortForm)
        #expect(uuid.uint16 == uint16)
    }

    @Test(arguments: [
        ("1800", "Generic Access"),
        ("1801", "Generic Attribute"),
        ("180A", "Device Information"),
        ("180D", "Heart Rate"),
        ("180F", "Battery"),
        ("1809", "Health Thermometer"),
        ("1816", "Cycling Speed and Cadence"),
        ("1818", "Cycling Power"),
        ("181A", "Environmental Sensing"),
        ("2A00", "Device Name"),
        ("2A01", "Appearance"),
        ("2A05", "Service Changed"),
        ("2A19", "Battery Level"),
        ("2A24", "Model Number String"),
        ("2A25", "Serial Number String"),
        ("2A26", "Firmware Revision String"),
        ("2A27", "Hardware Revision String"),
        ("2A28", "Software Revision String"),
        ("2A29", "Manufacturer Name String"),
        ("2A37", "Heart Rate Measurement"),
        ("2A38", "Body Sensor Location"),
        ("2A39", "Heart Rate Control Point"),
        ("2901", "Characteristic User Description"),
        ("2902", "Client Characteristic Configuration"),
        ("2904", "Characteristic Presentation Format"),
        ("00002a37-0000-1000-8000-00805f9b34fb", "Heart Rate Measurement"),
    ])
    func namesWellKnownAssignedNumbers(input: String, name: String) throws {
        #expect(try #require(BluetoothUUID(input)).name == name)
    }

    @Test(arguments: ["1234", "0001180D", nordicUART, "0000180d-0000-1000-8000-00805f9b34fc"])
    func hasNoNameForOthers(input: String) throws {
        #expect(try #require(BluetoothUUID(input)).name == nil)
    }

    @Test func ordersByValue() throws {
        let sorted = try ["6e400001-b5a3-f393-e0a9-e50e24dcca9e", "2A37", "180D", "180F"]
            .map { try #require(BluetoothUUID($0)) }.sorted()
        #expect(sorted.map(\.shortForm) == ["180d", "180f", "2a37", nil])
    }

    @Test func encodesAsCanonicalString() throws {
        let json = try JSONEncoder().encode([BluetoothUUID(uint16: 0x180D)])
        #expect(String(decoding: json, as: UTF8.self) == "[\"\(heartRate)\"]")
    }

    @Test(arguments: ["180D", "0x180d", "0000180D", heartRate.uppercased(), heartRate.replacing("-", with: "")])
    func decodesEveryAcceptedForm(input: String) throws {
        let decoded = try JSONDecoder().decode([BluetoothUUID].self, from: Data("[\"\(input)\"]".utf8))
        #expect(decoded == [BluetoothUUID(uint16: 0x180D)])
    }

    @Test(arguments: ["18", "not-a-uuid", "0x"])
    func decodingAnInvalidStringIsDataCorrupted(input: String) throws {
        let message = try dataCorruptedMessage(decoding: BluetoothUUID.self, fromJSONString: input)
        #expect(message.hasPrefix("invalid Bluetooth UUID \"\(input)\""))
    }
}
