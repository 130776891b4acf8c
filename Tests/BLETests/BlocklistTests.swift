import BLE
import Testing

private func uuid(_ text: String) -> BluetoothUUID { BluetoothUUID(text)! }

private func parse(_ text: String) throws -> Blocklist { try Blocklist(parsing: text, source: "test") }

@Suite struct BlocklistParsingTests {
    @Test(arguments: [
        ("1812", "00001812-0000-1000-8000-00805f9b34fb", Blocklist.Exclusions.all),
        ("0x1812", "00001812-0000-1000-8000-00805f9b34fb", .all),
        ("00001812-0000-1000-8000-00805f9b34fb", "00001812-0000-1000-8000-00805f9b34fb", .all),
        ("00001530-1212-EFDE-1523-785FEABCD123", "00001530-1212-efde-1523-785feabcd123", .all),
        ("f000ffc004514000b000000000000000", "f000ffc0-0451-4000-b000-000000000000", .all),
        ("2a25 exclude-reads", "00002a25-0000-1000-8000-00805f9b34fb", .reads),
        ("2902 exclude-writes", "00002902-0000-1000-8000-00805f9b34fb", .writes),
        ("  2902\texclude-writes  ", "00002902-0000-1000-8000-00805f9b34fb", .writes),
        ("2a03 exclude-writes # a reason", "00002a03-0000-1000-8000-00805f9b34fb", .writes),
        ("1812# HID\r", "00001812-0000-1000-8000-00805f9b34fb", .all),
    ])
    func oneLineIsOneEntry(line: String, canonical: String, exclusions: Blocklist.Exclusions) throws {
        let entries = try parse(line).entries
        #expect(entries.count == 1)
        #expect(entries.first?.uuid.uuidString == canonical)
        #expect(entries.first?.exclusions == exclusions)
        #expect(entries.first?.sources == ["test:1"])
    }

    @Test func windowsLineEndsCountLinesAlike() throws {
        let list = try parse("# edited elsewhere\r\n1812\r\n\r\n2a25 exclude-reads\r\n")
        #expect(list.entries.map(\.sources) == [["test:2"], ["test:4"]])
        #expect(throws: BlocklistError(source: "test", line: 2, message: "\"18\" is not a UUID")) { try parse("1812\r\n18\r\n") }
    }

    @Test func commentsAndBlankLinesAreNotEntries() throws {
        #expect(try parse("").entries.isEmpty)
        #expect(try parse("# only a comment\n\n   \n\t# indented comment\n").entries.isEmpty)
    }

    @Test(arguments: [
        ("1812\nhid", 2, "\"hid\" is not a UUID"),
        ("\n\n180", 3, "\"180\" is not a UUID"),
        ("1812 exclude", 1, "after the UUID, only exclude-reads or exclude-writes may follow, not \"exclude\""),
        ("1812 EXCLUDE-READS", 1, "after the UUID, only exclude-reads or exclude-writes may follow, not \"EXCLUDE-READS\""),
        ("1812 exclude-reads exclude-writes", 1, "unexpected \"exclude-writes\" after exclude-reads"),
        ("# fine\n2a25 exclude-reads\n2a25,2a26", 3, "\"2a25,2a26\" is not a UUID"),
    ])
    func aBadLineIsNamedByItsNumber(text: String, line: Int, message: String) {
        #expect(throws: BlocklistError(source: "test", line: line, message: message)) { try parse(text) }
        #expect(BlocklistError(source: "ops.txt", line: line, message: message).description == "ops.txt:\(line): \(message)")
    }

    @Test func aUUIDListedTwiceGetsBothExclusionsAndBothSources() throws {
        var list = try parse("2a02 exclude-writes\n")
        list.add(try Blocklist(parsing: "\n0x2A02 exclude-reads\n", source: "ops"))
        #expect(list.entries.count == 1)
        #expect(list.entries[0].exclusions == .all)
        #expect(list.entries[0].sources == ["test:1", "ops:2"])
    }

