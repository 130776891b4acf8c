import BLE
import Foundation
import Sensors
import struct Sensors.Measurement
import Synchronization
import Testing
@testable import GatewayCore
import GatewayTesting
@testable import MQTTBridge

/// A broker that records what the bridge publishes.
final class RecordingBroker: MessageBroker {
    struct Published: Sendable {
        var topic: String
        var payload: [UInt8]
        var qos: Int
        var retain: Bool
        var correlationData: [UInt8]?
        var text: String { String(decoding: payload, as: UTF8.self) }
        var json: [String: Any] { (try? JSONSerialization.jsonObject(with: Data(payload))) as? [String: Any] ?? [:] }
    }
    let published = Mutex<[Published]>([])
    let subscriptions = Mutex<[String]>([])

    func publish(_ topic: String, _ payload: [UInt8], qos: Int, retain: Bool, responseTopic: String?, correlationData: [UInt8]?) {
        published.withLock { $0.append(Published(topic: topic, payload: payload, qos: qos, retain: retain, correlationData: correlationData)) }
    }
    func subscribe(_ filter: String, qos: Int) { subscriptions.withLock { $0.append(filter) } }

    func on(_ topic: String) -> [Published] { published.withLock { $0.filter { $0.topic == topic } } }
}

@Suite struct BridgeTopicsTests {
    @Test func topicsAreUnderPrefixAndGatewayID() throws {
        let topics = try BridgeTopics(prefix: "home/ble", gatewayID: "upstairs")
        let device = BluetoothAddress("F0:00:00:00:00:06")!
        #expect(topics.availability == "home/ble/upstairs/availability")
        #expect(topics.command == "home/ble/upstairs/command")
        #expect(topics.commandReply == "home/ble/upstairs/command/reply")
        #expect(topics.sensor(device) == "home/ble/upstairs/sensors/F0:00:00:00:00:06")
        #expect(topics.device(device) == "home/ble/upstairs/devices/F0:00:00:00:00:06")
        #expect(topics.event(.connection) == "home/ble/upstairs/events/connection")
        #expect(topics.notification(device, handle: 0x15) == "home/ble/upstairs/notifications/F0:00:00:00:00:06/0x0015")
    }

    @Test(arguments: [("gattway", "a/b"), ("gattway", "a+"), ("gattway", ""), ("gattway", String(repeating: "x", count: 65)),
                      ("", "gw"), ("/gattway", "gw"), ("gattway/", "gw"), ("a//b", "gw"), ("ga#", "gw"), ("g+", "gw")])
    func refusesWildcardsAndEmptyLevels(_ prefix: String, _ id: String) {
        #expect(throws: BridgeTopics.Invalid.self) { try BridgeTopics(prefix: prefix, gatewayID: id) }
    }

    @Test func hostNamesBecomeGatewayIDs() {
        #expect(BridgeTopics.gatewayID(fromHostName: "pi-kitchen.local") == "pi-kitchen.local")
        #expect(BridgeTopics.gatewayID(fromHostName: "my host#1") == "my-host-1")
        #expect(BridgeTopics.gatewayID(fromHostName: "") == "gattway")
    }

    @Test func replyTopicsMayNotHoldWildcards() {
        #expect(BridgeTopics.isPublishable("replies/me"))
        #expect(!BridgeTopics.isPublishable("replies/+"))
        #expect(!BridgeTopics.isPublishable("replies/#"))
        #expect(!BridgeTopics.isPublishable(""))
    }
}

@Suite struct HomeAssistantDiscoveryTests {
    typealias Kind = HomeAssistantDiscovery.Kind

