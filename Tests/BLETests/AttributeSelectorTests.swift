import BLE
import Testing

@Suite struct AttributeSelectorTests {
    @Test(arguments: [
        ("0x0027", AttributeSelector.handle(0x0027)),
        ("0X00fF", .handle(0x00FF)),
        ("2a19", .uuid(BluetoothUUID(uint16: 0x2A19))),
        ("0x2a19", .handle(0x2A19)),
        ("0000180d-0000-1000-8000-00805f9b34fb", .uuid(BluetoothUUID(uint16: 0x180D))),
        // Found by Tests/fuzz/names: a sign after "0x" was read as part of the handle.
        ("0x+027", nil),
        ("0x-000", nil),
        ("0x27", nil),
        ("0x00270", nil),
    ] as [(String, AttributeSelector?)])
    func readsHandlesAndUUIDs(text: String, selector: AttributeSelector?) {
        #expect(AttributeSelector(text) == selector)
    }
}
