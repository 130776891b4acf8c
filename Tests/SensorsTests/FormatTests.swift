import BLE
@testable import Sensors
import Testing

/// One advertisement, the reading a specification's example says it is.
struct Vector: Sendable, CustomStringConvertible {
    var advertisement: AdvertisementData
    var address: BluetoothAddress?
    var format: SensorFormat
    var packetId: Int?
    var expected: [Expected]
    var description: String { "\(format) \(expected)" }

    /// Whether the first `count` bytes of the payload are a valid frame of their own: Eddystone-URL's
    /// URL has no length or terminator, and Eddystone-UID's last 2 (reserved) bytes may be left out.
    func prefixIsAFrame(_ count: Int) -> Bool {
        switch format {
        case .eddystoneURL: count >= 3
        case .eddystoneUID: count == 18
        default: false
        }
    }

    var reading: SensorReading {
        SensorReading(format: format, packetId: packetId, measurements: measurements(expected))
    }
}

let formatVectors: [Vector] = [
    // atc1441/ATC_MiThermometer README, "Advertising format of the custom firmware": its example
    // 0x0e, 0x16, 0x1a, 0x18, 0x00 ×6, 0xaa, 0xaa, 0xbb, 0xcc, 0xdd, 0xdd, 0x00 (placeholder values,
    // decoded as the layout says: big-endian int16 × 0.1 °C).
    Vector(advertisement: serviceData(0x181A, "000000000000 aaaa bb cc dddd 00"), address: address("00:00:00:00:00:00"), format: .atc1441, packetId: 0, expected: [
        Expected("temperature", -2184.6, "°C"), Expected("humidity", 187, "%"),
        Expected("battery", 204, "%"), Expected("voltage", 56797, "mV"),
    ]),
    // A LYWSD03MMC with that firmware, as quoted in an open decoder's comments
    // ("Data is '10-16-1A-18-A4-C1-38-07-FC-EE-00-ED-24-29-0A-3F-08'").
    Vector(advertisement: serviceData(0x181A, "A4C13807FCEE 00ED 24 29 0A3F 08"), address: address("A4:C1:38:07:FC:EE"), format: .atc1441, packetId: 8, expected: [
        Expected("temperature", 23.7, "°C"), Expected("humidity", 36, "%"),
        Expected("battery", 41, "%"), Expected("voltage", 2623, "mV"),
    ]),
    // pvvx/ATC_MiThermometer issue #13 ("xiaomi-thb.ino and temperature below 0"): service data
    // 1a181477c638c1a4fcffda1cd10a3f9d0d, printed there as "Humidity: 73.86%, Vbatt: 2769,
    // Battery: 63%, flg: 0x0d, cout: 157" and a temperature the issue is about: int16 0xfffc, -0.04 °C.
    Vector(advertisement: serviceData(0x181A, "1477c638c1a4 fcff da1c d10a 3f 9d 0d"), address: address("A4:C1:38:C6:77:14"), format: .pvvx, packetId: 157, expected: [
        Expected("temperature", -0.04, "°C"), Expected("humidity", 73.86, "%"),
        Expected("voltage", 2769, "mV"), Expected("battery", 63, "%"),
        Expected("reed_switch", true), Expected("trigger_output", false), Expected("trigger_controlled", true),
        Expected("temperature_trigger", true), Expected("humidity_trigger", false),
    ]),
    // The same issue's second packet: "Humidity: 74.28%, Vbatt: 2763, Battery: 62%, flg: 0x0d, cout: 175".
    Vector(advertisement: serviceData(0x181A, "1477c638c1a4 f4ff 041d cb0a 3e af 0d"), address: address("A4:C1:38:C6:77:14"), format: .pvvx, packetId: 175, expected: [
        Expected("temperature", -0.12, "°C"), Expected("humidity", 74.28, "%"),
        Expected("voltage", 2763, "mV"), Expected("battery", 62, "%"),
        Expected("reed_switch", true), Expected("trigger_output", false), Expected("trigger_controlled", true),
        Expected("temperature_trigger", true), Expected("humidity_trigger", false),
    ]),
    // custom-components/ble_monitor, "Reverse engineering the MiBeacon protocol": a LYWSDCGQ at
    // 4C:65:A8:DD:B8:9B; "b2 00 → 17.8 °C", "75 02 → 62.9 %", "48 → 72%", frame counters 254, 255, 4, 8.
    Vector(advertisement: serviceData(0xFE95, "5020 aa01 fe 9bb8dda8654c 0d1004 b200 7502"), address: address("4C:65:A8:DD:B8:9B"),
           format: .mibeacon, packetId: 254, expected: [Expected("temperature", 17.8, "°C"), Expected("humidity", 62.9, "%")]),
    Vector(advertisement: serviceData(0xFE95, "5020 aa01 ff 9bb8dda8654c 041002 b100"), address: address("4C:65:A8:DD:B8:9B"),
           format: .mibeacon, packetId: 255, expected: [Expected("temperature", 17.7, "°C")]),
    Vector(advertisement: serviceData(0xFE95, "5020 aa01 04 9bb8dda8654c 061002 7402"), address: address("4C:65:A8:DD:B8:9B"),
           format: .mibeacon, packetId: 4, expected: [Expected("humidity", 62.8, "%")]),
    Vector(advertisement: serviceData(0xFE95, "5020 aa01 08 9bb8dda8654c 0a1001 48"), address: nil,
           format: .mibeacon, packetId: 8, expected: [Expected("battery", 72, "%")]),
    // Ruuvi data format 5 (RAWv2) specification, "Test vectors": valid data.
    Vector(advertisement: manufacturerData(0x0499, "0512FC5394C37C0004FFFC040CAC364200CDCBB8334C884F"), format: .ruuviRAWv2, packetId: 205, expected: [
        Expected("temperature", 24.3, "°C"), Expected("pressure", 100044, "Pa"), Expected("humidity", 53.49, "%"),
        Expected("acceleration_x", 0.004, "G"), Expected("acceleration_y", -0.004, "G"), Expected("acceleration_z", 1.036, "G"),
        Expected("tx_power", 4, "dBm"), Expected("voltage", 2.977, "V"), Expected("movement_counter", 66),
    ]),
    // ... maximum values.
    Vector(advertisement: manufacturerData(0x0499, "057FFFFFFEFFFE7FFF7FFF7FFFFFDEFEFFFECBB8334C884F"), format: .ruuviRAWv2, packetId: 65534, expected: [
        Expected("temperature", 163.835, "°C"), Expected("pressure", 115534, "Pa"), Expected("humidity", 163.835, "%"),
        Expected("acceleration_x", 32.767, "G"), Expected("acceleration_y", 32.767, "G"), Expected("acceleration_z", 32.767, "G"),
        Expected("tx_power", 20, "dBm"), Expected("voltage", 3.646, "V"), Expected("movement_counter", 254),
    ]),
    // ... minimum values.
    Vector(advertisement: manufacturerData(0x0499, "058001000000008001800180010000000000CBB8334C884F"), format: .ruuviRAWv2, packetId: 0, expected: [
        Expected("temperature", -163.835, "°C"), Expected("pressure", 50000, "Pa"), Expected("humidity", 0.0, "%"),
        Expected("acceleration_x", -32.767, "G"), Expected("acceleration_y", -32.767, "G"), Expected("acceleration_z", -32.767, "G"),
        Expected("tx_power", -40, "dBm"), Expected("voltage", 1.6, "V"), Expected("movement_counter", 0),
    ]),
    // ... invalid values: every field "not available", so no measurement and no sequence number.
    Vector(advertisement: manufacturerData(0x0499, "058000FFFFFFFF800080008000FFFFFFFFFFFFFFFFFFFFFF"), format: .ruuviRAWv2, packetId: nil, expected: []),
    // iBeacon, Apple's layout (type 0x02, length 0x15, UUID, major, minor, measured power) with the
    // values of a vendor manual's example (Lansitec tag manual, "Apple iBeacon"): major 0x03E8,
    // minor 0x07D0, "RSSI at 1m 0xC5 -59dBm".
    Vector(advertisement: manufacturerData(0x004C, "0215 0112233445566778899AABBCCDDEEFF0 03E8 07D0 C5"), format: .ibeacon, expected: [
        Expected("uuid", "01122334-4556-6778-899a-abbccddeeff0"), Expected("major", 1000), Expected("minor", 2000),
        Expected("measured_power", -59, "dBm"),
    ]),
    // Eddystone-UID layout (google/eddystone eddystone-uid), with the page's elided-UUID namespace
    // example 8b0ca750095477cb3e77 and its Tx power example "0xEE is interpreted as -18dBm".
    Vector(advertisement: serviceData(0xFEAA, "00 EE 8b0ca750095477cb3e77 0000000000aa 0000"), format: .eddystoneUID, expected: [
        Expected("tx_power", -18, "dBm"), Expected("namespace", "8b0ca750095477cb3e77"), Expected("instance", "0000000000aa"),
    ]),
    // The same without the RFU bytes ("Existing UID implementations that truncate the frame ... 0x15"),
    // values of the Lansitec manual's "Eddystone UID" example.
    Vector(advertisement: serviceData(0xFEAA, "00 00 01122334455667788990 aabbccddee00"), format: .eddystoneUID, expected: [
        Expected("tx_power", 0, "dBm"), Expected("namespace", "01122334455667788990"), Expected("instance", "aabbccddee00"),
    ]),
    // Eddystone-URL: the page's example URL https://goo.gl/S6zT6P (scheme 0x03) and "0x12 → +18dBm".
    Vector(advertisement: serviceData(0xFEAA, "10 12 03 676f6f2e676c2f53367a543650"), format: .eddystoneURL, expected: [
        Expected("tx_power", 18, "dBm"), Expected("url", "https://goo.gl/S6zT6P"),
    ]),
    // The Lansitec manual's "Eddystone URL" example: "http://www." + "minewtech" + ".com/".
    Vector(advertisement: serviceData(0xFEAA, "10 00 00 6d696e657774656368 00"), format: .eddystoneURL, expected: [
        Expected("tx_power", 0, "dBm"), Expected("url", "http://www.minewtech.com/"),
    ]),
    // Eddystone-TLM (unencrypted, eddystone-tlm/tlm-plain), from its layout: 3000 mV, 8.8 fixed
    // point 0x1980 = 25.5 °C, 100 PDUs, 36000 × 0.1 s.
    Vector(advertisement: serviceData(0xFEAA, "20 00 0BB8 1980 00000064 00008CA0"), format: .eddystoneTLM, expected: [
        Expected("voltage", 3000, "mV"), Expected("temperature", 25.5, "°C"),
        Expected("advertisement_count", 100), Expected("uptime", 3600.0, "s"),
    ]),
    // "If not supported ... zeroed" (battery) and "0x8000, -128 °C" (temperature): left out. -1.25 °C is 0xFEC0.
    Vector(advertisement: serviceData(0xFEAA, "20 00 0000 8000 00000001 00000005"), format: .eddystoneTLM, expected: [
        Expected("advertisement_count", 1), Expected("uptime", 0.5, "s"),
    ]),
    Vector(advertisement: serviceData(0xFEAA, "20 00 0000 FEC0 00000001 00000005"), format: .eddystoneTLM, expected: [
        Expected("temperature", -1.25, "°C"), Expected("advertisement_count", 1), Expected("uptime", 0.5, "s"),
    ]),
]

