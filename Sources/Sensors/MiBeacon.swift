import BLE

/// Xiaomi MiBeacon, unencrypted (as open decoders document it: custom-components/ble_monitor's
/// "Reverse engineering the MiBeacon protocol"): service data of UUID 0xFE95. A 2-byte frame
/// control, product id (2), frame counter (1), then, as the frame control says, the device's
/// MAC (6, least significant first), a capability byte (and one I/O capability byte when its
/// bit 5 is set), and objects: id (2), length (1), value, little-endian.
///
/// Encrypted frames are recognised and reported `Encryption.unsupported`; mesh frames and
/// frames without objects are not recognised. Objects carry their length, so an unknown one is
/// skipped; a frame with no known object is not recognised.
struct MiBeacon: PayloadDecoder {
    var source: PayloadSource { .serviceData(0xFE95) }

    private enum Control {
        static let encrypted: UInt16 = 1 << 3
        static let macIncluded: UInt16 = 1 << 4
        static let capabilityIncluded: UInt16 = 1 << 5
        static let objectIncluded: UInt16 = 1 << 6
        static let mesh: UInt16 = 1 << 7
    }

    private static let ioCapabilityIncluded: UInt8 = 1 << 5

    func decode(_ payload: [UInt8], context: DecodingContext) -> SensorReading? {
        var reader = ByteReader(payload)
        guard let control = reader.unsigned(2, .littleEndian).map(UInt16.init),
              reader.read(2) != nil, let counter = reader.byte(),
              control & Control.mesh == 0, control & Control.objectIncluded != 0
        else { return nil }
        if control & Control.macIncluded != 0 {
            guard let mac = reader.read(6) else { return nil }
            // A frame that names another device is not this device's reading.
            if let address = context.address, address.bytes != mac.reversed() { return nil }
        }
        guard control & Control.encrypted == 0 else {
            return SensorReading(format: .mibeacon, packetId: Int(counter), encryption: .unsupported)
        }
        if control & Control.capabilityIncluded != 0 {
            guard let capability = reader.byte() else { return nil }
            if capability & Self.ioCapabilityIncluded != 0, reader.byte() == nil { return nil }
        }
        var measurements = Measurements()
        while !reader.isAtEnd {
            guard let id = reader.unsigned(2, .littleEndian), let length = reader.byte(),
                  let value = reader.read(Int(length)) else { return nil }
            guard let object = Self.objects[UInt16(id)] else { continue }
            guard value.count == object.fields.reduce(0, { $0 + $1.size }) else { return nil }
            var fields = ByteReader(value)
            for field in object.fields {
                let raw = field.signed ? fields.signed(field.size, .littleEndian)
                    : fields.unsigned(field.size, .littleEndian).map(Int64.init)
                guard let raw else { return nil }
                measurements.add(field.name, Measurement(field.scale.value(raw), unit: field.unit))
            }
        }
        guard !measurements.isEmpty else { return nil }
        return SensorReading(format: .mibeacon, packetId: Int(counter), measurements: measurements)
    }

    private struct Field {
        var name: String
        var size: Int
        var signed: Bool
        var scale: Scale
        var unit: String?
    }

    private struct Object {
        var fields: [Field]
    }

    private static let temperature = Field(name: "temperature", size: 2, signed: true, scale: Scale(1, 10), unit: "°C")
    private static let humidity = Field(name: "humidity", size: 2, signed: false, scale: Scale(1, 10), unit: "%")

    /// The sensor objects of the documented thermometers and plant sensors.
    private static let objects: [UInt16: Object] = [
        0x1004: Object(fields: [temperature]),
        0x1006: Object(fields: [humidity]),
        0x1007: Object(fields: [Field(name: "illuminance", size: 3, signed: false, scale: .one, unit: "lx")]),
        0x1008: Object(fields: [Field(name: "moisture", size: 1, signed: false, scale: .one, unit: "%")]),
        0x1009: Object(fields: [Field(name: "conductivity", size: 2, signed: false, scale: .one, unit: "µS/cm")]),
        0x100A: Object(fields: [Field(name: "battery", size: 1, signed: false, scale: .one, unit: "%")]),
        0x100D: Object(fields: [temperature, humidity]),
        0x1010: Object(fields: [Field(name: "formaldehyde", size: 2, signed: false, scale: Scale(1, 100), unit: "mg/m³")]),
    ]
}
