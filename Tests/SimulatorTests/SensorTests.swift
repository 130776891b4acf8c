import BLE
import DBus
import FoundationEssentials
import Sensors
import Testing
@testable import Simulator

/// The simulator's sensor payloads, checked by the gateway's decoders: what one side encodes the
/// other must read back as the same values.
@Suite struct SensorEncodingTests {
    typealias Sensor = SimulatorConfiguration.Sensor

    static let address = BluetoothAddress("F0:00:00:00:00:42")!
    static let climate = Climate(centidegrees: 2156, humidity: 4789, pressure: 101_325, battery: 87,
                                 acceleration: [-12, 25, 1003], counter: 0x0001_2345)

    static let bthome: [String: SensorValue] = [
        "temperature": number(2156, 100), "humidity": number(4789, 100), "pressure": number(101_325, 100),
        "battery": .integer(87), "voltage": number(2896, 1000),
    ]

    /// What each format must decode to from `climate`: the values at the format's resolution.
    static let expectations: [(Sensor, [String: SensorValue], packetId: Int?)] = [
        (Sensor(format: .bthome), bthome, 0x45),
        (Sensor(format: .bthome, bindKey: Sensor.demoBindKey), bthome, 0x45),
        (Sensor(format: .atc1441), [
            "temperature": number(215, 10), "humidity": .integer(47), "battery": .integer(87), "voltage": .integer(2896),
        ], 0x45),
        (Sensor(format: .pvvx), [
            "temperature": number(2156, 100), "humidity": number(4789, 100), "battery": .integer(87), "voltage": .integer(2896),
            "reed_switch": .boolean(false), "trigger_output": .boolean(false), "trigger_controlled": .boolean(false),
            "temperature_trigger": .boolean(false), "humidity_trigger": .boolean(false),
        ], 0x45),
        (Sensor(format: .mibeacon), [
            "temperature": number(215, 10), "humidity": number(478, 10), "battery": .integer(87),
        ], 0x45),
        (Sensor(format: .mibeacon, bindKey: Sensor.demoBindKey), ["temperature": number(215, 10), "humidity": number(478, 10)], 0x45),
        // 21.56 °C in 8.8 fixed point is 5519/256; no measurement yet: up 0 s, the first advertisement.
        (Sensor(format: .eddystoneTLM), [
            "voltage": .integer(2896), "temperature": number(5519, 256), "advertisement_count": .integer(1), "uptime": .number(0),
        ], nil),
        (Sensor(format: .ruuviRAWv2), [
            "temperature": number(2156, 100), "humidity": number(4789, 100), "pressure": .integer(101_325),
            "acceleration_x": number(-12, 1000), "acceleration_y": number(25, 1000), "acceleration_z": number(1003, 1000),
            "voltage": number(2896, 1000), "tx_power": .integer(4), "movement_counter": .integer(0),
        ], 0x12345 % 0xFFFF),
    ]

    static func number(_ raw: Int, _ per: Int) -> SensorValue { .number(Double(raw) / Double(per)) }

    /// The reading the gateway would make of `state`'s current advertisement, knowing its bind key.
    static func decode(_ state: SensorState, keys: SensorKeys? = nil) -> SensorReading? {
        let keys = keys ?? SensorKeys(state.configuration.bindKey.map { [state.address: $0.bytes] } ?? [:])
        let advertisement = switch state.slot {
        case .serviceData(let uuid): AdvertisementData(serviceData: [uuid: state.payload])
        case .manufacturerData(let company): AdvertisementData(manufacturerData: [company: state.payload])
        }
        return Sensors.decode(advertisement, address: state.address, keys: keys)
    }

    @Test(arguments: expectations)
    func theDecoderReadsWhatWasEncoded(sensor: Sensor, values: [String: SensorValue], packetId: Int?) throws {
        let reading = try #require(Self.decode(SensorState(sensor, address: Self.address, climate: Self.climate)))
        #expect(reading.format.rawValue == sensor.format.rawValue)
        #expect(reading.encryption == (sensor.bindKey == nil ? .none : .decrypted))
        #expect(reading.packetId == packetId)
        #expect(reading.unparsed.isEmpty)
        #expect(Dictionary(uniqueKeysWithValues: reading.measurements.map { ($0.key, $0.value.value) }) == values)
    }