/// Payloads that must stay raw: truncated, too long, reserved values, other frame types.
let rawPayloads: [(String, AdvertisementData, BluetoothAddress?)] = [
    ("atc1441 short", serviceData(0x181A, "A4C13807FCEE 00ED 24 29 0A3F"), nil),
    ("0x181A of another length", serviceData(0x181A, "1477c638c1a4 fcff da1c d10a 3f 9d"), nil),
    // A PVVX payload cut to the ATC1441 length: its MAC is in PVVX's order, not the advertiser's.
    ("pvvx cut to 13 bytes", serviceData(0x181A, "1477c638c1a4 fcff da1c d10a 3f"), address("A4:C1:38:C6:77:14")),
    ("atc1441 of another device", serviceData(0x181A, "A4C13807FCEE 00ED 24 29 0A3F 08"), address("A4:C1:38:07:FC:EF")),
    ("pvvx of another device", serviceData(0x181A, "1477c638c1a4 fcff da1c d10a 3f 9d 0d"), address("A4:C1:38:C6:77:15")),
    ("0x181A empty", serviceData(0x181A, ""), nil),
    ("mibeacon of another device", serviceData(0xFE95, "5020 aa01 fe 9bb8dda8654c 0d1004 b2007502"), address("4C:65:A8:DD:B8:9C")),
    // Magalex2x14/LYWSD03MMC-info: a frame with MAC and capability but no object.
    ("mibeacon without object", serviceData(0xFE95, "3058 5b05 bf 6b872f38c1a4 08"), nil),
    ("mibeacon object cut short", serviceData(0xFE95, "5020 aa01 fe 9bb8dda8654c 0d1004 b200"), nil),
    ("mibeacon object of a wrong length", serviceData(0xFE95, "5020 aa01 ff 9bb8dda8654c 041003 b10000"), nil),
    ("mibeacon unknown object only", serviceData(0xFE95, "5020 aa01 ff 9bb8dda8654c 991002 b100"), nil),
    ("mibeacon mesh", serviceData(0xFE95, "d020 aa01 ff 9bb8dda8654c 041002 b100"), nil),
    ("mibeacon header only", serviceData(0xFE95, "5020aa"), nil),
    ("ruuvi short", manufacturerData(0x0499, "0512FC5394C37C0004FFFC040CAC364200CDCBB8334C88"), nil),
    ("ruuvi other format", manufacturerData(0x0499, "03291A1ECE1EFC18F94202CA0B53"), nil),
    ("ibeacon short", manufacturerData(0x004C, "0215 0112233445566778899AABBCCDDEEFF0 03E8 07D0"), nil),
    ("apple other type", manufacturerData(0x004C, "1005 0b1c4f7a8c"), nil),
    ("eddystone uid short", serviceData(0xFEAA, "00 00 01122334455667788990 aabbccddee"), nil),
    ("eddystone url reserved code", serviceData(0xFEAA, "10 00 00 6d0e"), nil),
    ("eddystone url unprintable", serviceData(0xFEAA, "10 00 00 6d20"), nil),
    ("eddystone url reserved scheme", serviceData(0xFEAA, "10 00 04 6d"), nil),
    ("eddystone url too long", serviceData(0xFEAA, "10 00 00 616161616161616161616161616161616161"), nil),
    ("eddystone encrypted tlm", serviceData(0xFEAA, "20 01 0BB8 1980 00000064 00008CA0"), nil),
    ("eddystone tlm long", serviceData(0xFEAA, "20 00 0BB8 1980 00000064 00008CA0 00"), nil),
    ("eddystone eid", serviceData(0xFEAA, "30 00 0011223344556677"), nil),
    ("eddystone empty", serviceData(0xFEAA, ""), nil),
    ("nothing", AdvertisementData(), nil),
    ("unrelated service data", serviceData(0x180F, "64"), nil),
]