    @Test func theStandardListParsesAndHoldsWhatWebBluetoothKeepsFromPages() throws {
        let standard = try Blocklist(parsing: Blocklist.standardText, source: "default")
        #expect(standard == Blocklist.standard)
        let table = Dictionary(uniqueKeysWithValues: standard.entries.map { ($0.uuid, $0.exclusions) })
        #expect(table[uuid("1812")] == .all)
        #expect(table[uuid("fffd")] == .all)
        #expect(table[uuid("fe59")] == .all)
        #expect(table[uuid("00001530-1212-efde-1523-785feabcd123")] == .all)
        #expect(table[uuid("f000ffc0-0451-4000-b000-000000000000")] == .all)
        #expect(table[uuid("2a25")] == .reads)
        #expect(table[uuid("2902")] == .writes)
        #expect(table[uuid("2903")] == .writes)
        #expect(table[uuid("180d")] == nil)
    }
}

@Suite struct BlocklistLookupTests {
    static let list = try! Blocklist(parsing: """
        1812
        2a25 exclude-reads
        2902 exclude-writes
        aaaa exclude-writes
        """, source: "test")

    @Test(arguments: [
        // (path from the service down, operation, allowed, the entry that forbids it)
        (["180d"], Blocklist.Operation.discovery, true, nil as String?),
        (["1812"], .discovery, false, "1812"),
        (["1812", "2a4d"], .discovery, false, "1812"),
        (["1812", "2a4d"], .read, false, "1812"),
        (["1812", "2a4d", "2902"], .discovery, false, "1812"),
        (["180a", "2a25"], .discovery, true, nil),
        (["180a", "2a25"], .read, false, "2a25 exclude-reads"),
        (["180a", "2a25"], .write, true, nil),
        (["180d", "2a37", "2902"], .read, true, nil),
        (["180d", "2a37", "2902"], .write, false, "2902 exclude-writes"),
        // A service's exclusion reaches what it contains.
        (["aaaa", "2a19"], .write, false, "aaaa exclude-writes"),
        (["aaaa", "2a19"], .read, true, nil),
        (["aaaa", "2a19"], .discovery, true, nil),
        // The attribute's own entry is named first.
        (["aaaa", "2a19", "2902"], .write, false, "2902 exclude-writes"),
    ])
    func anAttributeIsJudgedByItsPath(path: [String], operation: Blocklist.Operation, allowed: Bool, entry: String?) {
        let uuids = path.map(uuid)
        #expect(Self.list.allows(operation, path: uuids) == allowed)
        #expect(Self.list.entry(forbidding: operation, path: uuids)?.label == entry)
    }

    @Test func nothingIsForbiddenByAnEmptyList() {
        #expect(Blocklist().allows(.write, path: [uuid("1812"), uuid("2a4d")]))
    }

    // A heart-rate device with an HID service, a serial number and a CCCD.
    static let tree: [GATTService] = [
        GATTService(handle: 0x0010, uuid: uuid("180d"), isPrimary: true, characteristics: [
            GATTCharacteristic(handle: 0x0012, uuid: uuid("2a37"), serviceHandle: 0x0010, properties: [.notify], flags: ["notify"],
                               isNotifying: false, descriptors: [GATTDescriptor(handle: 0x0014, uuid: uuid("2902"))]),
            GATTCharacteristic(handle: 0x0015, uuid: uuid("2a25"), serviceHandle: 0x0010, properties: [.read], flags: ["read"],
                               isNotifying: false, descriptors: []),
        ]),
        GATTService(handle: 0x0020, uuid: uuid("1812"), isPrimary: true, characteristics: [
            GATTCharacteristic(handle: 0x0022, uuid: uuid("2a4d"), serviceHandle: 0x0020, properties: [.read, .notify], flags: ["read"],
                               isNotifying: false, descriptors: [GATTDescriptor(handle: 0x0024, uuid: uuid("2902"))]),
            GATTCharacteristic(handle: 0x0025, uuid: uuid("2a4d"), serviceHandle: 0x0020, properties: [.read], flags: ["read"],
                               isNotifying: false, descriptors: []),
        ]),
    ]

