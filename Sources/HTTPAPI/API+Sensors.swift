import GatewayCore
import BLE
import FoundationEssentials
import HTTPServer
import Sensors

/// `GET /v1/sensors` and `GET /v1/sensors/{id}`: the devices whose advertisements a decoder knows,
/// with their latest reading: the listed devices (`GET /v1/devices`), so a sensor is listed
/// while the scan that found it lasts, and those the watch follows (`/v1/watch`); `stale` as
/// their devices are.
extension API {
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
}

struct WatchStatusBody: Encodable {
    var watching: Bool
    var filters: WatchRequest?
    var since: Date?
    var discovering: Bool
    var devices: Int
    /// "active" or "passive": how the controllers scan for the watch now.
    var mode: String?

    init(_ s: WatchStatus) {
        watching = s.watching
        filters = s.options.map(WatchRequest.init)
        since = s.since
        discovering = s.discovering
        devices = s.devices
        mode = s.mode?.rawValue
    }
}

struct SensorList: Encodable { var sensors: [SensorBody] }
