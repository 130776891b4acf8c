import BLE

/// Decodes sensor advertisements. Each format has one `PayloadDecoder`; `decode` asks them in
/// `decoders` order and keeps the first reading. A payload no decoder recognises gives nil: the
/// caller keeps it raw. Decoders never guess: a wrong length, a reserved value or an unknown
/// frame type is "not recognised", not a best effort.
public enum Sensors {
    /// The decoders, most specific first. BTHome leads because devices running the PVVX firmware
    /// can advertise BTHome, PVVX and MiBeacon at once and BTHome is the richest of the three.
    static let decoders: [any PayloadDecoder] = [
        BTHome(),
        PVVX(),
        ATC1441(),
        MiBeacon(),
        RuuviRAWv2(),
        Eddystone(),
        IBeacon(),
    ]

    /// The service data UUIDs and company identifiers some decoder reads.
    private static let serviceDataUUIDs = Set(decoders.compactMap { d -> BluetoothUUID? in
        if case .serviceData(let uuid) = d.source { BluetoothUUID(uint16: uuid) } else { nil }
    })
    private static let companies = Set(decoders.compactMap { d -> UInt16? in
        if case .manufacturerData(let company) = d.source { company } else { nil }
    })

    /// Whether some decoder would look at `advertisement` (`decode` may still find nothing):
    /// cheaper than decoding, for the many advertisements that are no sensor's. With the bytes,
    /// read from their structures' headers (the fields are not built for it).
    public static func mayDecode(_ advertisement: AdvertisementData) -> Bool {
        guard let raw = advertisement.raw else {
            return advertisement.serviceData.keys.contains(where: serviceDataUUIDs.contains)
                || advertisement.manufacturerData.keys.contains(where: companies.contains)
        }
        var offset = 0
        while offset + 1 < raw.count, raw[offset] != 0 {
            let end = offset + 1 + Int(raw[offset])
            guard end <= raw.count else { break }
            // Both start with a 16-bit little-endian number: the UUID, the company.
            if end - offset >= 4 {
                let number = UInt16(raw[offset + 2]) | UInt16(raw[offset + 3]) << 8
                switch raw[offset + 1] {
                case AdvertisementData.ADType.serviceData16 where serviceDataUUIDs.contains(BluetoothUUID(uint16: number)): return true
                case AdvertisementData.ADType.manufacturerData where companies.contains(number): return true
                default: break
                }
            }
            offset = end
        }
        return false
    }

    /// The reading of the first decoder that recognises its payload in `advertisement`, or nil.
    /// `address` is the advertiser's: the BTHome and MiBeacon encryption nonces contain it, and
    /// MiBeacon frames that carry another device's address are refused; nil when unknown.
    public static func decode(
        _ advertisement: AdvertisementData, address: BluetoothAddress?, keys: SensorKeys = SensorKeys()
    ) -> SensorReading? {
        let context = DecodingContext(address: address, keys: keys)
        for decoder in decoders {
            guard let payload = decoder.source.payload(in: advertisement),
                  let reading = decoder.decode(payload, context: context) else { continue }
            return reading
        }
        return nil
    }
}

/// What a decoder may know besides the payload.
struct DecodingContext {
    var address: BluetoothAddress?
    var keys: SensorKeys
}

/// Where in an advertisement a format's bytes are.
enum PayloadSource {
    /// Service data of this 16-bit UUID.
    case serviceData(UInt16)
    /// Manufacturer data of this company identifier (the bytes after the identifier).
    case manufacturerData(UInt16)

    func payload(in advertisement: AdvertisementData) -> [UInt8]? {
        switch self {
        case .serviceData(let uuid): advertisement.serviceData[BluetoothUUID(uint16: uuid)]
        case .manufacturerData(let company): advertisement.manufacturerData[company]
        }
    }
}

/// One advertisement format.
protocol PayloadDecoder: Sendable {
    var source: PayloadSource { get }
    /// The reading, or nil when `payload` is not this format (or is malformed).
    func decode(_ payload: [UInt8], context: DecodingContext) -> SensorReading?
}