    @Test(arguments: [Sensor.Format.bthome, .mibeacon])
    func anEncryptedPayloadNeedsTheKey(format: Sensor.Format) throws {
        let state = SensorState(Sensor(format: format, bindKey: Sensor.demoBindKey), address: Self.address, climate: Self.climate)
        #expect(Self.decode(state, keys: SensorKeys())?.encryption == .missingKey)
        let other = SensorKeys([Self.address: Array(repeating: 0x11, count: 16)])
        #expect(Self.decode(state, keys: other)?.encryption == .failed)
    }

    /// The example of bthome.io/encryption, sealed by the simulator: byte for byte the page's service data.
    @Test func bthomeEncryptionMatchesTheSpecificationsExample() {
        let sealed = SensorEncoder.bthomeSealed(
            hex("02CA09 03BF13"), address: BluetoothAddress("54:48:E6:8F:80:A5")!,
            key: hex("231d39c1d7cc1ab1aee224cd096db932"), counter: 0x0011_2233)
        #expect(sealed == hex("41 e445f3c9962b 33221100 6c7c4519"))
    }

    @Test("over several measurements the values drift within plausible bounds and the counter goes up by one",
          arguments: expectations.map(\.0))
    func measurementsChange(sensor: Sensor) throws {
        // Through the wrap of the 8-bit counters and of Ruuvi's, which skips 0xFFFF.
        var state = SensorState(sensor, address: Self.address, climate: .random(counter: 0xFFF0))
        var guardian = ReplayGuard()
        var previous = try #require(Self.decode(state))
        for _ in 0..<40 {
            let climate = state.climate
            state.measure()
            #expect(state.climate.counter == climate.counter &+ 1)
            #expect(Climate.temperatureRange.contains(state.climate.centidegrees))
            #expect(Climate.humidityRange.contains(state.climate.humidity))
            #expect(Climate.pressureRange.contains(state.climate.pressure))
            #expect(Climate.batteryRange.contains(state.climate.battery))
            let decoded = try #require(Self.decode(state))
            let reading = guardian.admit(decoded, from: Self.address)
            #expect(reading.encryption == previous.encryption)
            #expect(reading.measurements["temperature"] != previous.measurements["temperature"])
            if sensor.format == .eddystoneTLM {
                // No packet id: the uptime tells one frame from the next.
                let uptime = try #require(reading.measurements["uptime"]?.value)
                #expect(uptime == .number(Double(state.climate.measurements) * Double(sensor.intervalMs) / 1000))
                #expect(reading.measurements["advertisement_count"] != previous.measurements["advertisement_count"])
            } else {
                let modulus = sensor.format == .ruuviRAWv2 ? 0xFFFF : 0x100
                #expect(reading.packetId == (try #require(previous.packetId) + 1) % modulus)
            }
            previous = reading
        }
    }

    @Test func everyBuiltInSensorDecodes() throws {
        let devices = SimulatorConfiguration.builtIn.devices.filter { $0.sensor != nil }
        #expect(Set(devices.map { $0.sensor!.format }) == Set(Sensor.Format.allCases))
        let keys = SensorKeys(Dictionary(uniqueKeysWithValues: devices.compactMap { d in d.sensor!.bindKey.map { (d.address, $0.bytes) } }))
        #expect(keys.count == 2)
        for device in devices {
            let state = Peripheral(config: device, adapters: [SimulatorConfiguration.Adapter()])
            let sensor = try #require(state.sensor)
            let reading = try #require(Self.decode(sensor, keys: keys), "\(device.address)")
            #expect(reading.format.rawValue == device.sensor!.format.rawValue)
            #expect(reading.encryption == (device.sensor!.bindKey == nil ? .none : .decrypted))
            #expect(reading.measurements["temperature"] != nil)
        }
    }
}

@Suite struct SensorConfigurationTests {
    @Test func aSensorDecodesWithDefaults() throws {
        let configuration = try SimulatorConfiguration.decode(Data("""
            { "devices": [ { "address": "F0:00:00:00:00:42", "sensor": { "format": "ruuvi-rawv2" } },
                           { "address": "F0:00:00:00:00:43",
                             "sensor": { "format": "bthome", "intervalMs": 500, "bindKey": "00112233445566778899aabbccddeeff" } } ] }
            """.utf8))
        #expect(configuration.devices[0].sensor == SimulatorConfiguration.Sensor(format: .ruuviRAWv2, intervalMs: 2000))
        #expect(configuration.devices[1].sensor?.intervalMs == 500)
        #expect(configuration.devices[1].sensor?.bindKey?.bytes.count == 16)
    }