    static let table: [(String, Measurement, Kind)] = [
        ("temperature", Measurement(.number(21.5), unit: "°C"), Kind(component: .sensor, deviceClass: "temperature", stateClass: "measurement")),
        ("temperature_2", Measurement(.number(21.5), unit: "°C"), Kind(component: .sensor, deviceClass: "temperature", stateClass: "measurement")),
        ("dewpoint", Measurement(.number(9), unit: "°C"), Kind(component: .sensor, deviceClass: "temperature", stateClass: "measurement")),
        ("humidity", Measurement(.number(50), unit: "%"), Kind(component: .sensor, deviceClass: "humidity", stateClass: "measurement")),
        ("pressure", Measurement(.integer(101_325), unit: "Pa"), Kind(component: .sensor, deviceClass: "pressure", stateClass: "measurement")),
        ("battery", Measurement(.integer(87), unit: "%"), Kind(component: .sensor, deviceClass: "battery", stateClass: "measurement")),
        ("voltage", Measurement(.integer(2980), unit: "mV"), Kind(component: .sensor, deviceClass: "voltage", stateClass: "measurement")),
        ("co2", Measurement(.integer(600), unit: "ppm"), Kind(component: .sensor, deviceClass: "carbon_dioxide", stateClass: "measurement")),
        ("pm2_5", Measurement(.integer(12), unit: "µg/m³"), Kind(component: .sensor, deviceClass: "pm25", stateClass: "measurement")),
        ("energy", Measurement(.number(1.5), unit: "kWh"), Kind(component: .sensor, deviceClass: "energy", stateClass: "total_increasing")),
        ("tx_power", Measurement(.integer(4), unit: "dBm"),
         Kind(component: .sensor, deviceClass: "signal_strength", stateClass: "measurement", diagnostic: true)),
        // A unit Home Assistant does not know for the class: the class is left out, not a broken entity.
        ("temperature", Measurement(.number(1), unit: "°X"), Kind(component: .sensor, deviceClass: nil, stateClass: "measurement")),
        ("acceleration_x", Measurement(.number(0.01), unit: "G"), Kind(component: .sensor, stateClass: "measurement")),
        ("movement_counter", Measurement(.integer(3)), Kind(component: .sensor, stateClass: "total_increasing")),
        ("major", Measurement(.integer(1)), Kind(component: .sensor, diagnostic: true)),
        ("url", Measurement(.text("https://example.com")), Kind(component: .sensor, diagnostic: true)),
        ("button", Measurement(.text("press")), Kind(component: .sensor)),
        ("door", Measurement(.boolean(true)), Kind(component: .binarySensor, deviceClass: "door")),
        ("moisture_wet", Measurement(.boolean(false)), Kind(component: .binarySensor, deviceClass: "moisture")),
        ("generic_boolean", Measurement(.boolean(false)), Kind(component: .binarySensor)),
        ("reed_switch", Measurement(.boolean(false)), Kind(component: .binarySensor)),
    ]

    @Test func measurementsGetTheirHomeAssistantClass() {
        for (name, measurement, expected) in Self.table {
            #expect(HomeAssistantDiscovery.kind(of: name, measurement) == expected, "\(name)")
        }
    }

    @Test func twoGatewaysAnnounceTheSameEntitiesWithTheirOwnTopics() throws {
        let device = BluetoothAddress("F0:00:00:00:00:06")!
        var measurements = Measurements()
        measurements.add("temperature", Measurement(.number(21.5), unit: "°C"))
        measurements.add("door", Measurement(.boolean(true)))
        let reading = SensorReading(format: .bthome, measurements: measurements)
        let a = HomeAssistantDiscovery.configs(device: device, name: "Kitchen", reading: reading, topics: try BridgeTopics(prefix: "gattway", gatewayID: "a"))
        let b = HomeAssistantDiscovery.configs(device: device, name: "Kitchen", reading: reading, topics: try BridgeTopics(prefix: "gattway", gatewayID: "b"))
        #expect(a.map(\.topic) == ["homeassistant/binary_sensor/ble_f00000000006_door/config",
                                   "homeassistant/sensor/ble_f00000000006_temperature/config"])
        #expect(a.map(\.topic) == b.map(\.topic))
        #expect(a.map(\.config.unique_id) == b.map(\.config.unique_id))
        let temperature = a[1].config
        #expect(temperature.state_topic == "gattway/a/sensors/F0:00:00:00:00:06")
        #expect(b[1].config.state_topic == "gattway/b/sensors/F0:00:00:00:00:06")
        #expect(temperature.value_template == "{{ value_json.reading.measurements['temperature'].value }}")
        #expect(temperature.unit_of_measurement == "°C")
        #expect(temperature.availability?.map(\.topic) == ["gattway/a/availability"])
        #expect(temperature.device.identifiers == ["ble_f00000000006"])
        #expect(temperature.device.via_device == "gattway_a")
        #expect(temperature.device.name == "Kitchen")
        let door = a[0].config
        #expect(door.value_template == "{{ 'ON' if value_json.reading.measurements['door'].value else 'OFF' }}")
        #expect(door.unit_of_measurement == nil && door.payload_on == "ON")
    }
}

