@testable import Sensors
import Testing

@Suite struct ValueDecodingTests {
    /// (type, offset, scale, value in hex, what it decodes as; nil: too short)
    static let table: [(ValueDecoding.FieldType, Int, Double, String, SensorValue?)] = [
        (.uint8, 1, 1, "0648", .integer(72)),                   // 2A37 heart rate, flags first
        (.uint8, 0, 1, "ff", .integer(255)),
        (.sint8, 0, 1, "ff", .integer(-1)),
        (.uint16le, 0, 1, "3408", .integer(0x0834)),
        (.uint16be, 0, 1, "3408", .integer(0x3408)),
        (.sint16le, 0, 0.01, "3408", .number(21)),              // 2A6E temperature, 0.01 °C
        (.sint16le, 0, 0.01, "f6ff", .number(-0.1)),
        (.sint16le, 0, 0.01, "cb09", .number(25.07)),           // exact: not 25.070000000000004
        (.sint16be, 0, 1, "fffe", .integer(-2)),
        (.uint24le, 0, 1, "010203", .integer(0x030201)),
        (.sint24be, 0, 1, "ffffff", .integer(-1)),
        (.uint32le, 0, 0.1, "e8030000", .number(100)),
        (.sint32be, 0, 1, "80000000", .integer(Int64(Int32.min))),
        (.uint16le, 0, 10, "0500", .integer(50)),
        (.float32le, 0, 1, "c3f5ac41", .number(21.62)),         // the float's shortest decimal
        (.float32be, 0, 1, "41acf5c3", .number(21.62)),
        (.float64le, 0, 1, "000000000000f83f", .number(1.5)),
        (.float32le, 0, 1, "0000c07f", nil),                    // NaN: nothing to show
        (.utf8, 0, 1, "53696d2031000000", .text("Sim 1")),      // NULs at the end left out
        (.utf8, 2, 1, "0000686921", .text("hi!")),
        (.uint16le, 0, 1, "34", nil),                           // too short
        (.uint8, 2, 1, "0648", nil),
    ]

    @Test(arguments: table.indices)
    func decodes(_ i: Int) throws {
        let (type, offset, scale, hex, expected) = Self.table[i]
        let decoding = try ValueDecoding(type: type, offset: offset, scale: scale)
        let measurement = decoding.measurement(bytes(hex), unit: "u")
        #expect(measurement?.value == expected, "\(type) at \(offset) × \(scale) of \(hex)")
        if expected != nil { #expect(measurement?.unit == "u") }
    }

    @Test(arguments: [
        (ValueDecoding.FieldType.uint8, -1, 1.0, "offset"), (.uint8, 512, 1, "offset"), (.uint8, 0, 0, "scale"),
        (.uint8, 0, .nan, "scale"), (.uint8, 0, 1e-12, "scale"), (.uint8, 0, 1.0 / 3, "scale"), (.utf8, 0, 2, "utf8"),
    ])
    func refuses(_ type: ValueDecoding.FieldType, _ offset: Int, _ scale: Double, _ fragment: String) {
        #expect {
            try ValueDecoding(type: type, offset: offset, scale: scale)
        } throws: { error in
            (error as? ValueDecoding.Invalid)?.description.contains(fragment) == true
        }
    }

    @Test func everyFieldTypeNamesItsSize() {
        for type in ValueDecoding.FieldType.allCases where type.isNumeric {
            #expect(type.size != nil && type.rawValue.contains(String(type.size! * 8)), "\(type)")
        }
    }
}