    @Test("sensor mistakes are refused with their place", arguments: [
        (#"{"format": "bthome", "interval": 100}"#, "devices[0].sensor.interval: unknown key"),
        (#"{"format": "bthome2"}"#, #"devices[0].sensor.format: unknown format "bthome2" (known: bthome, atc1441"#),
        (#"{"intervalMs": 100}"#, "devices[0].sensor.format: required key is missing"),
        (#"{"format": "pvvx", "intervalMs": 10}"#, "devices[0].sensor.intervalMs: 10 is out of range 100...3600000"),
        (#"{"format": "atc1441", "bindKey": "00112233445566778899aabbccddeeff"}"#, "devices[0].sensor.bindKey: only bthome and mibeacon"),
        (#"{"format": "bthome", "bindKey": "0011"}"#, "devices[0].sensor.bindKey: an AES-128 key is 16 bytes"),
    ])
    func errors(sensor: String, expected: String) {
        let json = #"{"devices": [{"address": "F0:00:00:00:00:42", "sensor": "# + sensor + "}]}"
        expectRefusal(json, expected)
    }

    @Test("advertisement data the sensor's payload would replace is refused", arguments: [
        (#""serviceData": {"181A": "00"}, "sensor": {"format": "pvvx"}"#, "devices[0].serviceData: 0000181a-"),
        (#""manufacturerData": {"0x0499": "05"}, "sensor": {"format": "ruuvi-rawv2"}"#, "devices[0].manufacturerData: 0x0499 is the sensor's"),
    ])
    func conflicts(keys: String, expected: String) {
        expectRefusal(#"{"devices": [{"address": "F0:00:00:00:00:42", "# + keys + "}]}", expected)
    }

    private func expectRefusal(_ json: String, _ expected: String, sourceLocation: SourceLocation = #_sourceLocation) {
        do {
            _ = try SimulatorConfiguration.decode(Data(json.utf8))
            Issue.record("accepted: \(json)", sourceLocation: sourceLocation)
        } catch {
            #expect(error.message.contains(expected), "\(error.message)", sourceLocation: sourceLocation)
        }
    }
}

@Suite(.serialized) struct SensorAdvertisingTests {
    /// A discovering client sees each new measurement as a PropertiesChanged of ServiceData (with
    /// the latest payload), and between measurements the repeated advertisements change nothing.
    @Test func newMeasurementsArePropertiesChangedWhileDiscovering() async throws {
        let address = "F0:00:00:00:00:42"
        let sim = try await Sim.start(SimulatorConfiguration(devices: [
            .init(address: BluetoothAddress(address)!, name: "T", rssiJitter: 0, connectable: false, advertisingIntervalMs: 100,
                  sensor: .init(format: .bthome, intervalMs: 300)),
        ]))
        defer { sim.close() }
        let path = Sim.devicePath(address)
        try await sim.call(Sim.adapter, Interface.adapter, "StartDiscovery")
        let added = try await sim.signal { $0.adds(path) }
        for _ in 0..<3 {
            _ = try await sim.signal(after: sim.mark) { $0.changes(path, Interface.device, "ServiceData") }
        }
        // Every change recorded so far, in order: a loaded machine may have sent two between the
        // waits above. Each is a later measurement, never the same one again; on a loaded machine
        // a measurement can also come and go between two advertisements (a clean-clone run saw
        // a packet id skipped), as a real sensor's would.
        let changes = sim.signals(after: 0) { $0.changes(path, Interface.device, "ServiceData") }
        let payloads = [Connection.interfaces(added.body[1])[Interface.device]?["ServiceData"]]
            + changes.map { $0.body[1].stringDictionary?["ServiceData"]?.unwrapped }
        let readings = try payloads.map { value -> SensorReading in
            let entry = try #require(value?.dictionaryEntries?.first)
            #expect(entry.key == .string("0000fcd2-0000-1000-8000-00805f9b34fb"))
            let bytes = try #require(entry.value.bytes)
            let data = AdvertisementData(serviceData: [BluetoothUUID(uint16: 0xFCD2): bytes])
            return try #require(Sensors.decode(data, address: BluetoothAddress(address)!))
        }
        for (earlier, later) in zip(readings, readings.dropFirst()) {
            let step = (Int(try #require(later.packetId)) - Int(try #require(earlier.packetId)) + 256) % 256
            #expect((1...8).contains(step), "packet id \(String(describing: earlier.packetId)) then \(String(describing: later.packetId))")
        }
        // A measurement every 0.3 s, advertised ten times a second: only the changes are signalled,
        // each a new packet (checked above), so no more signals than measurements.
        #expect(changes.count >= 3)
    }
}

private func hex(_ text: String) -> [UInt8] {
    try! ValueFormat.hex.decode(text)
}
