import BLE
@testable import Sensors

/// Bytes from hex written with or without spaces, as the specifications print them.
func bytes(_ hex: String) -> [UInt8] {
    let digits = hex.utf8.filter { $0 != UInt8(ascii: " ") }
    guard let bytes = Hex.bytes(digits) else { fatalError("bad hex in a test: \(hex)") }
    return bytes
}

func address(_ text: String) -> BluetoothAddress {
    guard let address = BluetoothAddress(text) else { fatalError("bad address in a test: \(text)") }
    return address
}

/// An advertisement with service data of one 16-bit UUID.
func serviceData(_ uuid: UInt16, _ hex: String) -> AdvertisementData {
    AdvertisementData(serviceData: [BluetoothUUID(uint16: uuid): bytes(hex)])
}

/// An advertisement with manufacturer data of one company.
func manufacturerData(_ company: UInt16, _ hex: String) -> AdvertisementData {
    AdvertisementData(manufacturerData: [company: bytes(hex)])
}

/// A measurement as the tables below write one.
struct Expected: Sendable, CustomStringConvertible {
    var name: String
    var value: SensorValue
    var unit: String?
    var steps: Int?

    init(_ name: String, _ value: SensorValue, _ unit: String? = nil, steps: Int? = nil) {
        self.name = name
        self.value = value
        self.unit = unit
        self.steps = steps
    }

    var measurement: Measurement { Measurement(value, unit: unit, steps: steps) }
    var description: String { "\(name)=\(value)" }
}

extension SensorValue: ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByBooleanLiteral, ExpressibleByStringLiteral
{
    public init(integerLiteral value: Int64) { self = .integer(value) }
    public init(floatLiteral value: Double) { self = .number(value) }
    public init(booleanLiteral value: Bool) { self = .boolean(value) }
    public init(stringLiteral value: String) { self = .text(value) }
    public init(unicodeScalarLiteral value: String) { self = .text(value) }
    public init(extendedGraphemeClusterLiteral value: String) { self = .text(value) }
}

/// Measurements from `Expected` values, in order (so repeated names are numbered as the decoder numbers them).
func measurements(_ expected: [Expected]) -> Measurements {
    var result = Measurements()
    for item in expected { result.add(item.name, item.measurement) }
    return result
}