    @Test func hiddenAttributesAreLeftOutOfTheTree() {
        let visible = Self.list.visible(Self.tree)
        #expect(visible.map(\.uuid) == [uuid("180d")])
        #expect(visible[0].characteristics.map(\.handle) == [0x0012, 0x0015])
        #expect(visible[0].characteristics[0].descriptors.map(\.handle) == [0x0014])
    }

    @Test(arguments: [
        // (characteristic, operation, nil: allowed, else the code and message)
        (CharacteristicRef(.uuid(uuid("2a37"))), Blocklist.Operation.read, nil as String?),
        (CharacteristicRef(.uuid(uuid("2a25"))), .discovery, nil),
        (CharacteristicRef(.uuid(uuid("2a25"))), .read,
         "reading (or subscribing to) characteristic 0x0015 (2a25) is not allowed: the GATT blocklist has 2a25 exclude-reads"),
        // Hidden, by handle or by a UUID that names one or several hidden characteristics.
        (.handle(0x0025), .discovery, "characteristic 0x0025 is in the GATT blocklist: it is hidden from clients"),
        (CharacteristicRef(.uuid(uuid("2a4d"))), .read, "characteristic 2a4d is in the GATT blocklist: it is hidden from clients"),
        (CharacteristicRef(service: .uuid(uuid("1812")), .handle(0x0022)), .discovery,
         "characteristic 0x0022 in service 1812 is in the GATT blocklist: it is hidden from clients"),
    ])
    func characteristicsAreCheckedAsAddressed(ref: CharacteristicRef, operation: Blocklist.Operation, refusal: String?) {
        do {
            let c = try Self.list.characteristic(ref, in: Self.tree, for: operation)
            #expect(refusal == nil, "allowed \(c.label)")
        } catch {
            #expect(error.code == .cb(.uuidNotAllowed))
            #expect(error.message == refusal)
        }
    }

    @Test(arguments: [
        (AttributeSelector.uuid(uuid("180d")), nil as String?),
        (.uuid(uuid("1812")), "service 1812 is in the GATT blocklist: it is hidden from clients"),
        (.handle(0x0020), "service 0x0020 is in the GATT blocklist: it is hidden from clients"),
    ])
    func servicesAreCheckedAsAddressed(selector: AttributeSelector, refusal: String?) {
        do {
            let service = try Self.list.service(selector, in: Self.tree)
            #expect(refusal == nil, "allowed \(service.uuid)")
        } catch {
            #expect(error.code == .cb(.uuidNotAllowed))
            #expect(error.message == refusal)
        }
    }

    @Test func absentAttributesStayAbsent() {
        #expect(throws: BLEError(.invalidHandle, "no characteristic 0x0099 on this device")) {
            try Self.list.characteristic(.handle(0x0099), in: Self.tree, for: .read)
        }
        #expect(throws: BLEError(.invalidHandle, "no descriptor 0x0099 on this device")) {
            try Self.list.descriptor(.handle(0x0099), in: Self.tree, for: .read)
        }
    }

    @Test(arguments: [
        (DescriptorRef.handle(0x0014), Blocklist.Operation.read, nil as String?),
        (.handle(0x0014), .write, "writing descriptor 0x0014 (2902) is not allowed: the GATT blocklist has 2902 exclude-writes"),
        (.handle(0x0024), .read, "descriptor 0x0024 is in the GATT blocklist: it is hidden from clients"),
        // Only one 2902 is visible, so the UUID is not ambiguous.
        (DescriptorRef(.uuid(uuid("2902"))), .read, nil),
    ])
    func descriptorsAreCheckedAsAddressed(ref: DescriptorRef, operation: Blocklist.Operation, refusal: String?) {
        do {
            let d = try Self.list.descriptor(ref, in: Self.tree, for: operation)
            #expect(refusal == nil, "allowed \(d.label)")
            #expect(d.handle == 0x0014)
        } catch {
            #expect(error.code == .cb(.uuidNotAllowed))
            #expect(error.message == refusal)
        }
    }
}
