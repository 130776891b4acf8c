import BLE
import FoundationEssentials
import Testing

@Suite struct BluetoothAddressTests {
    @Test func asA48BitInteger() {
        let address = BluetoothAddress("AA:BB:CC:DD:EE:0F")!
        #expect(address.integer == 0xAABB_CCDD_EE0F)
        #expect(BluetoothAddress(integer: 0xAABB_CCDD_EE0F) == address)
        #expect(BluetoothAddress(integer: 1 << 48) == nil)
    }

    @Test(arguments: [
        ("AA:BB:CC:DD:EE:FF", "AA:BB:CC:DD:EE:FF"),
        ("aa:bb:cc:dd:ee:ff", "AA:BB:CC:DD:EE:FF"),
        ("aA-bB-cC-dD-eE-fF", "AA:BB:CC:DD:EE:FF"),
        ("01-23-45-67-89-ab", "01:23:45:67:89:AB"),
        ("00:00:00:00:00:00", "00:00:00:00:00:00"),
    ])
    func parsesToUppercaseColonForm(input: String, description: String) throws {
        let address = try #require(BluetoothAddress(input))
        #expect(address.description == description)
        #expect(BluetoothAddress(address.description) == address)
    }

    @Test(arguments: [
        "", "AA:BB:CC:DD:EE", "AA:BB:CC:DD:EE:FF:00", "AA:BB-CC:DD:EE:FF", "AABBCCDDEEFF",
        "AA_BB_CC_DD_EE_FF", "AA.BB.CC.DD.EE.FF", "AA:BB:CC:DD:EE:FG", "A:BB:CC:DD:EE:FFF",
        "AA::BB:CC:DD:EE:F", " AA:BB:CC:DD:EE:FF", "AA:BB:CC:DD:EE:FF ", "dev_AA_BB_CC_DD_EE_FF",
    ])
    func rejectsInvalidForms(input: String) {
        #expect(BluetoothAddress(input) == nil)
    }

    @Test func otherSeparators() throws {
        let address = try #require(BluetoothAddress("01_23_45_67_89_ab"[...], separator: "_"))
        #expect(address.description == "01:23:45:67:89:AB")
        #expect(address.joined(by: "_") == "01_23_45_67_89_AB")
        #expect(BluetoothAddress("01:23:45:67:89:ab"[...], separator: "_") == nil)
        #expect(BluetoothAddress("01_23_45_67_89_ab"[...], separator: "é") == nil)
    }

    @Test func bytesAreMostSignificantFirst() throws {
        let address = try #require(BluetoothAddress("01:23:45:67:89:AB"))
        #expect(address.bytes == [0x01, 0x23, 0x45, 0x67, 0x89, 0xAB])
        #expect(BluetoothAddress(bytes: [0x01, 0x23, 0x45, 0x67, 0x89, 0xAB]) == address)
        #expect(BluetoothAddress(bytes: [0x01, 0x23, 0x45, 0x67, 0x89]) == nil)
        #expect(BluetoothAddress(bytes: [0x01, 0x23, 0x45, 0x67, 0x89, 0xAB, 0xCD]) == nil)
        #expect(try #require(BluetoothAddress("01:23:45:67:89:AB")) < #require(BluetoothAddress("01:23:45:67:89:AC")))
    }

    @Test func codableAsString() throws {
        let address = try #require(BluetoothAddress("aa-bb-cc-dd-ee-01"))
        let json = try JSONEncoder().encode([address])
        #expect(String(decoding: json, as: UTF8.self) == "[\"AA:BB:CC:DD:EE:01\"]")
        #expect(try JSONDecoder().decode([BluetoothAddress].self, from: Data("[\"aa-bb-cc-dd-ee-01\"]".utf8)) == [address])
        let message = try dataCorruptedMessage(decoding: BluetoothAddress.self, fromJSONString: "AA:BB")
        #expect(message.hasPrefix("invalid Bluetooth address \"AA:BB\""))
    }
}
