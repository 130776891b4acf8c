extension BTHome {
    /// What an object id announces: how many bytes follow and what they mean.
    enum Object: Sendable {
        /// A number: `size` bytes little-endian, times `scale`, in `unit`.
        case number(String, size: Int, signed: Bool, Scale, unit: String?)
        /// One byte, 0 or 1; any other value is not understood.
        case binary(String)
        /// A length byte, then that many bytes of UTF-8.
        case text
        /// A length byte, then that many bytes, reported in hex.
        case raw
        /// Seconds since 1970-01-01T00:00:00Z, 4 bytes, reported as an ISO 8601 text.
        case timestamp
        /// A version in `size` (3 or 4) bytes little-endian, written most significant part first.
        case firmwareVersion(size: Int)
        /// The packet id, 1 byte.
        case packetId
        case button
        case dimmer
        case command
    }

    private static func unsigned(_ name: String, _ size: Int, _ scale: Scale = .one, _ unit: String? = nil) -> Object {
        .number(name, size: size, signed: false, scale, unit: unit)
    }

    private static func signed(_ name: String, _ size: Int, _ scale: Scale = .one, _ unit: String? = nil) -> Object {
        .number(name, size: size, signed: true, scale, unit: unit)
    }

    /// Every object id of the BTHome v2 format page (bthome.io/format), with its data type, factor
    /// and unit. Names are the page's property names in snake_case; where a binary sensor shares
    /// its property name with a measurement (battery, power, gas, moisture), the binary one is
    /// named after what `true` means (battery_low, power_on, gas_detected, moisture_wet). Units
    /// use their symbols (m³, µg/m³) where the page writes ASCII (m3, ug/m3). Binary sensors keep
    /// the page's meaning of true, e.g. lock: true = unlocked, door: true = open.
    static let objects: [UInt8: Object] = [
        0x00: .packetId,
        // Sensor data
        0x01: unsigned("battery", 1, .one, "%"),
        0x02: signed("temperature", 2, Scale(1, 100), "°C"),
        0x03: unsigned("humidity", 2, Scale(1, 100), "%"),
        0x04: unsigned("pressure", 3, Scale(1, 100), "hPa"),
        0x05: unsigned("illuminance", 3, Scale(1, 100), "lx"),
        0x06: unsigned("mass", 2, Scale(1, 100), "kg"),
        0x07: unsigned("mass", 2, Scale(1, 100), "lb"),
        0x08: signed("dewpoint", 2, Scale(1, 100), "°C"),
        0x09: unsigned("count", 1),
        0x0A: unsigned("energy", 3, Scale(1, 1000), "kWh"),
        0x0B: unsigned("power", 3, Scale(1, 100), "W"),
        0x0C: unsigned("voltage", 2, Scale(1, 1000), "V"),
        0x0D: unsigned("pm2_5", 2, .one, "µg/m³"),
        0x0E: unsigned("pm10", 2, .one, "µg/m³"),
        0x12: unsigned("co2", 2, .one, "ppm"),
        0x13: unsigned("tvoc", 2, .one, "µg/m³"),
        0x14: unsigned("moisture", 2, Scale(1, 100), "%"),
        0x2E: unsigned("humidity", 1, .one, "%"),
        0x2F: unsigned("moisture", 1, .one, "%"),
        0x3D: unsigned("count", 2),
        0x3E: unsigned("count", 4),
        0x3F: signed("rotation", 2, Scale(1, 10), "°"),
        0x40: unsigned("distance", 2, .one, "mm"),
        0x41: unsigned("distance", 2, Scale(1, 10), "m"),
        0x42: unsigned("duration", 3, Scale(1, 1000), "s"),
        0x43: unsigned("current", 2, Scale(1, 1000), "A"),
        0x44: unsigned("speed", 2, Scale(1, 100), "m/s"),
        0x45: signed("temperature", 2, Scale(1, 10), "°C"),
        0x46: unsigned("uv_index", 1, Scale(1, 10)),
        0x47: unsigned("volume", 2, Scale(1, 10), "L"),
        0x48: unsigned("volume", 2, .one, "mL"),
        0x49: unsigned("volume_flow_rate", 2, Scale(1, 1000), "m³/h"),
        0x4A: unsigned("voltage", 2, Scale(1, 10), "V"),
        0x4B: unsigned("gas", 3, Scale(1, 1000), "m³"),
        0x4C: unsigned("gas", 4, Scale(1, 1000), "m³"),
        0x4D: unsigned("energy", 4, Scale(1, 1000), "kWh"),
        0x4E: unsigned("volume", 4, Scale(1, 1000), "L"),
        0x4F: unsigned("water", 4, Scale(1, 1000), "L"),
        0x50: .timestamp,
        0x51: unsigned("acceleration", 2, Scale(1, 1000), "m/s²"),
        0x52: unsigned("gyroscope", 2, Scale(1, 1000), "°/s"),
        0x53: .text,
        0x54: .raw,
        0x55: unsigned("volume_storage", 4, Scale(1, 1000), "L"),
        0x56: unsigned("conductivity", 2, .one, "µS/cm"),
        0x57: signed("temperature", 1, .one, "°C"),
        0x58: signed("temperature", 1, Scale(35, 100), "°C"),
        0x59: signed("count", 1),
        0x5A: signed("count", 2),
        0x5B: signed("count", 4),
        0x5C: signed("power", 4, Scale(1, 100), "W"),
        0x5D: signed("current", 2, Scale(1, 1000), "A"),
        0x5E: unsigned("direction", 2, Scale(1, 100), "°"),
        0x5F: unsigned("precipitation", 2, Scale(1, 10), "mm"),
        0x60: unsigned("channel", 1),
        0x61: unsigned("rotational_speed", 2, .one, "rpm"),
        0x62: signed("speed", 4, Scale(1, 1_000_000), "m/s"),
        0x63: signed("acceleration", 4, Scale(1, 1_000_000), "m/s²"),
        // 0 dark, 1 twilight, 2 bright.
        0x64: unsigned("light_level", 1),
        0x65: unsigned("settings_revision", 1),
        // Binary sensor data
        0x0F: .binary("generic_boolean"),
        0x10: .binary("power_on"),
        0x11: .binary("opening"),
        0x15: .binary("battery_low"),
        0x16: .binary("battery_charging"),
        0x17: .binary("carbon_monoxide"),
        0x18: .binary("cold"),
        0x19: .binary("connectivity"),
        0x1A: .binary("door"),
        0x1B: .binary("garage_door"),
        0x1C: .binary("gas_detected"),
        0x1D: .binary("heat"),
        0x1E: .binary("light"),
        0x1F: .binary("lock"),
        0x20: .binary("moisture_wet"),
        0x21: .binary("motion"),
        0x22: .binary("moving"),
        0x23: .binary("occupancy"),
        0x24: .binary("plug"),
        0x25: .binary("presence"),
        0x26: .binary("problem"),
        0x27: .binary("running"),
        0x28: .binary("safety"),
        0x29: .binary("smoke"),
        0x2A: .binary("sound"),
        0x2B: .binary("tamper"),
        0x2C: .binary("vibration"),
        0x2D: .binary("window"),
        // Events
        0x3A: .button,
        0x3B: .command,
        0x3C: .dimmer,
        // Device information
        0xF0: unsigned("device_type_id", 2),
        0xF1: .firmwareVersion(size: 4),
        0xF2: .firmwareVersion(size: 3),
    ]

    /// Button events (object 0x3A); 0x00 "none" holds a button's place when another one is pressed.
    static let buttonEvents: [UInt8: String] = [
        0x00: "none", 0x01: "press", 0x02: "double_press", 0x03: "triple_press", 0x04: "long_press",
        0x05: "long_double_press", 0x06: "long_triple_press", 0x80: "hold_press",
    ]

    /// Dimmer events (object 0x3C), each followed by a step count.
    static let dimmerEvents: [UInt8: String] = [0x00: "none", 0x01: "rotate_left", 0x02: "rotate_right"]

    /// Command opcodes (object 0x3B) and whether they take a one-byte step count.
    static let commands: [UInt8: (name: String, takesSteps: Bool)] = [
        0x00: ("off", false), 0x01: ("on", false), 0x02: ("toggle", false),
        0x03: ("step_up", true), 0x04: ("step_down", true),
    ]
}
