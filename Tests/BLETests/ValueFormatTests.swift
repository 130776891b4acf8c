import BLE
import Testing

private let hello: [UInt8] = Array("hello".utf8)
private let allBytes: [UInt8] = Array(0...255)

@Suite struct ValueFormatTests {
    @Test(arguments: [
        (ValueFormat.hex, [], ""),
        (.hex, [0x0A, 0xB0, 0xFF, 0x00], "0ab0ff00"),
        (.base64, [], ""),
        (.base64, [0x01, 0x02, 0x03], "AQID"),
        (.base64, hello, "aGVsbG8="),
        (.base64, [0xFB, 0xFF], "+/8="),
        (.utf8, [], ""),
        (.utf8, Array("héllo ♥".utf8), "héllo ♥"),
        (.utf8, [0x61, 0xFF, 0x62], "a\u{FFFD}b"),
    ] as [(ValueFormat, [UInt8], String)])
    func encodes(format: ValueFormat, bytes: [UInt8], text: String) {
        #expect(format.encode(bytes) == text)
    }

    @Test(arguments: [
        (ValueFormat.hex, "", []),
        (.hex, "0a0B", [0x0A, 0x0B]),
        (.hex, "0x0a0b", [0x0A, 0x0B]),
        (.hex, "0X0A0B", [0x0A, 0x0B]),
        (.hex, "0x", []),
        (.hex, "0a 0b", [0x0A, 0x0B]),
        (.hex, "0a:0b:ff", [0x0A, 0x0B, 0xFF]),
        (.hex, " 0x 0A:0b\n", [0x0A, 0x0B]),
        (.hex, "00", [0x00]),
        (.base64, "", []),
        (.base64, "AQID", [0x01, 0x02, 0x03]),
        (.base64, "aGVsbG8=", hello),
        (.base64, "+/8=", [0xFB, 0xFF]),
        (.utf8, "héllo", Array("héllo".utf8)),
        (.utf8, "", []),
    ] as [(ValueFormat, String, [UInt8])])
    func decodes(format: ValueFormat, text: String, bytes: [UInt8]) throws {
        #expect(try format.decode(text) == bytes)
    }

    @Test(arguments: [
        (ValueFormat.hex, "0a0", "odd number of digits (3)"),
        (.hex, "0x0", "odd number of digits (1)"),
        (.hex, "0g", "only 0-9, a-f, A-F"),
        (.hex, "zz", "only 0-9, a-f, A-F"),
        (.hex, "0x0x0a", "only 0-9, a-f, A-F"),
        (.hex, "0a-0b", "only 0-9, a-f, A-F"),
        (.hex, "é0", "only 0-9, a-f, A-F"),
        (.base64, "aGVsbG8", "invalid base64"),
        (.base64, "a", "invalid base64"),
        (.base64, "aGVsbG8=!", "invalid base64"),
        (.base64, "-_8=", "invalid base64"),
        (.base64, " aGVsbG8=", "invalid base64"),
        (.base64, "aGVs bG8=", "invalid base64"),
    ] as [(ValueFormat, String, String)])
    func rejectsInvalidText(format: ValueFormat, text: String, message: String) throws {
        let error = try #require(#expect(throws: BLEError.self) { try format.decode(text) })
        #expect(error.code == .cb(.invalidParameters))
        #expect(error.message.contains(message), "\(error.message)")
    }

    @Test(arguments: ValueFormat.allCases, [[], [0x00], hello, Array("日本 ✓".utf8)])
    func roundTripsText(format: ValueFormat, bytes: [UInt8]) throws {
        #expect(try format.decode(format.encode(bytes)) == bytes)
    }

    @Test(arguments: [ValueFormat.hex, .base64])
    func binaryFormatsRoundTripEveryByte(format: ValueFormat) throws {
        #expect(try format.decode(format.encode(allBytes)) == allBytes)
    }

    @Test func rawValuesAreTheQueryNames() {
        #expect(ValueFormat.allCases.map(\.rawValue) == ["hex", "base64", "utf8"])
    }
}
