import BLE
import FoundationEssentials
import HTTPServer
import Sensors

/// `GET /v1/sensors` and `GET /v1/sensors/{id}`: the devices whose advertisements a decoder knows,
/// with their latest reading. They are the listed devices (`GET /v1/devices`), so a sensor is
/// listed while the scan that found it lasts, and `stale` as its device is.
extension Gateway {
    func addSensorRoutes(to router: Router) {
        router.add("GET", "/v1/sensors", handle { _ in
            let now = Date()
            let listed = await self.central.peripherals().compactMap { info in
                self.sensors.hear(info).map { SensorBody(info, $0, now: now) }
            }
            return SensorList(sensors: listed)
        })
        router.add("GET", "/v1/sensors/{id}", handle { request in
            let id = try Parse.address(request.pathParameters["id"] ?? "")
            let info = try await self.central.peripheral(id)
            guard let current = self.sensors.hear(info) else {
                throw BLEError(.unknownDevice, "\(id) advertises nothing gattway decodes (BTHome, ATC1441/PVVX, MiBeacon, Ruuvi, iBeacon, Eddystone)")
            }
            return SensorBody(info, current, now: Date())
        })
    }

    /// A device as REST answers show it: with its reading, when it advertises one.
    func deviceBody(_ info: PeripheralInfo) -> DeviceBody {
        DeviceBody(info, sensor: sensors.hear(info)?.reading)
    }
}

/// One decoded device: who, how fresh, and what it said.
struct SensorBody: Encodable {
    var id: String
    var name: String?
    var rssi: Int?
    /// When the reading was last heard (the device's advertisement, unchanged since, included).
    var updated: Date
    /// Seconds since `updated`, when the answer was made.
    var age: Double
    /// Present (true) when the device has not been heard for `--stale-after`, as in its device entry.
    var stale: Bool?
    var reading: SensorReading
    /// The gateway that heard it (`--gateway-id`), in what the MQTT bridge publishes.
    var gateway: String?

    init(_ info: PeripheralInfo, _ current: SensorBoard.Current, now: Date) {
        id = info.id.description
        name = info.name
        rssi = info.rssi
        updated = current.heard
        age = max(0, (now.timeIntervalSince(current.heard) * 1000).rounded() / 1000)
        stale = info.stale ? true : nil
        reading = current.reading
    }
}

struct SensorList: Encodable { var sensors: [SensorBody] }

extension Parse {
    /// A boolean query parameter: absent, `true` or `false`.
    static func flag(_ text: String?, field: String) throws(BLEError) -> Bool? {
        switch text {
        case nil: return nil
        case "true": return true
        case "false": return false
        case let other?: throw BLEError(.invalidParameters, "\(field): \"\(other)\" is neither true nor false")
        }
    }
}
