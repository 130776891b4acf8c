import GatewayCore
import BLE
import Sensors

/// Home Assistant MQTT discovery for decoded sensors: one HA device per physical sensor, one
/// entity per measurement.
///
/// The unique ids come from the BLE address and the measurement name only (`ble_f00000000006_temperature`),
/// so every gateway that hears a sensor announces the same entities on the same config topics:
/// Home Assistant updates them instead of creating twins. The entity follows the state topic and
/// availability of the gateway that announced it last; the values say which gateway heard them
/// and at what RSSI. The gateway itself is a device (`gattway_<id>`, a connectivity entity on its
/// availability topic), named as `via_device`.
enum HomeAssistantDiscovery {
    static let prefix = "homeassistant"

    /// How Home Assistant should present one measurement.
    struct Kind: Equatable {
        enum Component: String { case sensor, binarySensor = "binary_sensor" }
        var component: Component
        var deviceClass: String?
        var stateClass: String?
        var diagnostic = false
    }

    /// What a measurement is, by its name without the `_2`, `_3` of repeated measurements.
    static func kind(of name: String, _ measurement: Measurement) -> Kind {
        let base = baseName(name)
        switch measurement.value {
        case .boolean:
            return Kind(component: .binarySensor, deviceClass: binaryClasses[base] ?? nil)
        case .text:
            return Kind(component: .sensor, diagnostic: ["uuid", "namespace", "instance", "url", "firmware_version"].contains(base))
        case .integer, .number:
            if let (deviceClass, stateClass) = numericClasses[base] {
                // A class whose units Home Assistant knows only when the unit is one of them.
                let unitFits = deviceClass.map { allowedUnits[$0].map { $0.contains(measurement.unit ?? "") } ?? true } ?? true
                return Kind(component: .sensor, deviceClass: unitFits ? deviceClass : nil, stateClass: stateClass,
                            diagnostic: deviceClass == "signal_strength")
            }
            if identifiers.contains(base) { return Kind(component: .sensor, diagnostic: true) }
            return Kind(component: .sensor, stateClass: counters.contains(base) ? "total_increasing" : "measurement")
        }
    }

    static func baseName(_ name: String) -> String {
        // pm2_5 is a name of its own, not the fifth pm2.
        if numericClasses[name] != nil || binaryClasses[name] != nil { return name }
        guard let underscore = name.lastIndex(of: "_"), name[name.index(after: underscore)...].allSatisfy(\.isNumber),
              name.index(after: underscore) < name.endIndex else { return name }
        return String(name[..<underscore])
    }

    /// (device class, state class) of numeric measurements.
    static let numericClasses: [String: (String?, String)] = [
        "temperature": ("temperature", "measurement"), "dewpoint": ("temperature", "measurement"),
        "humidity": ("humidity", "measurement"), "moisture": ("moisture", "measurement"),
        "pressure": ("pressure", "measurement"), "illuminance": ("illuminance", "measurement"),
        "battery": ("battery", "measurement"), "voltage": ("voltage", "measurement"),
        "power": ("power", "measurement"), "energy": ("energy", "total_increasing"),
        "current": ("current", "measurement"), "co2": ("carbon_dioxide", "measurement"),
        "pm2_5": ("pm25", "measurement"), "pm10": ("pm10", "measurement"),
        "tvoc": ("volatile_organic_compounds", "measurement"), "mass": ("weight", "measurement"),
        "distance": ("distance", "measurement"), "duration": ("duration", "measurement"),
        "uptime": ("duration", "total_increasing"), "speed": ("speed", "measurement"),
        "volume": ("volume", "total"), "volume_storage": ("volume_storage", "measurement"),
        "volume_flow_rate": ("volume_flow_rate", "measurement"), "gas": ("gas", "total_increasing"),
        "water": ("water", "total_increasing"), "precipitation": ("precipitation", "total_increasing"),
        "conductivity": ("conductivity", "measurement"),
        "tx_power": ("signal_strength", "measurement"), "measured_power": ("signal_strength", "measurement"),
    ]

    /// Units Home Assistant accepts for a device class, where the decoders can give others.
    static let allowedUnits: [String: Set<String>] = [
        "temperature": ["°C", "°F", "K"], "pressure": ["Pa", "hPa", "kPa", "bar", "mbar", "mmHg", "inHg", "psi"],
        "voltage": ["V", "mV"], "weight": ["kg", "g", "lb", "oz"], "distance": ["mm", "cm", "m", "km"],
        "volume": ["L", "mL", "m³", "gal"], "signal_strength": ["dBm", "dB"],
    ]

    static let counters: Set<String> = ["movement_counter", "advertisement_count", "count"]

    /// Numbers that name a beacon rather than measure anything: no statistics.
    static let identifiers: Set<String> = ["major", "minor", "device_type_id", "channel", "settings_revision"]

