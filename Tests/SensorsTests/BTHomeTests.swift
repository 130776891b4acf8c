import AESCCM
import BLE
@testable import Sensors
import Testing

/// Every "Example" / "Result" pair of the BTHome v2 format page (bthome.io/format), in the page's
/// order: sensor data, binary sensor data, events, device information.
let bthomeFormatExamples: [(hex: String, expected: Expected)] = [
    ("518756", Expected("acceleration", 22.151, "m/s²")),
    ("630057D0FF", Expected("acceleration", -3.123456, "m/s²")),
    ("0161", Expected("battery", 97, "%")),
    ("6001", Expected("channel", 1)),
    ("12E204", Expected("co2", 1250, "ppm")),
    ("56E803", Expected("conductivity", 1000, "µS/cm")),
    ("0960", Expected("count", 96)),
    ("3D0960", Expected("count", 24585)),
    ("3E2A2C0960", Expected("count", 1611213866)),
    ("59EA", Expected("count", -22)),
    ("5AEAEA", Expected("count", -5398)),
    ("5BEA0234EA", Expected("count", -365690134)),
    ("434E34", Expected("current", 13.39, "A")),
    ("5D02EA", Expected("current", -5.63, "A")),
    ("08CA06", Expected("dewpoint", 17.38, "°C")),
    ("5E9F8C", Expected("direction", 359.99, "°")),
    ("400C00", Expected("distance", 12, "mm")),
    ("414E00", Expected("distance", 7.8, "m")),
    ("424E3400", Expected("duration", 13.390, "s")),
    ("4d12138a14", Expected("energy", 344593.170, "kWh")),
    ("0A138A14", Expected("energy", 1346.067, "kWh")),
    ("4B138A14", Expected("gas", 1346.067, "m³")),
    ("4C41018A01", Expected("gas", 25821.505, "m³")),
    ("528756", Expected("gyroscope", 22.151, "°/s")),
    ("03BF13", Expected("humidity", 50.55, "%")),
    ("2E23", Expected("humidity", 35, "%")),
    ("05138A14", Expected("illuminance", 13460.67, "lx")),
    ("6402", Expected("light_level", 2)),
    ("065E1F", Expected("mass", 80.3, "kg")),
    ("073E1D", Expected("mass", 74.86, "lb")),
    ("14020C", Expected("moisture", 30.74, "%")),
    ("2F23", Expected("moisture", 35, "%")),
    ("0D120C", Expected("pm2_5", 3090, "µg/m³")),
    ("0E021C", Expected("pm10", 7170, "µg/m³")),
    ("0B021B00", Expected("power", 69.14, "W")),
    ("5C02FBFFFF", Expected("power", -12.78, "W")),
    ("5FA00F", Expected("precipitation", 400.0, "mm")),
    ("04138A01", Expected("pressure", 1008.83, "hPa")),
    ("540C48656C6C6F20576F726C6421", Expected("raw", "48656c6c6f20576f726c6421")),
    ("3F020C", Expected("rotation", 307.4, "°")),
    ("61AC0D", Expected("rotational_speed", 3500, "rpm")),
    ("6503", Expected("settings_revision", 3)),
    ("444E34", Expected("speed", 133.90, "m/s")),
    ("624099DFFF", Expected("speed", -2.123456, "m/s")),
    ("57EA", Expected("temperature", -22, "°C")),
    ("58EA", Expected("temperature", -7.7, "°C")),
    ("451101", Expected("temperature", 27.3, "°C")),
    ("02CA09", Expected("temperature", 25.06, "°C")),
    ("530C48656C6C6F20576F726C6421", Expected("text", "Hello World!")),
    // "1684093277 seconds, which corresponds to 2023-5-14, 19:41:17" (UTC).
    ("505d396164", Expected("timestamp", "2023-05-14T19:41:17Z")),
    ("133301", Expected("tvoc", 307, "µg/m³")),
    ("0C020C", Expected("voltage", 3.074, "V")),
    ("4A020C", Expected("voltage", 307.4, "V")),
    ("4E87562A01", Expected("volume", 19551.879, "L")),
    ("478756", Expected("volume", 2215.1, "L")),
    ("48DC87", Expected("volume", 34780, "mL")),
    ("5587562A01", Expected("volume_storage", 19551.879, "L")),
    ("49DC87", Expected("volume_flow_rate", 34.780, "m³/h")),
    ("4632", Expected("uv_index", 5.0)),
    ("4F87562A01", Expected("water", 19551.879, "L")),
    ("1501", Expected("battery_low", true)),
    ("1601", Expected("battery_charging", true)),
    ("1700", Expected("carbon_monoxide", false)),
    ("1801", Expected("cold", true)),
    ("1900", Expected("connectivity", false)),
    ("1A00", Expected("door", false)),
    ("1B01", Expected("garage_door", true)),
    ("1C01", Expected("gas_detected", true)),
    ("0F01", Expected("generic_boolean", true)),
    ("1D00", Expected("heat", false)),
    ("1E01", Expected("light", true)),
    ("1F01", Expected("lock", true)),
    ("2001", Expected("moisture_wet", true)),
    ("2100", Expected("motion", false)),
    ("2201", Expected("moving", true)),
    ("2301", Expected("occupancy", true)),
    ("1100", Expected("opening", false)),
    ("2400", Expected("plug", false)),
    ("1001", Expected("power_on", true)),
    ("2500", Expected("presence", false)),
    ("2601", Expected("problem", true)),
    ("2701", Expected("running", true)),
    ("2800", Expected("safety", false)),
    ("2901", Expected("smoke", true)),
    ("2A00", Expected("sound", false)),
    ("2B00", Expected("tamper", false)),
    ("2C01", Expected("vibration", true)),
    ("2D01", Expected("window", true)),
    ("3A00", Expected("button", "none")),
    ("3A01", Expected("button", "press")),
    ("3A02", Expected("button", "double_press")),
    ("3A03", Expected("button", "triple_press")),
    ("3A04", Expected("button", "long_press")),
    ("3A05", Expected("button", "long_double_press")),
    ("3A06", Expected("button", "long_triple_press")),
    ("3A80", Expected("button", "hold_press")),
    ("3B0000", Expected("command", "off")),
    ("3B0001", Expected("command", "on")),
    ("3B0002", Expected("command", "toggle")),
    ("3B010305", Expected("command", "step_up", steps: 5)),
    ("3B010405", Expected("command", "step_down", steps: 5)),
    ("3C0000", Expected("dimmer", "none")),
    ("3C0103", Expected("dimmer", "rotate_left", steps: 3)),
    ("3C020A", Expected("dimmer", "rotate_right", steps: 10)),
    ("F00100", Expected("device_type_id", 1)),
    ("F100010204", Expected("firmware_version", "4.2.1.0")),
    ("F2000106", Expected("firmware_version", "6.1.0")),
]

