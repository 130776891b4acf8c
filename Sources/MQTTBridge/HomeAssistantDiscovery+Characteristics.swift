import GatewayCore
import BLE

/// Discovery for the characteristics of `--mqtt-expose`: one sensor entity each, on the HA
/// device of the BLE device (the same `ble_<address>` a decoded sensor of that address has),
/// via the gateway, available while the gateway is.
extension HomeAssistantDiscovery {
    /// Home Assistant's sensor device classes (`SensorDeviceClass`, 2024-2025).
    static let sensorDeviceClasses: Set<String> = [
        "absolute_humidity", "apparent_power", "aqi", "area", "atmospheric_pressure", "battery", "blood_glucose_concentration",
        "carbon_dioxide", "carbon_monoxide", "conductivity", "current", "data_rate", "data_size", "date", "distance",
        "duration", "energy", "energy_distance", "energy_storage", "enum", "frequency", "gas", "humidity", "illuminance",
        "irradiance", "moisture", "monetary", "nitrogen_dioxide", "nitrogen_monoxide", "nitrous_oxide", "ozone", "ph",
        "pm1", "pm10", "pm25", "power", "power_factor", "precipitation", "precipitation_intensity", "pressure",
        "reactive_energy", "reactive_power", "signal_strength", "sound_pressure", "speed", "sulphur_dioxide",
        "temperature", "timestamp", "volatile_organic_compounds", "volatile_organic_compounds_parts", "voltage",
        "volume", "volume_flow_rate", "volume_storage", "water", "weight", "wind_direction", "wind_speed",
    ]

    static let stateClasses: Set<String> = ["measurement", "total", "total_increasing"]

    /// The config topic and message of an exposed characteristic; `deviceName` is what the device
    /// calls itself, if known; `expireAfter` the bridge's (`ExposedCharacteristic.expiry`).
    static func config(_ exposed: ExposedCharacteristic, deviceName: String?, topics: BridgeTopics,
                       expireAfter: Int? = nil) -> (topic: String, config: Config) {
        let unique = exposed.uniqueID
        let device = Device(identifiers: [deviceIdentifier(exposed.device)],
                            connections: [["bluetooth", exposed.device.description.lowercased()]],
                            name: deviceName ?? "BLE \(exposed.device)", via_device: gatewayIdentifier(topics))
        let config = Config(
            name: exposed.name, unique_id: unique, object_id: unique, state_topic: topics.value(exposed),
            value_template: "{{ value_json.measurement.value }}", device_class: exposed.deviceClass,
            unit_of_measurement: exposed.unit, state_class: exposed.stateClass,
            expire_after: exposed.expiry(default: expireAfter),
            availability: [Availability(topic: topics.availability)], device: device)
        return ("\(prefix)/sensor/\(unique)/config", config)
    }
}
