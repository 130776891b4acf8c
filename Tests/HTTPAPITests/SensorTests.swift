import BLE
import Foundation
@testable import HTTPServer
import Sensors
import Synchronization
import Testing
@testable import GatewayCore
import GatewayTesting
@testable import HTTPAPI

@Suite struct SensorRouteTests {
    let central = FakeCentral()

    /// bthome.io/format's opening example, "40 02C409 03BF13": 25.00 °C and 50.55 %, two seconds old.
    @Test func sensorsListDecodedDevicesWithTheirAge() async throws {
        let heard = Date(timeIntervalSinceNow: -2)
        central.list([bthome(thermometer, "40 02C409 03BF13", lastSeen: heard)])
        let router = Gateway(central: central, version: "test").router()
        let reply = try await call(router, "GET", "/v1/sensors")
        #expect(reply.status == 200)
        // The fake's own device advertises no format the decoders know: not a sensor.
        let sensors = try #require(reply.json["sensors"] as? [[String: Any]])
        #expect(sensors.map { $0["id"] as? String } == ["A4:C1:38:00:00:01"])
        let sensor = try #require(sensors.first)
        #expect(sensor["rssi"] as? Int == -60)
        #expect(sensor["updated"] as? String == Timestamp.iso8601(heard))
        let age = try #require(sensor["age"] as? Double)
        #expect(age >= 2 && age < 10)
        #expect(sensor["stale"] == nil)
        let reading = try #require(sensor["reading"] as? [String: Any])
        #expect(reading["format"] as? String == "bthome")
        #expect(reading["encryption"] as? String == "none")
        let measurements = try #require(reading["measurements"] as? [String: [String: Any]])
        #expect(measurements["temperature"]?["value"] as? Int == 25)
        #expect(measurements["temperature"]?["unit"] as? String == "°C")
        #expect(measurements["humidity"]?["value"] as? Double == 50.55)

        let one = try await call(router, "GET", "/v1/sensors/a4-c1-38-00-00-01")
        #expect(one.status == 200)
        #expect(one.json["id"] as? String == "A4:C1:38:00:00:01")
        let device = try await call(router, "GET", "/v1/devices/A4:C1:38:00:00:01")
        #expect((device.json["sensor"] as? [String: Any])?["format"] as? String == "bthome")
        let list = try await call(router, "GET", "/v1/devices")
        let listed = try #require(list.json["devices"] as? [[String: Any]])
        #expect(listed.map { $0["sensor"] != nil } == [false, true])
    }

    @Test("a device that is unknown, or advertises nothing decodable, is 404 unknownDevice", arguments: [
        "F0:00:00:00:00:01", "F0:00:00:00:00:09",
    ])
    func noSensorIs404(_ id: String) async throws {
        let reply = try await call(Gateway(central: central, version: "test").router(), "GET", "/v1/sensors/\(id)")
        #expect(reply.status == 404)
        #expect(reply.error?["name"] as? String == "unknownDevice")
    }

    /// The encryption page's example decodes with its key only; without, its format is known but not its values.
    @Test(arguments: [true, false])
    func anEncryptedDeviceDecodesWithItsKeyOnly(_ withKey: Bool) async throws {
        central.list([bthome(encrypted, "41 e445f3c9962b 33221100 6c7c4519")])
        let router = Gateway(central: central, version: "test", sensorKeys: withKey ? exampleKey : SensorKeys()).router()
        let reply = try await call(router, "GET", "/v1/sensors/54:48:E6:8F:80:A5")
        let reading = try #require(reply.json["reading"] as? [String: Any])
        #expect(reading["encrypted"] as? Bool == true)
        #expect(reading["encryption"] as? String == (withKey ? "decrypted" : "missing-key"))
        let measurements = try #require(reading["measurements"] as? [String: [String: Any]])
        #expect(measurements["temperature"]?["value"] as? Double == (withKey ? 25.06 : nil))
        #expect(measurements.isEmpty != withKey)
    }

    @Test func everyPacketIsAFlag() async throws {
        let router = Gateway(central: central, version: "test").router()
        let reply = try await call(router, "GET", "/v1/events?types=sensor&everyPacket=yes")
        #expect(reply.status == 400)
        #expect(reply.error?["message"] as? String == "everyPacket: \"yes\" is neither true nor false")
        let unknown = try await call(router, "GET", "/v1/events?types=sensors")
        #expect(unknown.error?["message"] as? String == "unknown event type \"sensors\"; types are state, advertisement, connection, notification, sensor, hold, pairing, servicesChanged, adapter, "
                + "centralConnected, centralDisconnected, subscribed, unsubscribed, peripheralRead, peripheralWrite, indicationConfirmed")
    }
}

@Suite struct SensorEventTests {
    /// `sensor` events reach streams when a value changed, or for every packet when asked;
    /// `advertisementChanged` is no client `advertisement` event.
    @Test func sensorEventsFollowTheSelection() async throws {
        let central = FakeCentral()
        let gateway = Gateway(central: central, version: "test")
        func client(_ selection: Selection) -> StreamBody {
            let body = StreamBody(capacityBytes: 1 << 20)
            let client = StreamClient(id: gateway.hub.newClientID(), transport: .stream(SSETransport(body: body)))
            client.select(selection, as: "")
            gateway.hub.add(client)
            return body
        }
        let changes = client(try Gateway.selection(types: "sensor,advertisement", device: nil, characteristic: nil, format: nil, everyPacket: nil))
        let packets = client(try Gateway.selection(types: "sensor", device: nil, characteristic: nil, format: nil, everyPacket: true))
        await gateway.hub.offered()
        let start = Date()
        central.handler(.advertisement(bthome(thermometer, "40 0001 02C409", lastSeen: start)))
        central.handler(.advertisementChanged(bthome(thermometer, "40 0002 02C409", lastSeen: start + 1)))
        central.handler(.advertisementChanged(bthome(thermometer, "40 0003 02CA09", lastSeen: start + 2, rssi: -70)))
        await gateway.hub.offered()

        let seen = try sse(changes)
        #expect(seen.map { $0["type"] as? String } == ["advertisement", "sensor", "sensor"])
        #expect(seen.compactMap { ($0["sensor"] as? [String: Any])?["packetId"] as? Int } == [1, 3])
        #expect(seen.last?["rssi"] as? Int == -70)
        #expect(seen.last?["device"] as? String == "A4:C1:38:00:00:01")
        let every = try sse(packets)
        #expect(every.compactMap { $0["changed"] as? Bool } == [true, false, true])
    }

    private func sse(_ body: StreamBody) throws -> [[String: Any]] {
        var text = ""
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 16, alignment: 1)
        defer { buffer.deallocate() }
        while case .bytes(let count) = body.read(into: buffer) {
            text += String(decoding: UnsafeRawBufferPointer(rebasing: buffer[..<count]), as: UTF8.self)
        }
        return try text.split(separator: "\n").filter { $0.hasPrefix("data: ") }.map {
            try #require(JSONSerialization.jsonObject(with: Data($0.dropFirst(6).utf8)) as? [String: Any])
        }
    }
}
