import BLE
import Testing

private func uuid(_ string: String) -> BluetoothUUID { BluetoothUUID(string)! }

/// A heart-rate strap as seen while scanning.
private let strap = AdvertisementData(
    localName: "Polar H10",
    serviceUUIDs: [uuid("180D"), uuid("180F")],
    manufacturerData: [0x006B: [0x01, 0x02, 0x03, 0x04]],
    serviceData: [uuid("180F"): [0x64]])

struct MatchCase: Sendable, CustomTestStringConvertible {
    var label: String
    var options: ScanOptions
    var name: String? = "Polar H10"
    var rssi: Int? = -60
    var advertisement = strap
    var expected: Bool
    var testDescription: String { label }
}

private func manufacturer(_ prefix: [UInt8], mask: [UInt8]? = nil, company: UInt16 = 0x006B) -> ScanOptions {
    ScanOptions(manufacturerData: [ManufacturerDataFilter(companyIdentifier: company, dataPrefix: prefix, mask: mask)])
}

private func serviceData(_ prefix: [UInt8], mask: [UInt8]? = nil, service: String = "180F") -> ScanOptions {
    ScanOptions(serviceData: [ServiceDataFilter(service: uuid(service), dataPrefix: prefix, mask: mask)])
}

private let combined = ScanOptions(
    services: [uuid("180D")], namePrefix: "Polar",
    manufacturerData: [ManufacturerDataFilter(companyIdentifier: 0x006B, dataPrefix: [0x01])],
    serviceData: [ServiceDataFilter(service: uuid("180F"), dataPrefix: [0x64])], rssi: -70)

private func with(_ options: ScanOptions, _ change: (inout ScanOptions) -> Void) -> ScanOptions {
    var copy = options
    change(&copy)
    return copy
}

@Suite struct ScanFilterTests {
    @Test(arguments: [
        MatchCase(label: "no criteria", options: ScanOptions(), expected: true),
        MatchCase(label: "no criteria, nothing known", options: ScanOptions(), name: nil, rssi: nil,
                  advertisement: AdvertisementData(), expected: true),
        // services: any one of them
        MatchCase(label: "advertised service", options: ScanOptions(services: [uuid("180D")]), expected: true),
        MatchCase(label: "128-bit spelling", options: ScanOptions(services: [uuid("0000180d-0000-1000-8000-00805f9b34fb")]), expected: true),
        MatchCase(label: "service not advertised", options: ScanOptions(services: [uuid("1809")]), expected: false),
        MatchCase(label: "one of several", options: ScanOptions(services: [uuid("1809"), uuid("180F")]), expected: true),
        MatchCase(label: "service data key is not an advertised service",
                  options: ScanOptions(services: [uuid("1809")]),
                  advertisement: AdvertisementData(serviceData: [uuid("1809"): [1]]), expected: false),
        // name
        MatchCase(label: "exact name", options: ScanOptions(name: "Polar H10"), expected: true),
        MatchCase(label: "name is not a prefix match", options: ScanOptions(name: "Polar"), expected: false),
        MatchCase(label: "name is case-sensitive", options: ScanOptions(name: "polar h10"), expected: false),
        MatchCase(label: "name from local name only", options: ScanOptions(name: "Polar H10"), name: nil, expected: true),
        MatchCase(label: "name from device name only", options: ScanOptions(name: "Polar H10"),
                  advertisement: AdvertisementData(), expected: true),
        MatchCase(label: "name unknown", options: ScanOptions(name: "Polar H10"), name: nil,
                  advertisement: AdvertisementData(), expected: false),
        MatchCase(label: "name prefix", options: ScanOptions(namePrefix: "Polar"), expected: true),
        MatchCase(label: "whole name as prefix", options: ScanOptions(namePrefix: "Polar H10"), expected: true),
        MatchCase(label: "name suffix is no prefix", options: ScanOptions(namePrefix: "H10"), expected: false),
        MatchCase(label: "name prefix unknown name", options: ScanOptions(namePrefix: "Polar"), name: nil,
                  advertisement: AdvertisementData(), expected: false),
        // rssi floor
        MatchCase(label: "rssi equal to floor", options: ScanOptions(rssi: -60), expected: true),
        MatchCase(label: "rssi above floor", options: ScanOptions(rssi: -100), expected: true),
        MatchCase(label: "rssi below floor", options: ScanOptions(rssi: -59), expected: false),
        MatchCase(label: "rssi unknown", options: ScanOptions(rssi: -100), rssi: nil, expected: false),
        // manufacturer data
        MatchCase(label: "company present", options: manufacturer([]), expected: true),
        MatchCase(label: "company absent", options: manufacturer([], company: 0x004C), expected: false),
        MatchCase(label: "data prefix", options: manufacturer([0x01, 0x02]), expected: true),
        MatchCase(label: "whole data as prefix", options: manufacturer([0x01, 0x02, 0x03, 0x04]), expected: true),
        MatchCase(label: "data prefix differs", options: manufacturer([0x01, 0x03]), expected: false),
        MatchCase(label: "prefix longer than data", options: manufacturer([0x01, 0x02, 0x03, 0x04, 0x05]), expected: false),
        MatchCase(label: "mask ignores a byte", options: manufacturer([0x01, 0xEE], mask: [0xFF, 0x00]), expected: true),
        MatchCase(label: "mask low nibble equal", options: manufacturer([0x11], mask: [0x0F]), expected: true),
        MatchCase(label: "mask high nibble differs", options: manufacturer([0x11], mask: [0xF0]), expected: false),
        MatchCase(label: "mask of wrong length matches nothing", options: manufacturer([0x01], mask: [0xFF, 0xFF]), expected: false),
        MatchCase(label: "every manufacturer filter must hold",
                  options: ScanOptions(manufacturerData: [ManufacturerDataFilter(companyIdentifier: 0x006B),
                                                          ManufacturerDataFilter(companyIdentifier: 0x004C)]),
                  expected: false),
        // service data
        MatchCase(label: "service data prefix", options: serviceData([0x64]), expected: true),
        MatchCase(label: "service data differs", options: serviceData([0x63]), expected: false),
        MatchCase(label: "service data masked", options: serviceData([0x6F], mask: [0xF0]), expected: true),
        MatchCase(label: "no data for service", options: serviceData([], service: "180D"), expected: false),
        MatchCase(label: "service data 128-bit key",
                  options: serviceData([0x64], service: "0000180f-0000-1000-8000-00805f9b34fb"), expected: true),
        // everything at once
        MatchCase(label: "combination holds", options: combined, expected: true),
        MatchCase(label: "combination, rssi fails", options: with(combined) { $0.rssi = -50 }, expected: false),
        MatchCase(label: "combination, name fails", options: with(combined) { $0.namePrefix = "Garmin" }, expected: false),
        MatchCase(label: "combination, service fails", options: with(combined) { $0.services = [uuid("1816")] }, expected: false),
        MatchCase(label: "combination, manufacturer fails",
                  options: with(combined) { $0.manufacturerData[0].dataPrefix = [0x02] }, expected: false),
        MatchCase(label: "combination, service data fails",
                  options: with(combined) { $0.serviceData[0].dataPrefix = [0x00] }, expected: false),
    ])
    func matches(_ test: MatchCase) {
        #expect(test.options.matches(name: test.name, rssi: test.rssi, advertisement: test.advertisement) == test.expected)
    }