/// The encryption page's example (bthome.io/encryption).
enum EncryptionExample {
    static let key = bytes("231d39c1d7cc1ab1aee224cd096db932")
    static let mac = address("54:48:E6:8F:80:A5")
    static let plaintext = bytes("02CA09 03BF13")
    static let nonce = bytes("5448e68f80a5d2fc4133221100")
    static let ciphertext = bytes("e445f3c9962b")
    static let mic = bytes("6c7c4519")
    /// "Service Data = d2fc41e445f3c9962b332211006c7c4519", without the UUID BlueZ keys it by.
    static let serviceData = "41 e445f3c9962b 33221100 6c7c4519"
    static let keys = SensorKeys([mac: key])
}

func bthome(_ hex: String, address: BluetoothAddress? = nil, keys: SensorKeys = SensorKeys()) -> SensorReading? {
    Sensors.decode(serviceData(0xFCD2, hex), address: address, keys: keys)
}

@Suite struct BTHomeTests {
    @Test(arguments: bthomeFormatExamples)
    func formatPageExample(hex: String, expected: Expected) throws {
        let reading = try #require(bthome("40" + hex))
        #expect(reading.format == .bthome)
        #expect(reading.encryption == .none)
        #expect(reading.unparsed.isEmpty)
        #expect(reading.measurements.count == 1)
        #expect(reading.measurements[expected.name] == expected.measurement)
    }

