import Testing

@testable import ESPHomeAPI

/// A message with a field of every type the codec writes (the API's own messages have no
/// double, fixed64 or 64-bit signed field), so that each writer, reader and table entry is held
/// to python's bytes. Its .proto is in make-vectors.py.
struct AllTypes: TabledMessage {
    var i32: Int32 = 0
    var i64: Int64 = 0
    var u32: UInt32 = 0
    var u64: UInt64 = 0
    var s32: Int32 = 0
    var s64: Int64 = 0
    var b = false
    var f32: UInt32 = 0
    var f64: UInt64 = 0
    var f: Float = 0
    var d: Double = 0
    var s = ""
    var by: [UInt8] = []
    var ru32: [UInt32] = []
    var ru64: [UInt64] = []
    var inner: Nested?
    var rs: [String] = []
    var rn: [Nested] = []

    struct Nested: TabledMessage {
        var u32: UInt32 = 0
        init() {}
        init(u32: UInt32) { self.u32 = u32 }
        static var fields: [Field<Self>] { [.uint32(1, \.u32)] }
    }

    init() {}
    init(i32: Int32 = 0, i64: Int64 = 0, u32: UInt32 = 0, u64: UInt64 = 0, s32: Int32 = 0, s64: Int64 = 0, b: Bool = false,
         f32: UInt32 = 0, f64: UInt64 = 0, f: Float = 0, d: Double = 0, s: String = "", by: [UInt8] = [],
         ru32: [UInt32] = [], ru64: [UInt64] = [], inner: Nested? = nil, rs: [String] = [], rn: [Nested] = []) {
        (self.i32, self.i64, self.u32, self.u64, self.s32, self.s64, self.b) = (i32, i64, u32, u64, s32, s64, b)
        (self.f32, self.f64, self.f, self.d, self.s, self.by) = (f32, f64, f, d, s, by)
        (self.ru32, self.ru64, self.inner, self.rs, self.rn) = (ru32, ru64, inner, rs, rn)
    }

    static var fields: [Field<Self>] {
        [.int32(1, \.i32), .int64(2, \.i64), .uint32(3, \.u32), .uint64(4, \.u64), .sint32(5, \.s32), .sint64(6, \.s64),
         .bool(7, \.b), .fixed32(8, \.f32), .fixed64(9, \.f64), .float(10, \.f), .double(11, \.d), .string(12, \.s),
         .bytes(13, \.by), .packedUInt32(14, \.ru32), .packedUInt64(15, \.ru64), .message(16, \.inner), .strings(17, \.rs),
         .messages(18, \.rn)]
    }

    /// Floats by their bits (-0.0 is not 0.0 here).
    static func == (a: AllTypes, b: AllTypes) -> Bool {
        a.serialized() == b.serialized()
    }
}

struct ProtobufTests {
    /// `make-vectors.py scalars` printed these rows (python's protobuf, the message built there
    /// with descriptor_pb2).
    typealias Nested = AllTypes.Nested

    static let vectors: [(AllTypes, String)] = [
        (AllTypes(),
         ""),
        (AllTypes(i32: -1, i64: -2, u32: .max, u64: .max, s32: -3, s64: .min, b: true),
         "08ffffffffffffffffff0110feffffffffffffffff0118ffffffff0f20ffffffffffffffffff01280530ffffffffffffffffff013801"),
        (AllTypes(i32: .max, i64: .max, u32: 300, u64: 1 << 35, s32: .min, s64: 64),
         "08ffffffff0710ffffffffffffffff7f18ac022080808080800128ffffffff0f308001"),
        (AllTypes(f32: 0xDEADBEEF, f64: 0x0102030405060708, f: 1.5, d: -2.25),
         "45efbeadde490807060504030201550000c03f5900000000000002c0"),
        (AllTypes(f: -0.0, d: -0.0),
         "5500000080590000000000000080"),
        (AllTypes(s: "grüße ✓", by: [0, 255, 128]),
         "620b6772c3bcc39f6520e29c936a0300ff80"),
        (AllTypes(ru32: [0, 1, 300, .max], ru64: [1 << 63]),
         "72090001ac02ffffffff0f7a0a80808080808080808001"),
        (AllTypes(u32: 7, inner: Nested()),
         "1807820100"),
        (AllTypes(inner: Nested(u32: 5), rs: ["a", "", "ü"], rn: [Nested(), Nested(u32: 1)]),
         "82010208058a0101618a01008a0102c3bc9201009201020801"),
    ]