    @Test(arguments: [
        ScanOptions(),
        combined,
        ScanOptions(name: "x", namePrefix: String(repeating: "é", count: 124)),
        ScanOptions(rssi: -127, timeout: 3600),
        ScanOptions(rssi: 20, timeout: 0.001),
        manufacturer([0x01, 0x02], mask: [0xFF, 0x0F]),
        serviceData([], mask: []),
        manufacturer(Array(repeating: 0x01, count: 31), mask: Array(repeating: 0xFF, count: 31)),
    ])
    func acceptsValidOptions(options: ScanOptions) {
        #expect(throws: Never.self) { try options.validate() }
    }

    @Test(arguments: [
        (ScanOptions(name: ""), "name must not be empty"),
        (ScanOptions(namePrefix: ""), "namePrefix must not be empty"),
        (ScanOptions(name: String(repeating: "a", count: 249)), "name is 249 UTF-8 bytes; at most 248"),
        (ScanOptions(namePrefix: String(repeating: "é", count: 125)), "namePrefix is 250 UTF-8 bytes; at most 248"),
        (ScanOptions(timeout: 0), "timeout 0.0 is out of range"),
        (ScanOptions(timeout: -1), "timeout -1.0 is out of range"),
        (ScanOptions(timeout: 3600.5), "timeout 3600.5 is out of range"),
        (ScanOptions(timeout: .nan), "timeout nan is out of range"),
        (ScanOptions(rssi: -128), "rssi -128 is out of range; it must be within -127...20 dBm"),
        (ScanOptions(rssi: 21), "rssi 21 is out of range"),
        (manufacturer([0x01, 0x02], mask: [0xFF]),
         "manufacturerData[0] (company 0x006B): mask has 1 bytes but dataPrefix has 2"),
        (manufacturer([0x01], mask: [0xFF, 0xFF]), "mask has 2 bytes but dataPrefix has 1"),
        (serviceData([0x01], mask: []),
         "serviceData[0] (service 0000180f-0000-1000-8000-00805f9b34fb): mask has 0 bytes but dataPrefix has 1"),
        (manufacturer(Array(repeating: 0x01, count: 32)), "dataPrefix has 32 bytes; at most 31"),
        (serviceData(Array(repeating: 0x01, count: 32), mask: Array(repeating: 0xFF, count: 32)), "dataPrefix has 32 bytes; at most 31"),
    ])
    func rejectsInvalidOptions(options: ScanOptions, message: String) throws {
        let error = try #require(#expect(throws: BLEError.self) { try options.validate() })
        #expect(error.code == .cb(.invalidParameters))
        #expect(error.message.contains(message), "\(error.message)")
    }
}
