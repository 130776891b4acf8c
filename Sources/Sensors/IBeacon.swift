import BLE

/// Apple iBeacon (Proximity Beacon Specification): manufacturer data of Apple (0x004C), type 0x02,
/// length 0x15, then the proximity UUID (16), major (2), minor (2), big-endian, and the measured
/// power at 1 m (signed, dBm).
struct IBeacon: PayloadDecoder {
    var source: PayloadSource { .manufacturerData(0x004C) }

    static let header: [UInt8] = [0x02, 0x15]

    func decode(_ payload: [UInt8], context: DecodingContext) -> SensorReading? {
        guard payload.count == 23, payload.starts(with: Self.header) else { return nil }
        var reader = ByteReader(payload.dropFirst(2))
        guard let uuid = reader.read(16).flatMap({ BluetoothUUID(bytes: Array($0)) }),
              let major = reader.unsigned(2, .bigEndian), let minor = reader.unsigned(2, .bigEndian),
              let power = reader.signed(1, .bigEndian)
        else { return nil }
        var measurements = Measurements()
        measurements.add("uuid", Measurement(.text(uuid.uuidString)))
        measurements.add("major", Measurement(.integer(Int64(major))))
        measurements.add("minor", Measurement(.integer(Int64(minor))))
        measurements.add("measured_power", Measurement(.integer(power), unit: "dBm"))
        return SensorReading(format: .ibeacon, measurements: measurements)
    }
}
