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

    /// IEEE 11073 SFLOAT and FLOAT, worked out by hand: (type, offset, scale, value in hex, what it
    /// decodes as; nil: a special value or too short). The bytes are little-endian: 0xF172 is "72f1".
    static let medical: [(ValueDecoding.FieldType, Int, Double, String, SensorValue?)] = [
        (.medfloat16, 0, 1, "7201", .integer(370)),             // exponent 0, mantissa 0x172
        (.medfloat16, 0, 1, "72f1", .number(37)),               // exponent -1
        (.medfloat16, 0, 1, "8efe", .number(-37)),              // mantissa 0xE8E: -370
        (.medfloat16, 0, 1, "0520", .integer(500)),             // exponent 2, mantissa 5
        (.medfloat16, 0, 1, "0180", .number(1e-8)),             // exponent -8, the least
        (.medfloat16, 0, 1, "ff77", .integer(20_470_000_000)),  // 2047 × 10^7: NaN's mantissa, not exponent 0
        (.medfloat16, 0, 1, "ff7f", .integer(-10_000_000)),     // mantissa 0xFFF: -1 × 10^7
        (.medfloat16, 0, 1, "fd07", .integer(2045)),            // the largest mantissa that is a number
        (.medfloat16, 0, 1, "0308", .integer(-2045)),           // and the smallest
        (.medfloat16, 0, 0.1, "72f1", .number(3.7)),            // scaled as a decimal: not 3.7000000000000002
        (.medfloat16, 0, 1, "ff07", nil),                       // NaN
        (.medfloat16, 0, 1, "0008", nil),                       // NRes
        (.medfloat16, 0, 1, "fe07", nil),                       // +INFINITY
        (.medfloat16, 0, 1, "0208", nil),                       // -INFINITY
        (.medfloat16, 0, 1, "0108", nil),                       // reserved
        (.medfloat16, 1, 1, "0072", nil),                       // too short
        (.medfloat32, 0, 1, "6e0100ff", .number(36.6)),         // 2A1C: 366 × 10^-1 °C
        (.medfloat32, 1, 1, "006e0100ff", .number(36.6)),       // after its flags byte
        (.medfloat32, 0, 1, "72010000", .integer(370)),
        (.medfloat32, 0, 1, "92fefffe", .number(-3.66)),        // mantissa 0xFFFE92: -366, exponent -2
        (.medfloat32, 0, 1, "0c000003", .integer(12_000)),      // exponent 3
        (.medfloat32, 0, 1, "ffff7f01", .integer(83_886_070)),  // NaN's mantissa with exponent 1
        (.medfloat32, 0, 0.01, "72010000", .number(3.7)),
        (.medfloat32, 0, 1, "ffff7f00", nil),                   // NaN
        (.medfloat32, 0, 1, "00008000", nil),                   // NRes
        (.medfloat32, 0, 1, "feff7f00", nil),                   // +INFINITY
        (.medfloat32, 0, 1, "02008000", nil),                   // -INFINITY
        (.medfloat32, 0, 1, "01008000", nil),                   // reserved
        (.medfloat32, 0, 1, "6e0100", nil),                     // too short
    ]

    @Test(arguments: table.indices)
    func decodes(_ i: Int) throws {
        let (type, offset, scale, hex, expected) = Self.table[i]
        let decoding = try ValueDecoding(type: type, offset: offset, scale: scale)
        let measurement = decoding.measurement(bytes(hex), unit: "u")
        #expect(measurement?.value == expected, "\(type) at \(offset) × \(scale) of \(hex)")
        if expected != nil { #expect(measurement?.unit == "u") }
    }

    @Test(arguments: medical.indices)
    func decodesMedicalFloats(_ i: Int) throws {
        let (type, offset, scale, hex, expected) = Self.medical[i]
        let decoding = try ValueDecoding(type: type, offset: offset, scale: scale)
        #expect(decoding.measurement(bytes(hex), unit: "°C")?.value == expected, "\(type) at \(offset) × \(scale) of \(hex)")
    }

    /// Bit fields: (type, mask, shift, scale, value in hex, what it decodes as).
    static let bits: [(ValueDecoding.FieldType, Int?, Int?, Double, String, SensorValue?)] = [
        (.uint8, 0b110, 1, 1, "1648", .integer(3)),             // 2A37 flags 0x16: sensor contact detected
        (.uint8, 0b1, nil, 1, "1648", .integer(0)),             // ... and a uint8 heart rate
        (.uint8, nil, 4, 1, "f0", .integer(15)),                // the high nibble
        (.uint16le, 0x0ff0, 4, 1, "3412", .integer(0x23)),      // 0x1234: the middle byte
        (.uint16le, 0x03ff, nil, 0.1, "ff03", .number(102.3)),  // masked, then scaled
        (.uint32be, 0x8000_0000, 31, 1, "80000001", .integer(1)),
        (.uint16le, 0x0ff0, 4, 1, "34", nil),                   // too short
    ]

    @Test(arguments: bits.indices)
    func decodesBitFields(_ i: Int) throws {
        let (type, mask, shift, scale, hex, expected) = Self.bits[i]
        let decoding = try ValueDecoding(type: type, scale: scale, mask: mask, shift: shift)
        #expect(decoding.measurement(bytes(hex), unit: nil)?.value == expected, "\(type) & \(mask ?? -1) >> \(shift ?? 0) of \(hex)")
    }

    @Test(arguments: [
        (ValueDecoding.FieldType.sint8, 1, nil, "unsigned integer"), (.utf8, nil, 1, "unsigned integer"),
        (.medfloat16, 1, nil, "unsigned integer"), (.uint8, 256, nil, "mask must be from 1 to 255"),
        (.uint8, 0, nil, "mask must be"), (.uint16le, -1, nil, "mask must be from 1 to 65535"),
        (.uint8, nil, 8, "shift must be from 0 to 7"), (.uint24be, 1, -1, "shift must be from 0 to 23"),
    ] as [(ValueDecoding.FieldType, Int?, Int?, String)])
    func refusesBitFields(_ type: ValueDecoding.FieldType, _ mask: Int?, _ shift: Int?, _ fragment: String) {
        #expect {
            try ValueDecoding(type: type, mask: mask, shift: shift)
        } throws: { error in
            (error as? ValueDecoding.Invalid)?.description.contains(fragment) == true
        }
    }

    @Test func saysWhyAValueHasNoMeasurement() throws {
        let decoding = try ValueDecoding(type: .medfloat32, offset: 1)
        #expect(decoding.whyNoMeasurement(bytes("006e0100")).contains("too short for medfloat32 at offset 1"))
        #expect(decoding.whyNoMeasurement(bytes("00ffff7f00")).contains("is no number"))
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
