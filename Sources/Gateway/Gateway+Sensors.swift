import BLE
import FoundationEssentials
import HTTPServer
import Sensors

/// `GET /v1/sensors` and `GET /v1/sensors/{id}`: the devices whose advertisements a decoder knows,
/// with their latest reading: the listed devices (`GET /v1/devices`), so a sensor is listed
/// while the scan that found it lasts, and those the watch follows (`/v1/watch`); `stale` as
/// their devices are.
extension Gateway {
    func addSensorRoutes(to router: Router) {
        router.add("GET", "/v1/sensors", handle { _ in
            let now = Date()
            let listed = await self.central.peripherals()
            let ids = Set(listed.map(\.id))
            let watched = await self.central.watched().filter { !ids.contains($0.id) }
            let sensors = (listed + watched).compactMap { info in
                self.sensors.hear(info).map { SensorBody(info, $0, now: now) }
            }
            return SensorList(sensors: sensors.sorted { $0.id < $1.id })
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

    /// `GET`, `PUT` and `DELETE /v1/watch`.
    func addWatchRoutes(to router: Router) {
        router.add("GET", "/v1/watch", handle { _ in WatchStatusBody(await self.central.watchStatus()) })
        router.add("PUT", "/v1/watch", handle { request in
            let body = try JSON.decode(WatchRequest.self, from: request.body)
            let status = WatchStatusBody(try await self.central.startWatch(try body.options()))
            self.restoration.watching(body)
            return status
        })
        router.add("DELETE", "/v1/watch", handle { _ in
            let status = WatchStatusBody(try await self.central.stopWatch())
            self.restoration.watching(nil)
            return status
        })
    }

    /// Decodes encrypted advertisements with `keys` from now on (`--sensor-keys FILE` read again on
    /// SIGHUP); each device's reading follows when it is next heard or listed.
    public func replaceSensorKeys(_ keys: SensorKeys) { sensors.replaceKeys(keys) }

    /// How many bind keys are in force.
    public var sensorKeyCount: Int { sensors.keyCount }

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

/// `PUT /v1/watch`: every field optional.
struct WatchRequest: Codable, Equatable, Sendable, StrictDecodable {
    var devices: [String]?
    var services: [String]?
    var namePrefix: String?
    var rssi: Int?

    enum CodingKeys: String, CodingKey, CaseIterable { case devices, services, namePrefix, rssi }

    func options() throws(BLEError) -> WatchOptions {
        var options = WatchOptions(namePrefix: namePrefix, rssi: rssi)
        for (i, text) in (devices ?? []).enumerated() {
            options.devices.append(try Parse.address(text, field: "devices[\(i)]"))
        }
        for (i, text) in (services ?? []).enumerated() {
            options.services.append(try Parse.uuid(text, field: "services[\(i)]"))
        }
        return options
    }

    init(devices: [String]? = nil, services: [String]? = nil, namePrefix: String? = nil, rssi: Int? = nil) {
        self.devices = devices
        self.services = services
        self.namePrefix = namePrefix
        self.rssi = rssi
    }

    /// The options as `GET /v1/watch` shows them.
    init(_ o: WatchOptions) {
        self.init(devices: o.devices.isEmpty ? nil : o.devices.map(\.description),
                  services: o.services.isEmpty ? nil : o.services.map(\.uuidString), namePrefix: o.namePrefix, rssi: o.rssi)
    }
}

struct WatchStatusBody: Encodable {
    var watching: Bool
    var filters: WatchRequest?
    var since: Date?
    var discovering: Bool
    var devices: Int

    init(_ s: WatchStatus) {
        watching = s.watching
        filters = s.options.map(WatchRequest.init)
        since = s.since
        discovering = s.discovering
        devices = s.devices
    }
}
