import BLE
import Testing

@Suite struct PairingKeysTests {
    private let lock = BluetoothAddress("C4:7C:8D:6A:11:02")!
    private let old = BluetoothAddress("00:1A:7D:DA:71:13")!

    @Test func passkeysAndPINCodesOneDeviceALine() throws {
        let keys = try PairingKeys(parsing: """
            # front door
            C4:7C:8D:6A:11:02 passkey 012345\r
            \t00:1a:7d:da:71:13   pin  0000  # the old keyboard

            """, source: "keys")
        #expect(keys.count == 2)
        #expect(keys[lock] == .passkey(12345))
        #expect(keys[old] == .pinCode("0000"))
        #expect(keys[BluetoothAddress("F0:00:00:00:00:01")!] == nil)
    }

    @Test(arguments: [
        ("C4:7C:8D:6A:11:02 123456", "keys:1: expected \"AA:BB:CC:DD:EE:FF passkey 123456\" or \"AA:BB:CC:DD:EE:FF pin 0000\", got 2 word(s)"),
        ("C4:7C:8D:6A:11 passkey 123456", "keys:1: \"C4:7C:8D:6A:11\" is not a Bluetooth address (AA:BB:CC:DD:EE:FF)"),
        ("C4:7C:8D:6A:11:02 passkey 12345", "keys:1: the passkey of C4:7C:8D:6A:11:02 is not six digits"),
        ("C4:7C:8D:6A:11:02 passkey +12345", "keys:1: the passkey of C4:7C:8D:6A:11:02 is not six digits"),
        ("C4:7C:8D:6A:11:02 passkey １２３４５６", "keys:1: the passkey of C4:7C:8D:6A:11:02 is not six digits"),
        ("C4:7C:8D:6A:11:02 pin 12345678901234567", "keys:1: the PIN code of C4:7C:8D:6A:11:02 is not 1 to 16 letters or digits"),
        ("C4:7C:8D:6A:11:02 pin 12-34", "keys:1: the PIN code of C4:7C:8D:6A:11:02 is not 1 to 16 letters or digits"),
        ("C4:7C:8D:6A:11:02 code 1234", "keys:1: \"code\" is neither passkey nor pin"),
        ("C4:7C:8D:6A:11:02 pin 1234\nc4:7c:8d:6a:11:02 passkey 123456", "keys:2: C4:7C:8D:6A:11:02 already has a key at line 1"),
    ])
    func aBadLineIsAnErrorWithItsNumber(text: String, message: String) {
        #expect(throws: LineError.self) { try PairingKeys(parsing: text, source: "keys") }
        do {
            _ = try PairingKeys(parsing: text, source: "keys")
        } catch {
            #expect(error.description == message)
        }
    }
}
