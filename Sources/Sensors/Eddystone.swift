import BLE

/// Google's Eddystone (github.com/google/eddystone, protocol-specification and the eddystone-uid,
/// -url and -tlm pages): service data of UUID 0xFEAA, a frame type byte, then big-endian fields.
/// UID, URL and unencrypted TLM are decoded; EID, encrypted TLM and unknown frame types are not
/// recognised.
struct Eddystone: PayloadDecoder {
    var source: PayloadSource { .serviceData(0xFEAA) }

    enum FrameType {
        static let uid: UInt8 = 0x00
        static let url: UInt8 = 0x10
        static let tlm: UInt8 = 0x20
    }

    func decode(_ payload: [UInt8], context: DecodingContext) -> SensorReading? {
        var reader = ByteReader(payload)
        switch reader.byte() {
        case FrameType.uid: return Self.uid(&reader)
        case FrameType.url: return Self.url(&reader)
        case FrameType.tlm: return Self.tlm(&reader)
        default: return nil
        }
    }

    /// Tx power at 0 m, a 10-byte namespace, a 6-byte instance, and 2 reserved bytes that
    /// implementations from before the specification required them may leave out.
    private static func uid(_ reader: inout ByteReader) -> SensorReading? {
        guard reader.remainingCount == 17 || reader.remainingCount == 19,
              let power = reader.signed(1, .bigEndian),
              let namespace = reader.read(10), let instance = reader.read(6)
        else { return nil }
        var measurements = Measurements()
        measurements.add("tx_power", Measurement(.integer(power), unit: "dBm"))
        measurements.add("namespace", Measurement(.text(Hex.string(namespace))))
        measurements.add("instance", Measurement(.text(Hex.string(instance))))
        return SensorReading(format: .eddystoneUID, measurements: measurements)
    }

    static let schemes = ["http://www.", "https://www.", "http://", "https://"]
    static let expansions = [
        ".com/", ".org/", ".edu/", ".net/", ".info/", ".biz/", ".gov/",
        ".com", ".org", ".edu", ".net", ".info", ".biz", ".gov",
    ]
    /// The printable US-ASCII the URL encoding may carry as itself; 0x0E...0x20 and 0x7F...0xFF are reserved.
    static let printable: ClosedRange<UInt8> = 0x21...0x7E

    /// Tx power at 0 m, a scheme prefix, and 0...17 bytes of URL with expansion codes.
    private static func url(_ reader: inout ByteReader) -> SensorReading? {
        guard let power = reader.signed(1, .bigEndian), let scheme = reader.byte(),
              Int(scheme) < schemes.count, reader.remainingCount <= 17 else { return nil }
        var url = schemes[Int(scheme)]
        for byte in reader.remaining {
            if Int(byte) < expansions.count {
                url += expansions[Int(byte)]
            } else if printable.contains(byte) {
                url.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                return nil
            }
        }
        var measurements = Measurements()
        measurements.add("tx_power", Measurement(.integer(power), unit: "dBm"))
        measurements.add("url", Measurement(.text(url)))
        return SensorReading(format: .eddystoneURL, measurements: measurements)
    }

    private static let unencryptedTLM: UInt8 = 0x00

    /// Version 0: battery mV (0 = not supported), temperature in signed 8.8 fixed point (0x8000 = not
    /// supported), advertisements sent and time since power-on in 0.1 s, both since the last reboot.
    private static func tlm(_ reader: inout ByteReader) -> SensorReading? {
        guard reader.remainingCount == 13, reader.byte() == unencryptedTLM,
              let millivolts = reader.unsigned(2, .bigEndian),
              let temperature = reader.signed(2, .bigEndian),
              let advertisements = reader.unsigned(4, .bigEndian),
              let tenths = reader.unsigned(4, .bigEndian)
        else { return nil }
        var measurements = Measurements()
        if millivolts != 0 { measurements.add("voltage", Measurement(.integer(Int64(millivolts)), unit: "mV")) }
        if temperature != Int64(Int16.min) {
            measurements.add("temperature", Measurement(Scale(1, 256).value(temperature), unit: "°C"))
        }
        measurements.add("advertisement_count", Measurement(.integer(Int64(advertisements))))
        measurements.add("uptime", Measurement(Scale(1, 10).value(Int64(tenths)), unit: "s"))
        return SensorReading(format: .eddystoneTLM, measurements: measurements)
    }
}