@Suite struct FormatTests {
    @Test(arguments: formatVectors)
    func specificationExample(vector: Vector) throws {
        let reading = try #require(Sensors.decode(vector.advertisement, address: vector.address))
        #expect(reading == vector.reading)
        // The sensor board asks this first: every advertisement a decoder reads must pass it.
        #expect(Sensors.mayDecode(vector.advertisement))
        // The same advertisement as the kernel reports it, its bytes: read the same.
        let bytes = asBytes(vector.advertisement)
        #expect(Sensors.mayDecode(AdvertisementData(advertisingData: bytes, connectable: nil)))
        #expect(Sensors.decode(AdvertisementData(advertisingData: bytes, connectable: nil), address: vector.address) == reading)
    }

    /// 16-bit service data and manufacturer data as AD structures.
    private func asBytes(_ ad: AdvertisementData) -> [UInt8] {
        var out: [UInt8] = []
        for (uuid, data) in ad.serviceData {
            let short = uuid.uint16!
            out += [UInt8(data.count + 3), 0x16, UInt8(short & 0xFF), UInt8(short >> 8)] + data
        }
        for (company, data) in ad.manufacturerData {
            out += [UInt8(data.count + 3), 0xFF, UInt8(company & 0xFF), UInt8(company >> 8)] + data
        }
        return out
    }

