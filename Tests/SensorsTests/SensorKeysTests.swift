import BLE
import FoundationEssentials
@testable import Sensors
import Testing

@Suite struct SensorKeysTests {
    @Test func parsesAddressesKeysCommentsAndLineEnds() throws {
        let text = "# thermometers\r\n54:48:E6:8F:80:A5 231d39c1d7cc1ab1aee224cd096db932\r\n\n"
            + "\ta4-c1-38-07-fc-ee\t00112233445566778899AABBCCDDEEFF   # the hallway\n"
        let keys = try SensorKeys(parsing: text, source: "keys.txt")
        #expect(keys.count == 2)
        #expect(keys[address("54:48:E6:8F:80:A5")] == EncryptionExample.key)
        #expect(keys[address("A4:C1:38:07:FC:EE")] == bytes("00112233445566778899aabbccddeeff"))
        #expect(keys[address("00:00:00:00:00:01")] == nil)
        #expect(try SensorKeys(parsing: "", source: "empty").count == 0)
    }

    @Test(arguments: [
        ("54:48:E6:8F:80:A5\n", 1, "expected \"AA:BB:CC:DD:EE:FF\" and a 32-hex-digit key, got 1 word(s)"),
        ("\n54:48:E6:8F:80:A5 231d39c1d7cc1ab1aee224cd096db932 extra\n", 2, "expected \"AA:BB:CC:DD:EE:FF\" and a 32-hex-digit key, got 3 word(s)"),
        ("54:48:E6:8F:80 231d39c1d7cc1ab1aee224cd096db932", 1, "\"54:48:E6:8F:80\" is not a Bluetooth address (AA:BB:CC:DD:EE:FF)"),
        ("54:48:E6:8F:80:A5 231d39c1d7cc1ab1aee224cd096db9", 1, "the key of 54:48:E6:8F:80:A5 is not 32 hex digits"),
        ("54:48:E6:8F:80:A5 231d39c1d7cc1ab1aee224cd096db93g", 1, "the key of 54:48:E6:8F:80:A5 is not 32 hex digits"),
        ("54:48:E6:8F:80:A5 231d39c1d7cc1ab1aee224cd096db932\n# again\n54:48:e6:8f:80:a5 00112233445566778899aabbccddeeff",
         3, "54:48:E6:8F:80:A5 already has a key at line 1"),
    ])
    func errorsNameTheLine(text: String, line: Int, message: String) {
        #expect(throws: SensorKeysError(source: "keys.txt", line: line, message: message)) {
            try SensorKeys(parsing: text, source: "keys.txt")
        }
    }

    /// The shape documented on `SensorReading`, as the gateway's encoder (sorted keys) writes it.
    @Test func jsonShape() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        var reading = try #require(bthome(EncryptionExample.serviceData, address: EncryptionExample.mac, keys: EncryptionExample.keys))
        reading.packetId = 12
        #expect(String(decoding: try encoder.encode(reading), as: UTF8.self)
            == #"{"encrypted":true,"encryption":"decrypted","format":"bthome","measurements":{"humidity":{"unit":"%","value":50.55},"temperature":{"unit":"°C","value":25.06}},"packetId":12}"#)
        let partial = try #require(bthome("40 0161 1A01 3C0103 F100010204 FE00"))
        #expect(String(decoding: try encoder.encode(partial), as: UTF8.self)
            == #"{"encrypted":false,"encryption":"none","format":"bthome","measurements":{"battery":{"unit":"%","value":97},"dimmer":{"steps":3,"value":"rotate_left"},"door":{"value":true},"firmware_version":{"value":"4.2.1.0"}},"unparsed":"fe00"}"#)
        let refused = SensorReading(format: .mibeacon, packetId: 23, encryption: .unsupported)
        #expect(String(decoding: try encoder.encode(refused), as: UTF8.self)
            == #"{"encrypted":true,"encryption":"unsupported","format":"mibeacon","measurements":{},"packetId":23}"#)
    }
}