    @Test func everyObjectIdHasAnExampleFromTheFormatPage() {
        let exampled = Set(bthomeFormatExamples.map { bytes($0.hex)[0] })
        // 0x00 is the packet id, tested on its own below.
        #expect(exampled.union([0x00]) == Set(BTHome.objects.keys))
    }

    /// The page's opening example: "0xD2FC 40 02C409 03BF13" → 25.00 °C, 50.55 %.
    @Test func formatPageAdvertisement() throws {
        let reading = try #require(bthome("40 02C409 03BF13"))
        #expect(reading.measurements == measurements([
            Expected("temperature", 25.0, "°C"), Expected("humidity", 50.55, "%"),
        ]))
        #expect(reading.packetId == nil)
    }

    /// "Packet id ... 0009 → 9".
    @Test func packetId() throws {
        let reading = try #require(bthome("40 0009 0161"))
        #expect(reading.packetId == 9)
        #expect(reading.measurements == measurements([Expected("battery", 97, "%")]))
    }

    /// "Multiple events of the same type": 3A003A01 is no event for the first button, press for the second;
    /// repeated measurements get a postfix in the order sent.
    @Test func repeatedObjectsAreNumbered() throws {
        let reading = try #require(bthome("40 3A00 3A01 02CA09 02C409"))
        #expect(reading.measurements == measurements([
            Expected("button", "none"), Expected("button", "press"),
            Expected("temperature", 25.06, "°C"), Expected("temperature", 25.0, "°C"),
        ]))
        #expect(reading.measurements["button_2"]?.value == "press")
        #expect(reading.measurements["temperature_2"]?.value == 25.0)
    }

    /// "A BTHome receiver will stop parsing object ids as soon as it finds an object id that isn't
    /// supported": what came before is kept, the rest is reported, nothing after is guessed.
    @Test(arguments: [
        ("40 02CA09 FE 0161", [Expected("temperature", 25.06, "°C")], "fe0161"),
        ("40 FE 02CA09", [], "fe02ca09"),
        // Values the page does not define stop parsing the same way.
        ("40 0161 1502 02CA09", [Expected("battery", 97, "%")], "150202ca09"),
        ("40 3A07", [], "3a07"),
        ("40 3C0301", [], "3c0301"),
        ("40 3B0007", [], "3b0007"),
        ("40 3B200000", [], "3b200000"),
        ("40 3B01000A", [], "3b01000a"),
        ("40 5302FFFE", [], "5302fffe"),
    ] as [(String, [Expected], String)])
    func unknownContentStopsDecoding(hex: String, kept: [Expected], unparsed: String) throws {
        let reading = try #require(bthome(hex))
        #expect(reading.measurements == measurements(kept))
        #expect(Hex.string(reading.unparsed) == unparsed)
    }

    /// A known object cut short, a wrong version or no payload at all: not BTHome, kept raw.
    @Test(arguments: [
        "", "40 02CA", "40 03", "40 0009 04138A", "40 530C48656C6C6F", "40 54FF", "40 3C01", "40 3B01",
        "40 F10001", "40 505d3961",
        // BTHome v1 (version bits 001) and reserved versions.
        "20 02CA09", "60 02CA09", "00",
        // Encrypted, but too short for a counter and a tag.
        "41 3322110000",
    ])
    func malformedStaysRaw(hex: String) {
        #expect(bthome(hex, address: EncryptionExample.mac, keys: EncryptionExample.keys) == nil)
    }

    @Test func encryptionExampleSeals() {
        let sealed = AESCCM.seal(
            EncryptionExample.plaintext, key: EncryptionExample.key, nonce: EncryptionExample.nonce, tagLength: 4)
        #expect(sealed == EncryptionExample.ciphertext + EncryptionExample.mic)
        #expect(BTHome.nonce(address: EncryptionExample.mac, info: 0x41, counter: bytes("33221100")) == EncryptionExample.nonce)
    }

    /// "The result will be the decrypted data 02ca09 03bf13": 25.06 °C, 50.55 %.
    @Test func encryptionExampleDecrypts() throws {
        let reading = try #require(bthome(EncryptionExample.serviceData, address: EncryptionExample.mac, keys: EncryptionExample.keys))
        #expect(reading.encryption == .decrypted)
        #expect(reading.measurements == measurements([
            Expected("temperature", 25.06, "°C"), Expected("humidity", 50.55, "%"),
        ]))
    }

    @Test(arguments: [
        // No key for the device, or no address to build the nonce with.
        (EncryptionExample.serviceData, EncryptionExample.mac, SensorKeys(), Encryption.missingKey),
        (EncryptionExample.serviceData, nil, EncryptionExample.keys, .missingKey),
        (EncryptionExample.serviceData, address("54:48:E6:8F:80:A6"), SensorKeys([address("54:48:E6:8F:80:A6"): EncryptionExample.key]), .failed),
        // A wrong key.
        (EncryptionExample.serviceData, EncryptionExample.mac, SensorKeys([EncryptionExample.mac: bytes("231d39c1d7cc1ab1aee224cd096db933")]), .failed),
        // Tampered ciphertext, counter, tag, device information byte.
        ("41 e445f3c9962a 33221100 6c7c4519", EncryptionExample.mac, EncryptionExample.keys, .failed),
        ("41 e445f3c9962b 34221100 6c7c4519", EncryptionExample.mac, EncryptionExample.keys, .failed),
        ("41 e445f3c9962b 33221100 6c7c4518", EncryptionExample.mac, EncryptionExample.keys, .failed),
        ("45 e445f3c9962b 33221100 6c7c4519", EncryptionExample.mac, EncryptionExample.keys, .failed),
        // Truncated by one ciphertext byte.
        ("41 e445f3c996 33221100 6c7c4519", EncryptionExample.mac, EncryptionExample.keys, .failed),
        // Cleartext from a device that has a key: refused.
        ("40 02CA09 03BF13", EncryptionExample.mac, EncryptionExample.keys, .refusedCleartext),
    ] as [(String, BluetoothAddress?, SensorKeys, Encryption)])
    func undecryptableCarriesNoMeasurements(hex: String, address: BluetoothAddress?, keys: SensorKeys, encryption: Encryption) throws {
        let reading = try #require(bthome(hex, address: address, keys: keys))
        #expect(reading.format == .bthome)
        #expect(reading.encryption == encryption)
        #expect(reading.measurements.isEmpty)
        #expect(reading.packetId == nil)
    }

    /// A payload sealed as the encryption page describes, with another counter.
    private func sealed(counter: [UInt8], plaintext: [UInt8]) -> String {
        let nonce = BTHome.nonce(address: EncryptionExample.mac, info: 0x41, counter: counter)
        let sealed = AESCCM.seal(plaintext, key: EncryptionExample.key, nonce: nonce, tagLength: 4)!
        return Hex.string([0x41] + sealed.dropLast(4) + counter + sealed.suffix(4))
    }

    @Test func replayedCountersAreRefused() throws {
        var guardian = ReplayGuard()
        let mac = EncryptionExample.mac
        func admit(_ hex: String) throws -> SensorReading {
            guardian.admit(try #require(bthome(hex, address: mac, keys: EncryptionExample.keys)), from: mac)
        }
        let example = try admit(EncryptionExample.serviceData)
        #expect(example.encryption == .decrypted)
        // The same advertisement again (devices repeat them): still good.
        #expect(try admit(EncryptionExample.serviceData) == example)
        // A later counter: good.
        let later = try admit(sealed(counter: bytes("34221100"), plaintext: bytes("0161")))
        #expect(later.encryption == .decrypted)
        #expect(later.measurements == measurements([Expected("battery", 97, "%")]))
        // The example again, now older than the last counter: replayed.
        let replayed = try admit(EncryptionExample.serviceData)
        #expect(replayed.encryption == .replayed)
        #expect(replayed.measurements.isEmpty)
        // The last counter with other contents: replayed too.
        #expect(try admit(sealed(counter: bytes("34221100"), plaintext: bytes("0162"))).encryption == .replayed)
        // Another device has its own counter.
        let other = address("11:22:33:44:55:66")
        #expect(guardian.admit(example, from: other) == example)
    }
}