    @Test(arguments: vectors.indices)
    func everyScalarTypeIsWrittenAsPythonWritesIt(_ index: Int) throws {
        let (value, expected) = Self.vectors[index]
        #expect(value.serialized() == hex(expected))
        let read = try AllTypes(serialized: hex(expected))
        #expect(read == value)
        // Field by field too (== compares bytes): the readers give back the values.
        #expect((read.i32, read.i64, read.u32, read.u64, read.s32, read.s64) == (value.i32, value.i64, value.u32, value.u64, value.s32, value.s64))
        #expect(read.f.bitPattern == value.f.bitPattern && read.d.bitPattern == value.d.bitPattern)
        #expect(read.s == value.s && read.by == value.by && read.ru32 == value.ru32 && read.ru64 == value.ru64)
        #expect(read.inner?.u32 == value.inner?.u32 && read.rs == value.rs && read.rn.map(\.u32) == value.rn.map(\.u32))
    }

    @Test func unknownFieldsOfEveryWireTypeAreSkipped() throws {
        // Field 99 as varint, fixed64, length-delimited and fixed32 around a known field 3 (u32 = 5).
        let bytes = hex("98060198060a") + hex("99060102030405060708")
            + hex("9a0603616263") + hex("9d0601020304") + hex("1805")
        #expect(try AllTypes(serialized: bytes).u32 == 5)
    }

    @Test func aKnownFieldWithAnotherWireTypeIsSkippedLikeAnUnknownOne() throws {
        // u32 (field 3) sent length-delimited, then as it should be.
        #expect(try AllTypes(serialized: hex("1a0201021807")).u32 == 7)
        #expect(try AllTypes(serialized: hex("1a020102")).u32 == 0)
    }

    @Test func repeatedScalarsAreTakenUnpackedToo() throws {
        #expect(try AllTypes(serialized: hex("7001700270ac02")).ru32 == [1, 2, 300])
        #expect(try AllTypes(serialized: hex("7001720203047005")).ru32 == [1, 3, 4, 5])
    }

    /// proto3's rules for a field that comes twice: a scalar's last value wins, a message's
    /// occurrences merge.
    @Test func aScalarsLastValueWinsAndAMessageMerges() throws {
        #expect(try AllTypes(serialized: hex("18011802")).u32 == 2)
        #expect(try AllTypes(serialized: hex("8201020805820100")).inner?.u32 == 5)  // replaced, it would be 0
    }

    @Test(arguments: [
        ("1a", ProtobufError.truncated),                      // a tag and nothing
        ("1a05010203", .truncated),                          // a length beyond the end
        ("45010203", .truncated),                            // a fixed32 cut short
        ("18ffffffffffffffffffff01", .varintTooLong),        // eleven bytes
        ("1b", .unsupportedWireType(3)),                     // start group
        ("1e", .unsupportedWireType(6)),
        ("00", .badFieldNumber(0)),
        ("6202c328", .invalidUTF8(field: 12)),               // a string that is not UTF-8
    ])
    func malformedBytesAreAnErrorThatSaysWhat(_ input: String, _ error: ProtobufError) {
        #expect(throws: error) { try AllTypes(serialized: hex(input)) }
    }

    @Test func aHelloRequestOfAnotherVersionStillReads() throws {
        // aioesphomeapi's hello, with a field 9 a future client might add.
        let hello = try HelloRequest(serialized: hex("0a0d61696f657370686f6d6561706910011813") + hex("4801"))
        #expect(hello == HelloRequest(clientInfo: "aioesphomeapi", apiVersionMajor: 1, apiVersionMinor: 19))
    }
}