    @Test func advertisementsNoDecoderReadsAreToldApartCheaply() {
        #expect(!Sensors.mayDecode(AdvertisementData()))
        #expect(!Sensors.mayDecode(AdvertisementData(manufacturerData: [0xFFFF: [0]], serviceData: [BluetoothUUID(uint16: 0x180F): [100]])))
        #expect(Sensors.mayDecode(AdvertisementData(manufacturerData: [0xFFFF: [0], 0x004C: []])))
        #expect(!Sensors.mayDecode(AdvertisementData(advertisingData: [0x04, 0xFF, 0xFF, 0xFF, 0x00, 0x02, 0x01, 0x06], connectable: nil)))
        #expect(Sensors.mayDecode(AdvertisementData(advertisingData: [0x02, 0x01, 0x06, 0x03, 0xFF, 0x4C, 0x00], connectable: nil)))
        // Too short to hold a company identifier: no decoder's.
        #expect(!Sensors.mayDecode(AdvertisementData(advertisingData: [0x02, 0xFF, 0x4C], connectable: nil)))
    }

    @Test(arguments: rawPayloads)
    func unrecognisedStaysRaw(name: String, advertisement: AdvertisementData, address: BluetoothAddress?) {
        #expect(Sensors.decode(advertisement, address: address) == nil, "\(name)")
    }

