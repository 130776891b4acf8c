import BLE
import DBus
import Testing
@testable import BlueZ

@Suite struct BlueZNamesTests {
    @Test(arguments: [
        ("dev_AA_BB_CC_DD_EE_FF", "AA:BB:CC:DD:EE:FF"),
        ("dev_01_23_45_67_89_ab", "01:23:45:67:89:AB"),
    ])
    func parsesDevicePathElements(element: String, description: String) throws {
        let address = try #require(BlueZ.address(pathElement: element[...]))
        #expect(address.description == description)
        #expect(BlueZ.pathElement(address) == "dev_" + description.replacing(":", with: "_"))
    }

    @Test(arguments: [
        "", "dev_", "AA_BB_CC_DD_EE_FF", "dev_AA:BB:CC:DD:EE:FF", "dev_AA-BB-CC-DD-EE-FF",
        "dev_AA_BB_CC_DD_EE", "dev_AA_BB_CC_DD_EE_FF_00", "Dev_AA_BB_CC_DD_EE_FF",
        "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF", "dev_AA_BB_CC_DD_EE_FF/service000a", "hci0",
    ])
    func rejectsOtherPathElements(element: String) {
        #expect(BlueZ.address(pathElement: element[...]) == nil)
    }

    @Test func flagsBecomeCoreBluetoothProperties() {
        let p = BlueZ.properties(flags: ["read", "write-without-response", "notify", "encrypt-read", "reliable-write"])
        #expect(p == [.read, .writeWithoutResponse, .notify, .reliableWrite])
        #expect(BlueZ.properties(flags: []).isEmpty)
    }

    @Test func handlesComeFromPaths() {
        let path = ObjectPath("/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF/service0010/char0012")!
        #expect(BlueZ.handle(path, prefix: "char") == 0x12)
        #expect(BlueZ.handle(path, prefix: "service") == nil)
    }
}
