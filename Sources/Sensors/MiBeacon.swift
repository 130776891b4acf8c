import AESCCM
import BLE

/// Xiaomi MiBeacon (Xiaomi's "MiBeacon protocol" page, MiEcosystem/miio_open, and the open
/// decoders' notes: custom-components/ble_monitor's "Reverse engineering the MiBeacon protocol"):
/// service data of UUID 0xFE95. A 2-byte frame control, product id (2), frame counter (1), then,
/// as the frame control says, the device's MAC (6, least significant first), a capability byte
/// (and one I/O capability byte when its bit 5 is set), and objects: id (2), length (1), value,
/// little-endian.
///
/// Encrypted frames of versions 4 and 5 (the version is the frame control's top 4 bits) carry the
/// objects as AES-CCM ciphertext, followed by a 3-byte "random number" (the top 3 bytes of a 32-bit
/// counter whose low byte is the frame counter) and a 4-byte tag; the nonce is the MAC as sent
/// (least significant first) ‖ product id ‖ frame counter ‖ random number, the associated data the
/// one byte 0x11, the key the device's 16-byte bind key. Without a key such a frame is
/// `Encryption.missingKey`, with a wrong one `.failed`; a device that has a key and sends objects in
/// the clear is refused (`.refusedCleartext`), as BTHome's are. The older versions' encryption
/// (a 12-byte key) is recognised and reported `.unsupported`.
///
/// Mesh frames and frames without objects are not recognised. Objects carry their length, so an
/// unknown one is skipped; a frame with no known object is not recognised.
struct MiBeacon: PayloadDecoder {
    var source: PayloadSource { .serviceData(0xFE95) }

    private enum Control {
        static let encrypted: UInt16 = 1 << 3
        static let macIncluded: UInt16 = 1 << 4
        static let capabilityIncluded: UInt16 = 1 << 5
        static let objectIncluded: UInt16 = 1 << 6
        static let mesh: UInt16 = 1 << 7
        static let versionShift: UInt16 = 12
    }

    private static let ioCapabilityIncluded: UInt8 = 1 << 5
    /// The first version whose frames are sealed with AES-CCM.
    private static let firstCCMVersion: UInt16 = 4
    private static let associatedData: [UInt8] = [0x11]
    private static let randomNumberLength = 3
    private static let tagLength = 4
    /// An object's id and length: the least ciphertext worth opening.
    private static let objectHeaderLength = 3

    func decode(_ payload: [UInt8], context: DecodingContext) -> SensorReading? {
        var reader = ByteReader(payload)
        guard let control = reader.unsigned(2, .littleEndian).map(UInt16.init),
              let productId = reader.read(2), let counter = reader.byte(),
              control & Control.mesh == 0, control & Control.objectIncluded != 0
        else { return nil }
        var mac: [UInt8]?
        if control & Control.macIncluded != 0 {
            guard let sent = reader.read(6) else { return nil }
            // A frame that names another device is not this device's reading.
            if let address = context.address, address.bytes != sent.reversed() { return nil }
            mac = Array(sent)
        }
        if control & Control.capabilityIncluded != 0 {
            guard let capability = reader.byte() else { return nil }
            if capability & Self.ioCapabilityIncluded != 0, reader.byte() == nil { return nil }
        }
        // The advertiser: known to the caller, or named by the frame.
        let address = context.address ?? mac.flatMap { BluetoothAddress(bytes: Array($0.reversed())) }
        let key = address.flatMap { context.keys[$0] }
        guard control & Control.encrypted != 0 else {
            guard let measurements = Self.objects(reader.remaining) else { return nil }
            guard key == nil else { return SensorReading(format: .mibeacon, packetId: Int(counter), encryption: .refusedCleartext) }
            return SensorReading(format: .mibeacon, packetId: Int(counter), measurements: measurements)
        }
        guard control >> Control.versionShift >= Self.firstCCMVersion else {
            return SensorReading(format: .mibeacon, packetId: Int(counter), encryption: .unsupported)
        }
        let body = reader.remaining
        guard body.count >= Self.objectHeaderLength + Self.randomNumberLength + Self.tagLength else { return nil }
        guard let key, let address else {
            return SensorReading(format: .mibeacon, packetId: Int(counter), encryption: .missingKey)
        }
        let randomStart = body.count - Self.tagLength - Self.randomNumberLength
        let random = Array(body[randomStart..<body.count - Self.tagLength])
        let nonce = (mac ?? address.bytes.reversed()) + productId + [counter] + random
        let sealed = Array(body[..<randomStart] + body.suffix(Self.tagLength))
        guard let plaintext = AESCCM.open(sealed, key: key, nonce: nonce, associatedData: Self.associatedData,
                                          tagLength: Self.tagLength)
        else {
            return SensorReading(format: .mibeacon, packetId: Int(counter), encryption: .failed)
        }
        guard let measurements = Self.objects(plaintext) else { return nil }
        var reading = SensorReading(format: .mibeacon, packetId: Int(counter), encryption: .decrypted, measurements: measurements)
        var full = ByteReader([counter] + random)
        reading.replayToken = full.unsigned(4, .littleEndian).map { ReplayToken(counter: UInt32($0), payload: payload) }
        return reading
    }

    /// The known objects' measurements; nil when an object is cut short or of a wrong length, or
    /// none is known.
    private static func objects(_ bytes: [UInt8]) -> Measurements? {
        var reader = ByteReader(bytes)
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
        return measurements.isEmpty ? nil : measurements
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
