/// RuuviTag data format 5, "RAWv2" (docs.ruuvi.com, data-format-5-rawv2): manufacturer data of
/// Ruuvi Innovations (0x0499), 24 bytes big-endian. Each field's "not available" value (the
/// largest unsigned, the smallest signed) leaves that measurement out rather than reporting it.
struct RuuviRAWv2: PayloadDecoder {
    var source: PayloadSource { .manufacturerData(0x0499) }

    private static let dataFormat: UInt8 = 5

    func decode(_ payload: [UInt8], context: DecodingContext) -> SensorReading? {
        guard payload.count == 24, payload[0] == Self.dataFormat else { return nil }
        var reader = ByteReader(payload.dropFirst())
        guard let temperature = reader.signed(2, .bigEndian),
              let humidity = reader.unsigned(2, .bigEndian),
              let pressure = reader.unsigned(2, .bigEndian),
              let x = reader.signed(2, .bigEndian), let y = reader.signed(2, .bigEndian),
              let z = reader.signed(2, .bigEndian),
              let power = reader.unsigned(2, .bigEndian),
              let movement = reader.byte(),
              let sequence = reader.unsigned(2, .bigEndian)
        else { return nil }
        var measurements = Measurements()
        func add(_ name: String, _ raw: Int64, missing: Int64, _ scale: Scale, offset: Int64 = 0, unit: String?) {
            guard raw != missing else { return }
            measurements.add(name, Measurement(scale.value(raw, offset: offset), unit: unit))
        }
        add("temperature", temperature, missing: Int64(Int16.min), Scale(5, 1000), unit: "°C")
        add("humidity", Int64(humidity), missing: 0xFFFF, Scale(25, 10000), unit: "%")
        add("pressure", Int64(pressure), missing: 0xFFFF, .one, offset: 50_000, unit: "Pa")
        // Acceleration is sent in mG; the specification's test vectors give it in G.
        for (axis, value) in [("x", x), ("y", y), ("z", z)] {
            add("acceleration_\(axis)", value, missing: Int64(Int16.min), Scale(1, 1000), unit: "G")
        }
        // 11 bits of battery voltage above 1.6 V in mV, then 5 bits of TX power above -40 dBm in 2 dBm steps.
        add("voltage", Int64(power >> 5), missing: 0x7FF, Scale(1, 1000), offset: 1600, unit: "V")
        add("tx_power", Int64(power & 0x1F), missing: 0x1F, Scale(2, 1), offset: -20, unit: "dBm")
        add("movement_counter", Int64(movement), missing: 0xFF, .one, unit: nil)
        return SensorReading(
            format: .ruuviRAWv2, packetId: sequence == 0xFFFF ? nil : Int(sequence), measurements: measurements)
    }
}