@Suite struct MQTTBridgeTests {
    let central = FakeCentral()
    let broker = RecordingBroker()
    let bridge: Bridge

    init() throws {
        bridge = Bridge(gateway: Gateway(central: central, version: "test"), broker: broker,
                        topics: try BridgeTopics(prefix: "gattway", gatewayID: "gw"), log: { _ in })
        bridge.start()
        bridge.brokerConnected()
    }

    @Test func subscribesToCommandsAndPublishesState() async {
        #expect(broker.subscriptions.withLock { $0 } == ["gattway/gw/command"])
        #expect(await eventually { !broker.on("gattway/gw/state").isEmpty })
        let state = broker.on("gattway/gw/state")[0]
        #expect(state.retain && state.json["state"] as? String == "poweredOn")
        await bridge.stop()
    }

    @Test func aReconnectionPublishesOnlineThenEverythingRetained() async {
        #expect(await eventually { !broker.on("gattway/gw/state").isEmpty })
        broker.published.withLock { $0.removeAll() }
        bridge.brokerConnected()
        let published = broker.published.withLock { $0 }
        #expect(published.first?.topic == "gattway/gw/availability" && published.first?.text == "online" && published.first?.retain == true)
        #expect(published.contains { $0.topic == "homeassistant/binary_sensor/gattway_gw/config" && $0.retain })
        #expect(published.contains { $0.topic == "gattway/gw/state" && $0.retain })
        await bridge.stop()
    }

    @Test func whileTheBrokerIsDownRetainedMessagesAreKeptAndGoOutOnceAtTheConnection() async throws {
        let broker = RecordingBroker()
        let down = Bridge(gateway: Gateway(central: central, version: "test"), broker: broker,
                          topics: try BridgeTopics(prefix: "gattway", gatewayID: "gw"), log: { _ in })
        down.start()
        #expect(await eventually { down.retainedCount == 2 })  // the state and the adapter, kept
        #expect(broker.on("gattway/gw/state").isEmpty)  // not handed to a client that would queue it
        down.brokerConnected()
        #expect(broker.on("gattway/gw/state").count == 1)
        down.brokerDisconnected()
        broker.published.withLock { $0.removeAll() }
        down.brokerConnected()
        #expect(broker.on("gattway/gw/state").count == 1 && broker.published.withLock { $0 }.first?.text == "online")
        await down.stop()
    }