    /// Device classes of boolean measurements (nil: a plain on/off entity).
    static let binaryClasses: [String: String?] = [
        "door": "door", "garage_door": "garage_door", "window": "window", "opening": "opening",
        "motion": "motion", "moving": "moving", "occupancy": "occupancy", "presence": "presence",
        "smoke": "smoke", "moisture_wet": "moisture", "gas_detected": "gas", "carbon_monoxide": "carbon_monoxide",
        "battery_low": "battery", "battery_charging": "battery_charging", "cold": "cold", "heat": "heat",
        "light": "light", "lock": "lock", "plug": "plug", "power_on": "power", "problem": "problem",
        "running": "running", "safety": "safety", "sound": "sound", "tamper": "tamper",
        "vibration": "vibration", "connectivity": "connectivity", "generic_boolean": nil,
    ]

    /// `ble_f00000000006`: the HA device of a sensor, the same on every gateway.
    static func deviceIdentifier(_ device: BluetoothAddress) -> String {
        "ble_" + device.description.lowercased().filter { $0 != ":" }
    }

    static func uniqueID(_ device: BluetoothAddress, measurement: String) -> String {
        deviceIdentifier(device) + "_" + measurement
    }

    static func gatewayIdentifier(_ topics: BridgeTopics) -> String { "gattway_" + topics.gatewayID }

    struct Availability: Encodable { var topic: String }

    struct Device: Encodable {
        var identifiers: [String]
        var connections: [[String]]?
        var name: String
        var model: String?
        var manufacturer: String?
        var sw_version: String?
        var via_device: String?
    }

    /// One entity's config message.
    struct Config: Encodable {
        var name: String
        var unique_id: String
        var object_id: String
        var state_topic: String
        var value_template: String
        var payload_on: String?
        var payload_off: String?
        var device_class: String?
        var unit_of_measurement: String?
        var state_class: String?
        var entity_category: String?
        /// Seconds without a message on `state_topic` after which the entity shows unavailable.
        var expire_after: Int?
        /// nil for the gateway's own entity, which is its availability.
        var availability: [Availability]?
        var payload_available = "online"
        var payload_not_available = "offline"
        var device: Device
    }

    /// The config topic and message of each measurement of a reading.
    static func configs(device: BluetoothAddress, name: String?, reading: SensorReading,
                        topics: BridgeTopics, expireAfter: Int? = nil) -> [(topic: String, config: Config)] {
        let haDevice = Device(identifiers: [deviceIdentifier(device)], connections: [["bluetooth", device.description.lowercased()]],
                              name: name ?? "\(reading.format.rawValue) \(device)", model: reading.format.rawValue,
                              via_device: gatewayIdentifier(topics))
        return reading.measurements.sorted { $0.key < $1.key }.map { measurementName, measurement in
            let kind = kind(of: measurementName, measurement)
            let unique = uniqueID(device, measurement: measurementName)
            let path = "value_json.reading.measurements['\(measurementName)'].value"
            let binary = kind.component == .binarySensor
            let config = Config(
                name: title(measurementName), unique_id: unique, object_id: unique, state_topic: topics.sensor(device),
                value_template: binary ? "{{ 'ON' if \(path) else 'OFF' }}" : "{{ \(path) }}",
                payload_on: binary ? "ON" : nil, payload_off: binary ? "OFF" : nil,
                device_class: kind.deviceClass, unit_of_measurement: binary ? nil : measurement.unit,
                state_class: kind.stateClass, entity_category: kind.diagnostic ? "diagnostic" : nil,
                expire_after: expireAfter, availability: [Availability(topic: topics.availability)], device: haDevice)
            return ("\(prefix)/\(kind.component.rawValue)/\(unique)/config", config)
        }
    }

    /// The gateway as a device of its own: a connectivity entity on its availability topic.
    static func gatewayConfig(topics: BridgeTopics, version: String) -> (topic: String, config: Config) {
        let unique = gatewayIdentifier(topics)
        let config = Config(
            name: "Broker connection", unique_id: unique, object_id: unique, state_topic: topics.availability,
            value_template: "{{ value }}", payload_on: "online", payload_off: "offline", device_class: "connectivity",
            entity_category: "diagnostic", availability: nil, payload_available: "online", payload_not_available: "offline",
            device: Device(identifiers: [unique], name: "gattway \(topics.gatewayID)", model: "gattway", manufacturer: "gattway",
                           sw_version: version))
        return ("\(prefix)/binary_sensor/\(unique)/config", config)
    }

    /// "pm2_5" → "Pm2 5", "temperature_2" → "Temperature 2".
    static func title(_ name: String) -> String {
        let spaced = name.replacingUnderscores()
        return spaced.prefix(1).uppercased() + spaced.dropFirst()
    }
}

private extension String {
    func replacingUnderscores() -> String { String(map { $0 == "_" ? " " : $0 }) }
}
