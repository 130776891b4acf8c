import BLE
import DBus
import FoundationEssentials
import Testing
@testable import Simulator

struct ConfigurationTests {
    @Test func theBuiltInSetIsValidAndRoundTrips() throws {
        try SimulatorConfiguration.builtIn.validate()
        #expect(SimulatorConfiguration.builtIn.devices.map(\.address.description) == [
            "F0:00:00:00:00:01", "F0:00:00:00:00:02", "F0:00:00:00:00:03", "F0:00:00:00:00:04", "F0:00:00:00:00:05",
            "F0:00:00:00:00:06", "F0:00:00:00:00:07", "F0:00:00:00:00:08", "F0:00:00:00:00:09", "F0:00:00:00:00:0A",
            "F0:00:00:00:00:0B", "F0:00:00:00:00:0C", "F0:00:00:00:00:0D", "F0:00:00:00:00:0E", "F0:00:00:00:00:0F",
            "F0:00:00:00:00:10", "F0:00:00:00:00:11",
        ])
        let json = try JSONEncoder().encode(SimulatorConfiguration.builtIn)
        #expect(try SimulatorConfiguration.decode(json) == .builtIn)
    }

    @Test func aMinimalFileGetsDefaults() throws {
        let configuration = try SimulatorConfiguration.decode(Data("""
            { "devices": [ { "address": "aa:bb:cc:dd:ee:ff", "services": [ { "uuid": "181A",
              "characteristics": [ { "uuid": "2A6E", "text": "hi" } ] } ] } ] }
            """.utf8))
        let device = try #require(configuration.devices.first)
        #expect(device.address.description == "AA:BB:CC:DD:EE:FF")
        #expect(device.connectable && device.mtu == 247 && device.rssi == -60)
        #expect(device.services[0].characteristics[0].flags == ["read"])
        #expect(device.services[0].characteristics[0].value.bytes == Array("hi".utf8))
        #expect(configuration.adapter.name == "gattway-sim")
    }

    @Test("mistakes are reported with their place in the document", arguments: [
        (#"{"devices": [{"address": "F0:00:00:00:00:01", "connectible": false}]}"#, "devices[0].connectible: unknown key"),
        (#"{"devices": [{"name": "x"}]}"#, "devices[0].address: required key is missing"),
        (#"{"devices": [{"address": "F0:00"}]}"#, "devices[0].address: invalid Bluetooth address"),
        (#"{"devices": [{"address": "F0:00:00:00:00:01", "rssi": 50}]}"#, "devices[0].rssi: 50 is out of range -127...20"),
        (#"{"devices": [{"address": "F0:00:00:00:00:01", "services": [{"uuid": "180D", "characteristics": [{"uuid": "2A37", "flags": ["notfiy"]}]}]}]}"#,
         "devices[0].services[0].characteristics[0].flags: unknown flag \"notfiy\""),
        (#"{"devices": [{"address": "F0:00:00:00:00:01", "manufacturerData": {"apple": "00"}}]}"#, "company id \"apple\""),
        (#"{"devices": [{"address": "F0:00:00:00:00:01", "services": [{"uuid": "180D", "characteristics": [{"uuid": "2A37", "value": "0g"}]}]}]}"#,
         "devices[0].services[0].characteristics[0].value: invalid hex value"),
        (#"{"devices": [{"address": "F0:00:00:00:00:01"}, {"address": "f0:00:00:00:00:01"}]}"#, "devices[1].address: F0:00:00:00:00:01 appears twice"),
        (#"{"devices": [{"address": "F0:00:00:00:00:01", "services": [{"uuid": "180D", "generator": "x"}]}]}"#, "devices[0].services[0].generator: unknown key"),
        (#"{"devices": [}"#, "not valid JSON"),
        (#"{"adapter": {"powered": "yes"}}"#, "adapter.powered: expected true or false"),
        (#"{"adapter": {}, "adapters": [{}]}"#, "adapter: give \"adapter\" or \"adapters\", not both"),
        (#"{"adapters": []}"#, "adapters: give at least one adapter"),
        (#"{"adapters": [{}, {"id": "hci0"}]}"#, "adapters[1].id: hci0 appears twice"),
        (#"{"adapters": [{"id": "usb0"}]}"#, "adapters[0].id: \"usb0\" is not an adapter name like hci0"),
        (#"{"adapters": [{}, {"address": "00:1A:7D:DA:71:13"}]}"#, "adapters[1].address: 00:1A:7D:DA:71:13 appears twice"),
        (#"{"adapter": {"maxConnections": 0}}"#, "adapter.maxConnections: 0 is out of range 1...64"),
        (#"{"adapters": [{}, {}], "devices": [{"address": "00:1A:7D:DA:71:14"}]}"#,
         "devices[0].address: 00:1A:7D:DA:71:14 is an adapter's own address"),
        (#"{"devices": [{"address": "F0:00:00:00:00:01", "rssi": {"hci1": -50}}]}"#, "devices[0].rssi: no adapter hci1 (adapters: hci0)"),
        (#"{"devices": [{"address": "F0:00:00:00:00:01", "rssi": {"hci0": -150}}]}"#, "devices[0].rssi: an RSSI is -127...20"),
        (#"{"devices": [{"address": "F0:00:00:00:00:01", "pairing": {"io": "Keyboard"}}]}"#, "devices[0].pairing.io"),
        (#"{"devices": [{"address": "F0:00:00:00:00:01", "pairing": {"passkey": 1000000}}]}"#,
         "devices[0].pairing.passkey: 1000000 is out of range 0...999999"),
        (#"{"devices": [{"address": "F0:00:00:00:00:01", "uart": {"rx": "ffe1", "tx": "ffe1"}}]}"#,
         "devices[0].uart.rx: the device has no characteristic 0000ffe1-0000-1000-8000-00805f9b34fb"),
        (#"{"devices": [{"address": "F0:00:00:00:00:01", "uart": {"rx": "ffe1", "tx": "ffe1", "streamBytesPerSecond": -1}}]}"#,
         "devices[0].uart.streamBytesPerSecond: -1 is out of range 0...10000000"),
    ])
    func errors(json: String, expected: String) {
        do {
            _ = try SimulatorConfiguration.decode(Data(json.utf8))
            Issue.record("accepted: \(json)")
        } catch {
            #expect(error.message.contains(expected), "\(error.message)")
        }
    }

    @Test("\"adapters\" lists several, numbered and addressed by position; a device's RSSI by adapter decides who hears it")
    func severalAdapters() throws {
        let configuration = try SimulatorConfiguration.decode(Data("""
            { "adapters": [ { "maxConnections": 3 }, { "powered": false } ],
              "devices": [ { "address": "F0:00:00:00:00:01", "rssi": { "hci1": -80 } }, { "address": "F0:00:00:00:00:02" } ] }
            """.utf8))
        #expect(configuration.adapters.map(\.id) == ["hci0", "hci1"])
        #expect(configuration.adapters.map(\.address.description) == ["00:1A:7D:DA:71:13", "00:1A:7D:DA:71:14"])
        #expect(configuration.adapters.map(\.maxConnections) == [3, 7])
        #expect(configuration.adapters.map(\.powered) == [true, false])
        #expect(configuration.devices[0].rssi(at: "hci0") == nil && configuration.devices[0].rssi(at: "hci1") == -80)
        #expect(configuration.devices[1].rssi(at: "hci0") == -60 && configuration.devices[1].rssi(at: "hci1") == -60)
        let json = try JSONEncoder().encode(configuration)
        #expect(try SimulatorConfiguration.decode(json) == configuration)

        let three = SimulatorConfiguration.builtIn.withAdapters(3)
        try three.validate()
        #expect(three.adapters.map(\.id) == ["hci0", "hci1", "hci2"])
        #expect(three.adapters[2].address.description == "00:1A:7D:DA:71:15")
        #expect(three.devices == SimulatorConfiguration.builtIn.devices)
        #expect(SimulatorConfiguration.builtIn.adapters.count == 1)
    }

    @Test func handlesFollowAGATTServerLayout() throws {
        let device = SimulatorConfiguration.builtIn.devices[0]
        let table = AttributeTable(device.services)
        // 1801 (2A05 + CCCD, 2B29, 2B2A, 2B3A), 180D (2A37 + CCCD, 2A38, 2A39), 180F (2A19 + CCCD), 180A (4).
        #expect(table.services.map(\.handle) == [0x0A, 0x14, 0x1C, 0x20])
        #expect(table.characteristics.map(\.handle) == [0x0B, 0x0E, 0x10, 0x12, 0x15, 0x18, 0x1A, 0x1D, 0x21, 0x23, 0x25, 0x27])
        #expect(table.descriptors.map(\.handle) == [0x0D, 0x17, 0x1F])
        #expect(table.characteristics[0].valueHandle == 0x0C)
    }

    @Test("a server adds the extended properties descriptor and the CCCD; Flags show ATT properties")
    func automaticDescriptors() throws {
        let configuration = try SimulatorConfiguration.decode(Data("""
            { "devices": [ { "address": "AA:BB:CC:DD:EE:FF", "services": [ { "uuid": "1234", "handle": 32,
              "characteristics": [ { "uuid": "5678", "flags": ["encrypt-read", "indicate", "reliable-write"],
                                     "descriptors": [ { "uuid": "2901", "text": "x" } ] } ] } ] } ] }
            """.utf8))
        let table = AttributeTable(configuration.devices[0].services)
        #expect(table.services[0].handle == 0x20)
        #expect(table.characteristics[0].flags == ["read", "indicate", "extended-properties", "reliable-write"])
        #expect(table.characteristics[0].read.security == .encrypted)
        #expect(table.characteristics[0].write.allowed)
        #expect(table.descriptors.map(\.uuid) == [BluetoothUUID("2900")!, BluetoothUUID("2902")!, BluetoothUUID("2901")!])
        #expect(table.descriptors.map(\.handle) == [0x23, 0x24, 0x25])
        #expect(table.characteristics[0].subscriptionValue == [2, 0])
    }

    @Test func loadNamesTheFile() {
        #expect(throws: ConfigurationError.self) { try SimulatorConfiguration.load(path: "/nonexistent/sim.json") }
    }
}
