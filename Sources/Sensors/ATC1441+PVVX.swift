import BLE

/// The custom thermometer firmwares' service data on UUID 0x181A (Environmental Sensing),
/// told apart by length as the PVVX README does ("size 16" and "size 19" AD structures), and,
/// when the advertiser's address is known, by the MAC they carry (in opposite byte orders): a
/// PVVX payload cut to 13 bytes must not pass for an ATC1441 one.
private let environmentalSensing: UInt16 = 0x181A

/// Whether the MAC in a payload is the advertiser's; true when the advertiser is unknown.
private func isAdvertiser(_ mac: some Collection<UInt8>, _ context: DecodingContext, reversed: Bool) -> Bool {
    guard let address = context.address else { return true }
    return reversed ? address.bytes.elementsEqual(mac.reversed()) : address.bytes.elementsEqual(mac)
}

/// atc1441's format (ATC_MiThermometer README, "Advertising format of the custom firmware"),
/// 13 bytes, big-endian: MAC (6), temperature int16 × 0.1 °C, humidity %, battery %,
/// battery mV uint16, frame counter.
struct ATC1441: PayloadDecoder {
    var source: PayloadSource { .serviceData(environmentalSensing) }

    func decode(_ payload: [UInt8], context: DecodingContext) -> SensorReading? {
        guard payload.count == 13 else { return nil }
        var reader = ByteReader(payload)
        guard let mac = reader.read(6), isAdvertiser(mac, context, reversed: false),
              let temperature = reader.signed(2, .bigEndian),
              let humidity = reader.byte(), let battery = reader.byte(),
              let millivolts = reader.unsigned(2, .bigEndian), let counter = reader.byte()
        else { return nil }
        var measurements = Measurements()
        measurements.add("temperature", Measurement(Scale(1, 10).value(temperature), unit: "°C"))
        measurements.add("humidity", Measurement(.integer(Int64(humidity)), unit: "%"))
        measurements.add("battery", Measurement(.integer(Int64(battery)), unit: "%"))
        measurements.add("voltage", Measurement(.integer(Int64(millivolts)), unit: "mV"))
        return SensorReading(format: .atc1441, packetId: Int(counter), measurements: measurements)
    }
}

/// pvvx's custom format (pvvx/ATC_MiThermometer README, "Custom format (all data little-endian)"),
/// 15 bytes: MAC (6, least significant first), temperature int16 × 0.01 °C, humidity uint16
/// × 0.01 %, battery mV uint16, battery %, measurement counter, flags (reed switch, trigger pin
/// output, trigger pin controlled by thresholds, temperature trigger, humidity trigger).
struct PVVX: PayloadDecoder {
    var source: PayloadSource { .serviceData(environmentalSensing) }

    private static let flags = ["reed_switch", "trigger_output", "trigger_controlled", "temperature_trigger", "humidity_trigger"]

    func decode(_ payload: [UInt8], context: DecodingContext) -> SensorReading? {
        guard payload.count == 15 else { return nil }
        var reader = ByteReader(payload)
        guard let mac = reader.read(6), isAdvertiser(mac, context, reversed: true),
              let temperature = reader.signed(2, .littleEndian),
              let humidity = reader.unsigned(2, .littleEndian),
              let millivolts = reader.unsigned(2, .littleEndian),
              let battery = reader.byte(), let counter = reader.byte(), let flags = reader.byte()
        else { return nil }
        var measurements = Measurements()
        measurements.add("temperature", Measurement(Scale(1, 100).value(temperature), unit: "°C"))
        measurements.add("humidity", Measurement(Scale(1, 100).value(Int64(humidity)), unit: "%"))
        measurements.add("voltage", Measurement(.integer(Int64(millivolts)), unit: "mV"))
        measurements.add("battery", Measurement(.integer(Int64(battery)), unit: "%"))
        for (bit, name) in Self.flags.enumerated() {
            measurements.add(name, Measurement(.boolean(flags & (1 << bit) != 0)))
        }
        return SensorReading(format: .pvvx, packetId: Int(counter), measurements: measurements)
    }
}