    @Test func aCommandIsAnsweredOnTheResponseTopicWithTheCorrelationData() async {
        bridge.received(BrokerMessage(topic: "gattway/gw/command",
                                      payload: Array(#"{"op":"read","id":"7","device":"F0:00:00:00:00:01","characteristic":"2a29"}"#.utf8),
                                      responseTopic: "replies/x", correlationData: [1, 2, 3]))
        #expect(await eventually { !broker.on("replies/x").isEmpty })
        let reply = broker.on("replies/x")[0]
        #expect(reply.correlationData == [1, 2, 3] && !reply.retain)
        // Two services have 0x2A29: the same refusal the REST route gives.
        #expect(reply.json["op"] as? String == "error" && reply.json["id"] as? String == "7")
        #expect((reply.json["error"] as? [String: Any])?["domain"] as? String == "CBErrorDomain")
        await bridge.stop()
    }

    @Test func withoutAResponseTopicTheAnswerGoesToReplyToOrTheReplyTopic() async {
        bridge.received(BrokerMessage(topic: "gattway/gw/command",
                                      payload: Array(#"{"op":"connect","id":"1","device":"F0:00:00:00:00:01","replyTo":"mine"}"#.utf8)))
        bridge.received(BrokerMessage(topic: "gattway/gw/command", payload: Array(#"{"op":"fly","id":"2"}"#.utf8)))
        bridge.received(BrokerMessage(topic: "gattway/gw/command", payload: Array(#"{"op":"read","replyTo":"a/#"}"#.utf8)))
        #expect(await eventually { !broker.on("mine").isEmpty && broker.on("gattway/gw/command/reply").count == 2 })
        #expect(broker.on("mine")[0].json["state"] as? String == "connected")
        let errors = broker.on("gattway/gw/command/reply").map { ($0.json["error"] as? [String: Any])?["message"] as? String ?? "" }
        #expect(errors.contains { $0.contains("unknown op \"fly\"") })
        #expect(errors.contains { $0.contains("replyTo must be a topic without wildcards") })
        await bridge.stop()
    }

    @Test func sensorReadingsAreRetainedWithTheGatewayAndAnnouncedOnce() async {
        let sensor = BluetoothAddress("A4:C1:38:00:00:01")!
        func heard(_ hex: String) -> PeripheralInfo {
            let bytes = stride(from: 0, to: hex.count, by: 2).map { UInt8(hex.dropFirst($0).prefix(2), radix: 16)! }
            return PeripheralInfo(id: sensor, addressType: "public", name: "Thermo", rssi: -61, lastSeen: Date(), state: .disconnected,
                                  paired: false, advertisement: AdvertisementData(serviceData: [BluetoothUUID(uint16: 0xFCD2): bytes]))
        }
        central.list([heard("4002C40903BF13")])
        _ = central.handler(.advertisement(heard("4002C40903BF13")))  // 25.00 °C, 50.55 %
        #expect(await eventually { !broker.on("gattway/gw/sensors/A4:C1:38:00:00:01").isEmpty })
        let value = broker.on("gattway/gw/sensors/A4:C1:38:00:00:01")[0]
        #expect(value.retain && value.json["gateway"] as? String == "gw" && value.json["rssi"] as? Int == -61)
        #expect(broker.on("homeassistant/sensor/ble_a4c138000001_temperature/config").count == 1)
        central.list([heard("4002C50903BF13")])  // 25.01 °C: a new value, the same measurements
        _ = central.handler(.advertisement(heard("4002C50903BF13")))
        #expect(await eventually { broker.on("gattway/gw/sensors/A4:C1:38:00:00:01").count == 2 })
        #expect(broker.on("homeassistant/sensor/ble_a4c138000001_temperature/config").count == 1)
        #expect(bridge.retainedCount >= 4)  // state, the device, its value, two entities
        await bridge.stop()
    }
}

@Suite struct MQTTBridgeForgettingTests {
    @Test func aDeviceNotHeardForForgetAfterHasItsTopicsClearedButAConnectedOneIsKept() async throws {
        let central = FakeCentral()
        let broker = RecordingBroker()
        let lines = Mutex<[String]>([])
        let bridge = Bridge(gateway: Gateway(central: central, version: "test"), broker: broker,
                            topics: try BridgeTopics(prefix: "gattway", gatewayID: "gw"), forgetAfter: .seconds(8),
                            log: { line in lines.withLock { $0.append(line) } })
        bridge.start()
        bridge.brokerConnected()
        let phone = BluetoothAddress("5A:00:00:00:00:01")!
        var heard = PeripheralInfo(id: phone, addressType: "random", name: nil, rssi: -70, lastSeen: Date(), state: .disconnected,
                                   paired: false, advertisement: AdvertisementData())
        // Connected long ago: it does not advertise.
        let watch = PeripheralInfo(id: BluetoothAddress("C0:00:00:00:00:02")!, addressType: "public", name: "Watch", rssi: nil,
                                   lastSeen: Date(timeIntervalSinceNow: -3600), state: .connected, paired: true,
                                   advertisement: AdvertisementData())
        central.list([heard, watch])
        _ = central.handler(.advertisement(heard))
        _ = central.handler(.connection(id: watch.id, state: .connected, error: nil))
        #expect(await eventually { !broker.on("gattway/gw/devices/5A:00:00:00:00:01").isEmpty
            && !broker.on("gattway/gw/devices/C0:00:00:00:00:02").isEmpty })
        #expect(bridge.followedCount == 2)
        // 8 s: a loaded machine (builds beside the tests) took over 3 s to get here, and forgot the phone first.
        heard.lastSeen = Date(timeIntervalSinceNow: -10)  // the gateway heard nothing more of it
        central.list([heard, watch])
        #expect(await eventually(within: .seconds(10)) { broker.on("gattway/gw/devices/5A:00:00:00:00:01").last?.payload == [] })
        let cleared = broker.on("gattway/gw/devices/5A:00:00:00:00:01").last!
        #expect(cleared.retain && cleared.qos == 1)
        #expect(bridge.followedCount == 1)
        #expect(broker.on("gattway/gw/devices/C0:00:00:00:00:02").allSatisfy { !$0.payload.isEmpty })
        #expect(lines.withLock { $0 }.contains { $0.contains("forgot 1 device (not heard for 8 s)") && $0.contains("5A:00:00:00:00:01") })
        // Not sent again after a reconnection either.
        broker.published.withLock { $0.removeAll() }
        bridge.brokerConnected()
        #expect(broker.on("gattway/gw/devices/5A:00:00:00:00:01").isEmpty)
        await bridge.stop()
    }
}

@Suite struct RetainedMessagesTests {
    @Test func keepsTheLatestPayloadInFirstPublishedOrderAndForgetsTheOldestPastTheLimit() {
        var retained = RetainedMessages()
        retained.limit = 2
        retained.set("a", [1])
        retained.set("b", [2])
        retained.set("a", [3])
        #expect(retained.inOrder.map(\.0) == ["a", "b"] && retained["a"] == [3])
        retained.set("c", [4])
        #expect(retained.inOrder.map(\.0) == ["b", "c"])
    }
}

@Suite struct MQTTBridgeExpiryTests {
    @Test func aSteadySensorStillHeardIsPublishedAgainBeforeItsEntityExpires() async throws {
        let central = FakeCentral()
        let broker = RecordingBroker()
        let bridge = Bridge(gateway: Gateway(central: central, version: "test"), broker: broker,
                            topics: try BridgeTopics(prefix: "gattway", gatewayID: "gw"), expireAfter: 1, log: { _ in })
        bridge.start()
        bridge.brokerConnected()
        let sensor = BluetoothAddress("A4:C1:38:00:00:01")!
        func heard() -> PeripheralInfo {
            PeripheralInfo(id: sensor, addressType: "public", name: "Thermo", rssi: -61, lastSeen: Date(), state: .disconnected, paired: false,
                           advertisement: AdvertisementData(serviceData: [BluetoothUUID(uint16: 0xFCD2): [0x40, 0x02, 0xC4, 0x09]]))
        }
        let topic = "gattway/gw/sensors/A4:C1:38:00:00:01"
        central.list([heard()])
        _ = central.handler(.advertisement(heard()))
        #expect(await eventually { !broker.on(topic).isEmpty })
        let first = ContinuousClock.now
        // The entity's config goes out right after the reading (the same turn of the bridge).
        let configTopic = "homeassistant/sensor/ble_a4c138000001_temperature/config"
        #expect(await eventually { !broker.on(configTopic).isEmpty })
        let config = broker.on(configTopic)
        #expect(config.count == 1 && config.first?.json["expire_after"] as? Int == 1, "\(config.count) configs")
        // The gateway keeps hearing the same advertisement, and tells the bridge nothing (a scan
        // that filters duplicates, or the watch): the sweep finds it heard, and sends the reading
        // again once half of expire_after has passed since it last did.
        // Heard again every 100 ms (by the clock: counted in turns of the wait, a loaded machine
        // made them so slow that the sensor looked unheard for longer than half of expire_after).
        var refreshed = ContinuousClock.now
        #expect(await eventually(within: .seconds(4)) {
            if ContinuousClock.now - refreshed >= .milliseconds(100) {
                central.list([heard()])
                refreshed = .now
            }
            return broker.on(topic).count >= 2
        })
        #expect(ContinuousClock.now - first >= .milliseconds(400))
        #expect(broker.on(topic).count == 2 && broker.on(topic).allSatisfy(\.retain))
        await bridge.stop()
    }

    /// Another device's advertisement, behind anything queued before it: once its presence is
    /// out, what came before (a reading's event, if any) has been handled too.
    static func everythingQueuedIsHandled(_ central: FakeCentral, _ broker: RecordingBroker) async -> Bool {
        let other = PeripheralInfo(id: BluetoothAddress("5A:00:00:00:00:01")!, addressType: "random", name: nil, rssi: -70, lastSeen: Date(),
                                   state: .disconnected, paired: false, advertisement: AdvertisementData())
        _ = central.handler(.advertisement(other))
        return await eventually { !broker.on("gattway/gw/devices/5A:00:00:00:00:01").isEmpty }
    }

    @Test func aReadingTheSweepFindsNewGoesOutOnceNotAlsoAsItsEvent() async throws {
        // The listing can be ahead of the sensor board (the central lists what it heard before its
        // event reached the board): the sweep's hearing makes the reading's `sensor` event, and
        // must leave its publishing to that event (it went out twice, seen in the e2e test).
        let central = FakeCentral()
        let broker = RecordingBroker()
        let sensor = BluetoothAddress("A4:C1:38:00:00:01")!
        central.list([PeripheralInfo(id: sensor, addressType: "public", name: "Thermo", rssi: -61, lastSeen: Date(), state: .disconnected,
                                     paired: false, advertisement: AdvertisementData(serviceData: [BluetoothUUID(uint16: 0xFCD2): [0x40, 0x02, 0xC4, 0x09]]))])
        let bridge = Bridge(gateway: Gateway(central: central, version: "test"), broker: broker,
                            topics: try BridgeTopics(prefix: "gattway", gatewayID: "gw"), log: { _ in })
        bridge.start()
        bridge.brokerConnected()
        let topic = "gattway/gw/sensors/A4:C1:38:00:00:01"
        #expect(await eventually { !broker.on(topic).isEmpty })
        #expect(await Self.everythingQueuedIsHandled(central, broker))
        #expect(broker.on(topic).count == 1, "\(broker.on(topic).map(\.text))")
        await bridge.stop()
    }

    @Test func aReadingTheSweepPublishedGoesOutOnceWhenItsEventComesAfter() async throws {
        // The other order: the sweep publishes a reading whose `sensor` event is still on its way
        // (the hub's fan-out is a thread of its own); the event must not send it again.
        let central = FakeCentral()
        let broker = RecordingBroker()
        let gateway = Gateway(central: central, version: "test")
        let sensor = BluetoothAddress("A4:C1:38:00:00:01")!
        let info = PeripheralInfo(id: sensor, addressType: "public", name: "Thermo", rssi: -61, lastSeen: Date(), state: .disconnected,
                                  paired: false, advertisement: AdvertisementData(serviceData: [BluetoothUUID(uint16: 0xFCD2): [0x40, 0x02, 0xC4, 0x09]]))
        central.list([info])
        // Heard before the bridge listens: that event reaches no bridge, the sweep finds the reading.
        let current = try #require(gateway.sensors.hear(info))
        let bridge = Bridge(gateway: gateway, broker: broker, topics: try BridgeTopics(prefix: "gattway", gatewayID: "gw"), log: { _ in })
        bridge.start()
        bridge.brokerConnected()
        let topic = "gattway/gw/sensors/A4:C1:38:00:00:01"
        #expect(await eventually { !broker.on(topic).isEmpty })
        gateway.hub.publish(.sensor(SensorBoard.Update(device: sensor, reading: current.reading, rssi: -61, changed: true)))
        #expect(await Self.everythingQueuedIsHandled(central, broker))
        #expect(broker.on(topic).count == 1, "\(broker.on(topic).map(\.text))")
        await bridge.stop()
    }

    @Test func withoutExpiryNoConfigSaysExpireAfter() throws {
        var measurements = Measurements()
        measurements.add("temperature", Measurement(.number(21.5), unit: "°C"))
        let reading = SensorReading(format: .bthome, measurements: measurements)
        let topics = try BridgeTopics(prefix: "gattway", gatewayID: "a")
        let device = BluetoothAddress("F0:00:00:00:00:06")!
        let none = HomeAssistantDiscovery.configs(device: device, name: nil, reading: reading, topics: topics)[0].config
        #expect(none.expire_after == nil && !String(decoding: JSON.encodeCompact(none), as: UTF8.self).contains("expire_after"))
        let some = HomeAssistantDiscovery.configs(device: device, name: nil, reading: reading, topics: topics, expireAfter: 600)[0].config
        #expect(String(decoding: JSON.encodeCompact(some), as: UTF8.self).contains(#""expire_after":600"#))
    }
}