    /// ble_monitor's encrypted MiBeacon example (a v5 frame) without its key: recognised, reported encrypted, not decoded.
    @Test func encryptedMiBeacon() throws {
        let advertisement = serviceData(0xFE95, "5859 8d0a 17 0fc4e044ef54 7cc27a5c03a1 000000 790df258")
        let reading = try #require(Sensors.decode(advertisement, address: address("54:EF:44:E0:C4:0F")))
        #expect(reading == SensorReading(format: .mibeacon, packetId: 0x17, encryption: .missingKey))
    }

    /// Every strict prefix of every example stays raw (each MiBeacon example has one object), unless
    /// the format makes it a frame of its own.
    @Test(arguments: formatVectors)
    func truncationsStayRaw(vector: Vector) {
        for (uuid, payload) in vector.advertisement.serviceData {
            for count in 0..<payload.count where !vector.prefixIsAFrame(count) {
                let truncated = AdvertisementData(serviceData: [uuid: Array(payload.prefix(count))])
                #expect(Sensors.decode(truncated, address: vector.address) == nil, "\(count) bytes")
            }
        }
        for (company, payload) in vector.advertisement.manufacturerData {
            for count in 0..<payload.count {
                #expect(Sensors.decode(AdvertisementData(manufacturerData: [company: Array(payload.prefix(count))]), address: nil) == nil)
            }
        }
    }

    /// Pseudo-random payloads under every known UUID and company: decoding terminates without a crash.
    @Test func randomPayloadsNeverCrash() {
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        func next() -> UInt8 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return UInt8(truncatingIfNeeded: state >> 56)
        }
        let uuids: [UInt16] = [0xFCD2, 0x181A, 0xFE95, 0xFEAA]
        let keys = EncryptionExample.keys
        for round in 0..<4000 {
            let payload = (0..<Int(next() % 32)).map { _ in next() }
            let uuid = uuids[round % uuids.count]
            _ = Sensors.decode(AdvertisementData(serviceData: [BluetoothUUID(uint16: uuid): payload]), address: EncryptionExample.mac, keys: keys)
            _ = Sensors.decode(AdvertisementData(manufacturerData: [round % 2 == 0 ? 0x0499 : 0x004C: [0x05, 0x02, 0x15] + payload]), address: nil)
        }
    }

    /// BTHome first: a PVVX-firmware thermometer can advertise BTHome, PVVX and MiBeacon at once.
    @Test func bthomeWinsOverOtherFormats() throws {
        var advertisement = serviceData(0x181A, "1477c638c1a4 fcff da1c d10a 3f 9d 0d")
        advertisement.serviceData[BluetoothUUID(uint16: 0xFCD2)] = bytes("40 02CA09")
        #expect(try #require(Sensors.decode(advertisement, address: nil)).format == .bthome)
        // A BTHome payload that is malformed leaves the field to the next format.
        advertisement.serviceData[BluetoothUUID(uint16: 0xFCD2)] = bytes("40 02CA")
        #expect(try #require(Sensors.decode(advertisement, address: nil)).format == .pvvx)
    }
}
