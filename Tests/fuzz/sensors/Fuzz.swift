import BLE
import FuzzSupport
import FoundationEssentials
@testable import Sensors

// The advertisement decoders (Sources/Sensors): whatever a radio neighbour advertises. Input: a
// byte choosing where the payload goes (which service data UUID or company identifier the
// decoders look under), a byte choosing whether the advertiser has a bind key, the payload.
//
// Properties:
// - decoding is a function of the advertisement: the same bytes give the same reading;
// - a reading is what the JSON shape promises: numbers finite, measurement names non-empty,
//   encoded without error into an object with "format", "encryption" and "measurements";
// - only readings sent in the clear or decrypted carry measurements, and a device without a key
//   never has its encrypted payload "decrypted";
// - a payload under a place no decoder reads stays raw (nil).
let places: [(serviceData: UInt16?, company: UInt16?)] = [
    (0xFCD2, nil), (0x181A, nil), (0xFE95, nil), (0xFEAA, nil), (nil, 0x0499), (nil, 0x004C),
    (0x180F, nil), (nil, 0xFFFF),  // the last two: no decoder reads there
]
let address = BluetoothAddress("A4:C1:38:00:00:01")!
let key = SensorKeys([address: Array(repeating: 0x5A, count: 16)])

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var input = FuzzInput(data, size)
    let place = places[input.choice(places.count)]
    let keyed = input.byte() & 1 == 1
    let payload = input.rest()
    var advertisement = AdvertisementData()
    if let uuid = place.serviceData { advertisement.serviceData[BluetoothUUID(uint16: uuid)] = payload }
    if let company = place.company { advertisement.manufacturerData[company] = payload }
    let keys = keyed ? key : SensorKeys()

    let reading = Sensors.decode(advertisement, address: address, keys: keys)
    require(reading == Sensors.decode(advertisement, address: address, keys: keys), "the same advertisement decoded twice differently")
    if place.serviceData == 0x180F || place.company == 0xFFFF {
        require(reading == nil, "a payload no decoder reads was decoded: \(String(describing: reading))")
    }
    guard let reading else { return 0 }
    if !(reading.encryption == .none || reading.encryption == .decrypted) {
        require(reading.measurements.isEmpty, "a \(reading.encryption) reading carries measurements")
    }
    if !keyed { require(reading.encryption != .decrypted, "decrypted without a key") }
    for (name, measurement) in reading.measurements {
        require(!name.isEmpty, "a measurement without a name")
        if case .number(let value) = measurement.value { require(value.isFinite, "\(name) is \(value)") }
    }
    do {
        let json = try JSONEncoder().encode(reading)
        let shape = try JSONDecoder().decode(Shape.self, from: json)
        require(shape.format == reading.format.rawValue && shape.measurements.count == reading.measurements.count,
                "the JSON does not say what the reading does: \(String(decoding: json, as: UTF8.self))")
    } catch {
        require(false, "the reading does not encode to its documented shape: \(error)")
    }
    return 0
}

/// The documented JSON of a reading, as a client reads it.
struct Shape: Decodable {
    struct Entry: Decodable {
        var unit: String?
    }
    var format: String
    var encrypted: Bool
    var encryption: String
    var measurements: [String: Entry]
}
