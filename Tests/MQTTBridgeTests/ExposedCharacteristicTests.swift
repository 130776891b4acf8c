import BLE
import Testing
@testable import GatewayCore
import GatewayTesting
@testable import MQTTBridge

@Suite struct ExposedCharacteristicTests {
    static let heartRate = #"{"device": "F0:00:00:00:00:01", "service": "180d", "characteristic": "2a37", "name": "Heart rate", "decode": "uint8", "offset": 1, "unit": "bpm", "stateClass": "measurement", "notify": true}"#
    static let battery = #"{"device": "f0-00-00-00-00-01", "service": "0x180F", "characteristic": "00002a19-0000-1000-8000-00805f9b34fb", "name": " Battery ", "decode": "uint8", "unit": "%", "deviceClass": "battery", "poll": 300}"#

    @Test func aFileListsCharacteristicsWithTheirDecodingAndMode() throws {
        let exposed = try ExposedCharacteristic.parse("[\(Self.heartRate), \(Self.battery)]", source: "x.json")
        #expect(exposed.count == 2)
        #expect(exposed[0].mode == .notify && exposed[0].decoding.offset == 1 && exposed[0].unit == "bpm")
        #expect(exposed[1].mode == .poll(every: .seconds(300)) && exposed[1].name == "Battery" && exposed[1].deviceClass == "battery")
        #expect(exposed[1].device == BluetoothAddress("F0:00:00:00:00:01") && exposed[1].characteristic == BluetoothUUID(uint16: 0x2A19))
        #expect(exposed.map(\.uniqueID) == ["ble_f00000000001_180d_2a37", "ble_f00000000001_180f_2a19"])
        #expect(try ExposedCharacteristic.parse("[]", source: "x").isEmpty)
    }

