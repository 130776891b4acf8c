import BLE
import ESPHomeAPI
import Testing
@testable import ESPHomeProxy

/// A GATT table as the API sends it: pages, then done; UUIDs short or split as the client reads them.
@Suite struct ServicePagesTests {
    static func characteristic(_ c: Int, in service: UInt16) -> GATTCharacteristic {
        let handle = service + UInt16(c * 3)
        let cccd = GATTDescriptor(handle: handle + 2, uuid: BluetoothUUID(uint16: 0x2902))
        return GATTCharacteristic(handle: handle, uuid: BluetoothUUID(uint16: UInt16(0x2A00 + c)), serviceHandle: service,
                                  properties: [.read, .notify, .reliableWrite], flags: [], isNotifying: false, descriptors: [cccd])
    }

    static func service(_ n: Int) -> GATTService {
        let handle = UInt16(0x10 + n * 0x10)
        let digits = n < 16 ? "0" + String(n, radix: 16) : String(n, radix: 16)
        let uuid = BluetoothUUID("6e4000" + digits + "-b5a3-f393-e0a9-e50e24dcca9e")!
        return GATTService(handle: handle, uuid: uuid, isPrimary: true, characteristics: (1...4).map { characteristic($0, in: handle) })
    }

    @Test func pagesOfAboutAKilobyteThenDone() {
        let messages = ServicePages.messages(address: 0xF000_0000_0001, services: (0..<12).map(Self.service), shortUUIDs: true)
        let pages = messages.compactMap { $0 as? BluetoothGATTGetServicesResponse }
        #expect(pages.count > 1, "twelve services do not fit one page")
        let handles: [UInt32] = pages.flatMap(\.services).map(\.handle)
        let expected: [UInt32] = (0..<12).map { UInt32(0x10 + $0 * 0x10) }
        #expect(handles == expected, "all, in order")
        for page in pages {
            #expect(page.address == 0xF000_0000_0001)
            #expect(page.services.count == 1 || page.serialized().count <= 1100)
        }
        #expect(messages.last is BluetoothGATTGetServicesDoneResponse)
        #expect(messages.count == pages.count + 1)
    }

    @Test func anEmptyTableIsDoneAlone() {
        let messages = ServicePages.messages(address: 1, services: [], shortUUIDs: false)
        #expect(messages.count == 1 && messages[0] is BluetoothGATTGetServicesDoneResponse)
    }

    @Test func uuidsPropertiesAndHandles() {
        let short = ServicePages.service(Self.service(0), shortUUIDs: true)
        #expect(short.shortUUID == 0 && short.uuid == [0x6E40_0000_B5A3_F393, 0xE0A9_E50E_24DC_CA9E], "a 128-bit UUID stays split")
        let c = short.characteristics[0]
        #expect(c.shortUUID == 0x2A01 && c.uuid.isEmpty)
        #expect(c.properties == 0x12, "read | notify, the declaration's byte; reliable write is an extended property")
        #expect(c.descriptors.map(\.shortUUID) == [0x2902] && c.descriptors[0].handle == UInt32(c.handle) + 2)
        let long = ServicePages.service(Self.service(0), shortUUIDs: false)
        #expect(long.characteristics[0].shortUUID == 0)
        #expect(long.characteristics[0].uuid == [0x0000_2A01_0000_1000, 0x8000_0080_5F9B_34FB], "clients before API 1.12 read 128 bits")
    }
}
