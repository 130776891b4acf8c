import BLE
import FoundationEssentials
import Sensors

extension Gateway {
    /// A device as answers to clients show it: with its reading, when it advertises one.
    package func deviceBody(_ info: PeripheralInfo) -> DeviceBody {
        DeviceBody(info, sensor: sensors.hear(info)?.reading)
    }
}


/// One decoded device: who, how fresh, and what it said.
package struct SensorBody: Encodable {
    package var id: String
    package var name: String?
    package var rssi: Int?
    /// When the reading was last heard (the device's advertisement, unchanged since, included).
    package var updated: Date
    /// Seconds since `updated`, when the answer was made.
    package var age: Double
    /// Present (true) when the device has not been heard for `--stale-after`, as in its device entry.
    package var stale: Bool?
    package var reading: SensorReading
    /// The gateway that heard it (`--gateway-id`), for a door whose clients hear several.
    package var gateway: String?

    package init(_ info: PeripheralInfo, _ current: SensorBoard.Current, now: Date) {
        id = info.id.description
        name = info.name
        rssi = info.rssi
        updated = current.heard
        age = max(0, (now.timeIntervalSince(current.heard) * 1000).rounded() / 1000)
        stale = info.stale ? true : nil
        reading = current.reading
    }
}


extension Parse {
    /// A boolean query parameter: absent, `true` or `false`.
    package static func flag(_ text: String?, field: String) throws(BLEError) -> Bool? {
        switch text {
        case nil: return nil
        case "true": return true
        case "false": return false
        case let other?: throw BLEError(.invalidParameters, "\(field): \"\(other)\" is neither true nor false")
        }
    }
}

/// A client's watch: every field optional.
package struct WatchRequest: Codable, Equatable, Sendable, StrictDecodable {
    package var devices: [String]?
    package var services: [String]?
    package var namePrefix: String?
    package var rssi: Int?
    /// false: scan passively where the kernel's path allows it (else actively; the status says which).
    package var active: Bool?

    package enum CodingKeys: String, CodingKey, CaseIterable { case devices, services, namePrefix, rssi, active }

    package func options() throws(BLEError) -> WatchOptions {
        var options = WatchOptions(namePrefix: namePrefix, rssi: rssi, active: active ?? true)
        for (i, text) in (devices ?? []).enumerated() {
            options.devices.append(try Parse.address(text, field: "devices[\(i)]"))
        }
        for (i, text) in (services ?? []).enumerated() {
            options.services.append(try Parse.uuid(text, field: "services[\(i)]"))
        }
        return options
    }

    package init(devices: [String]? = nil, services: [String]? = nil, namePrefix: String? = nil, rssi: Int? = nil, active: Bool? = nil) {
        self.devices = devices
        self.services = services
        self.namePrefix = namePrefix
        self.rssi = rssi
        self.active = active
    }

    /// The options as clients are shown them (`active` only when false).
    package init(_ o: WatchOptions) {
        self.init(devices: o.devices.isEmpty ? nil : o.devices.map(\.description),
                  services: o.services.isEmpty ? nil : o.services.map(\.uuidString), namePrefix: o.namePrefix, rssi: o.rssi,
                  active: o.active ? nil : false)
    }
}