    /// (what the entry adds, the bridge's expire_after, the entity's)
    @Test(arguments: [
        ("", 600, nil), (#", "expireAfter": 120"#, 600, 120), (#", "expireAfter": 120"#, nil, 120),  // notified: its own only
        (#", "expireAfter": 0"#, 600, nil),
    ] as [(String, Int?, Int?)])
    func aNotifiedValueExpiresOnlyWhenItsEntrySays(_ extra: String, _ global: Int?, _ expected: Int?) throws {
        let exposed = try ExposedCharacteristic.parse("[\(Self.heartRate.dropLast())\(extra)}]", source: "x")[0]
        #expect(exposed.expiry(default: global) == expected)
        let topics = try BridgeTopics(prefix: "gattway", gatewayID: "up")
        #expect(HomeAssistantDiscovery.config(exposed, deviceName: nil, topics: topics, expireAfter: global).config.expire_after == expected)
    }

    @Test(arguments: [
        (#""poll": 300"#, 600, 900), (#""poll": 300"#, 1200, 1200), (#""poll": 1"#, 600, 600), (#""poll": 300"#, nil, nil),
        (#""poll": 300, "expireAfter": 400"#, 600, 400), (#""poll": 300, "expireAfter": 0"#, 600, nil),
    ] as [(String, Int?, Int?)])
    func aPolledValueExpiresAfterTheBridgesTimeButAtLeastThreePolls(_ poll: String, _ global: Int?, _ expected: Int?) throws {
        let entry = Self.battery.replacingOccurrences(of: #""poll": 300"#, with: poll)
        let exposed = try ExposedCharacteristic.parse("[\(entry)]", source: "x")[0]
        #expect(exposed.expiry(default: global) == expected)
    }

    @Test func aBitFieldIsTakenFromTheFile() throws {
        let flags = Self.heartRate.replacingOccurrences(of: "\"offset\": 1", with: "\"mask\": 6, \"shift\": 1")
        let exposed = try ExposedCharacteristic.parse("[\(flags)]", source: "x")[0]
        #expect(exposed.decoding.measurement([0x16, 0x48], unit: nil)?.value == .integer(3))
    }

    /// (the file, what its error must say)
    static let refused: [(String, String)] = [
        ("", "x.json: it is not valid JSON"),
        ("{}", "x.json: it must be a JSON array"),
        ("[1]", "x.json: [0] must be a JSON object"),
        (#"[{"device": "F0:00:00:00:00:01"}]"#, "is required"),
        ("[\(heartRate.dropLast()), \"colour\": 1}]", #"unknown field "[0].colour""#),
        ("[\(heartRate), \(heartRate.replacingOccurrences(of: "\"offset\": 1", with: "\"offset\": \"1\""))]", #"field "[1].offset" must be of type Int"#),
        ("[\(heartRate.replacingOccurrences(of: "F0:00:00:00:00:01", with: "F0:00"))]", #"x.json: [0]: device "F0:00" is not an address"#),
        ("[\(heartRate.replacingOccurrences(of: "180d", with: "heart"))]", #"service "heart" is not a Bluetooth UUID"#),
        ("[\(heartRate.replacingOccurrences(of: "\"uint8\"", with: "\"int9\""))]", #"decode "int9" is none of uint8, sint8"#),
        ("[\(heartRate.replacingOccurrences(of: "\"offset\": 1", with: "\"offset\": 600"))]", "offset must be from 0 to 511"),
        ("[\(heartRate.replacingOccurrences(of: "\"offset\": 1", with: "\"scale\": 0"))]", "scale must be a non-zero decimal"),
        ("[\(heartRate.replacingOccurrences(of: "\"Heart rate\"", with: "\"  \""))]", "name must be 1-128 characters"),
        ("[\(heartRate.replacingOccurrences(of: "\"notify\": true", with: "\"poll\": 0.5"))]", "poll must be seconds from 1 to 86400"),
        ("[\(heartRate.replacingOccurrences(of: "\"notify\": true", with: "\"notify\": true, \"poll\": 5"))]", "notify and poll exclude each other"),
        ("[\(heartRate.replacingOccurrences(of: "\"notify\": true", with: "\"notify\": false"))]", "\"notify\": true (the device notifies it) or \"poll\": SECONDS"),
        ("[\(heartRate.replacingOccurrences(of: "\"stateClass\": \"measurement\"", with: "\"deviceClass\": \"heartbeat\""))]",
         #"deviceClass "heartbeat" is not one of Home Assistant's sensor device classes"#),
        ("[\(heartRate.replacingOccurrences(of: "\"measurement\"", with: "\"average\""))]", #"stateClass "average" is none of measurement, total, total_increasing"#),
        ("[\(heartRate.replacingOccurrences(of: "\"uint8\"", with: "\"utf8\"").replacingOccurrences(of: "\"offset\": 1, ", with: ""))]",
         "a utf8 value has no stateClass"),
        ("[\(heartRate.replacingOccurrences(of: "\"bpm\"", with: "\"\""))]", "unit must be 1-32 characters"),
        ("[\(heartRate.replacingOccurrences(of: "\"offset\": 1", with: "\"mask\": 256"))]", "x.json: [0]: mask must be from 1 to 255 (the bits of uint8), not 256"),
        ("[\(heartRate.replacingOccurrences(of: "\"offset\": 1", with: "\"expireAfter\": -1"))]", "x.json: [0]: expireAfter must be seconds from 0 (none) to 604800, not -1"),
        ("[\(battery.replacingOccurrences(of: "\"poll\": 300", with: "\"poll\": 300, \"expireAfter\": 300"))]",
         "x.json: [0]: expireAfter 300 is not longer than the poll of 300.0 seconds"),
        ("[\(heartRate.replacingOccurrences(of: "\"offset\": 1", with: "\"shift\": 8"))]", "x.json: [0]: shift must be from 0 to 7 (the bits of uint8), not 8"),
        ("[\(heartRate), \(battery), \(heartRate.replacingOccurrences(of: "Heart rate", with: "Pulse"))]",
         "x.json: [2]: the same characteristic as [0]; each may be exposed once"),
        ("[" + Array(repeating: heartRate, count: 257).joined(separator: ",") + "]", "257 entries; at most 256"),
    ]

    @Test(arguments: refused.indices)
    func aBadFileIsRefusedWithWhereAndWhy(_ i: Int) {
        let (text, fragment) = Self.refused[i]
        #expect {
            try ExposedCharacteristic.parse(text, source: "x.json")
        } throws: { error in
            let description = (error as? ExposedCharacteristic.Invalid)?.description ?? ""
            return description.contains(fragment) && description.hasPrefix("x.json: ")
        }
    }

    @Test func itsEntityIsOnTheDevicesHomeAssistantDeviceViaTheGateway() throws {
        let exposed = try ExposedCharacteristic.parse("[\(Self.battery)]", source: "x")[0]
        let topics = try BridgeTopics(prefix: "gattway", gatewayID: "up")
        let (topic, config) = HomeAssistantDiscovery.config(exposed, deviceName: "Sim Heart Rate", topics: topics)
        #expect(topic == "homeassistant/sensor/ble_f00000000001_180f_2a19/config")
        #expect(config.unique_id == "ble_f00000000001_180f_2a19")
        #expect(config.state_topic == "gattway/up/values/F0:00:00:00:00:01/180f/2a19")
        #expect(config.value_template == "{{ value_json.measurement.value }}")
        #expect(config.device_class == "battery" && config.unit_of_measurement == "%" && config.state_class == nil)
        #expect(config.availability?.map(\.topic) == ["gattway/up/availability"])
        // The same HA device as the address's decoded sensor, if it has one.
        #expect(config.device.identifiers == [HomeAssistantDiscovery.deviceIdentifier(exposed.device)])
        #expect(config.device.via_device == "gattway_up" && config.device.name == "Sim Heart Rate")
        let unnamed = HomeAssistantDiscovery.config(exposed, deviceName: nil, topics: topics).config
        #expect(unnamed.device.name == "BLE F0:00:00:00:00:01")
    }

    @Test func a128BitCharacteristicIsNamedInFull() throws {
        let text = #"[{"device": "F0:00:00:00:00:02", "service": "6e400001-b5a3-f393-e0a9-e50e24dcca9e", "characteristic": "6e400003-b5a3-f393-e0a9-e50e24dcca9e", "name": "UART", "decode": "utf8", "notify": true}]"#
        let exposed = try ExposedCharacteristic.parse(text, source: "x")[0]
        #expect(exposed.uniqueID == "ble_f00000000002_6e400001b5a3f393e0a9e50e24dcca9e_6e400003b5a3f393e0a9e50e24dcca9e")
        let topics = try BridgeTopics(prefix: "gattway", gatewayID: "up")
        #expect(topics.value(exposed) == "gattway/up/values/F0:00:00:00:00:02/6e400001-b5a3-f393-e0a9-e50e24dcca9e/6e400003-b5a3-f393-e0a9-e50e24dcca9e")
    }

    @Test func backoffDoublesFromOneSecondToThirty() {
        #expect((1...8).map { CharacteristicExposer.backoff($0) } == [1, 2, 4, 8, 16, 30, 30, 30].map { .seconds($0) })
    }
}
