import BLE
import Management
import Testing

/// The parser's rules, case by case (the frames of Frames/spec.hex cover the formats).
@Suite struct ParserTests {
    /// Why a frame is dropped.
    @Test(arguments: [
        ([], FrameError.short(count: 0)),
        ([0x12, 0x00, 0x00, 0x00, 0x01], .short(count: 5)),
        ([0x13, 0x00, 0x00, 0x00, 0x02, 0x00, 0x06], .lengthMismatch(declared: 2, carried: 1)),
        ([0x13, 0x00, 0x00, 0x00, 0x00, 0x00, 0x06], .lengthMismatch(declared: 0, carried: 1)),
        ([0x02, 0x00, 0xFF, 0xFF, 0x02, 0x00, 0x01, 0x00], .malformed(.commandStatus, "2 bytes, fewer than an opcode and a status")),
        ([0x12, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00], .malformed(.deviceFound, "1 bytes, fewer than the fixed fields")),
        ([0x2F, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00], .malformed(.advertisementMonitorDeviceFound, "1 bytes, no room for a monitor handle")),
        ([0x0B, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00], .malformed(.deviceConnected, "1 bytes, fewer than the fixed fields")),
        ([0x0B, 0x00, 0x00, 0x00, 0x0E, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00],
         .malformed(.deviceConnected, "the data length says 0 bytes, 1 follow")),
        ([0x0C, 0x00, 0x00, 0x00, 0x07, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x01], .malformed(.deviceDisconnected, "7 bytes, not 8")),
        ([0x0C, 0x00, 0x00, 0x00, 0x08, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x03, 0x02], .malformed(.deviceDisconnected, "address type 3")),
    ] as [([UInt8], FrameError)])
    func aFrameThatDoesNotFitIsDropped(_ frame: [UInt8], _ error: FrameError) {
        #expect(throws: error) { try Event(parsing: frame) }
    }

    /// How advertising data splits; nil: malformed, dropped whole.
    @Test(arguments: [
        ([], [] as [String]?),
        ([0x02, 0x01, 0x06], ["01:06"]),
        ([0x01, 0x09], ["09:"]),
        ([0x02, 0x01, 0x06, 0x03, 0x03, 0xAA, 0xFE], ["01:06", "03:aafe"]),
        ([0x00], []),
        ([0x02, 0x01, 0x06, 0x00, 0x05, 0xFF], ["01:06"]),
        ([0x02, 0x01], nil),
        ([0x01], nil),
        ([0x02, 0x01, 0x06, 0xFF], nil),
    ] as [([UInt8], [String]?)])
    func advertisingDataSplitsIntoStructures(_ data: [UInt8], _ expected: [String]?) {
        let parsed = AdvertisingData(parsing: data)
        #expect(parsed?.structures.map { "\(hex($0.type, digits: 2)):\(hex($0.data))" } == expected)
        if let parsed {
            // The bytes kept are the structures, one after the other, and a prefix of the data.
            #expect(parsed.bytes == Array(data.prefix(parsed.bytes.count)))
            #expect(parsed.structures.reduce(0) { $0 + 2 + $1.data.count } == parsed.bytes.count)
        }
    }

    @Test func structuresBuildTheirBytes() {
        let data = AdvertisingData([(0x01, [0x06]), (0xFF, [0x59, 0x00, 0x01])])
        #expect(data.bytes == [0x02, 0x01, 0x06, 0x04, 0xFF, 0x59, 0x00, 0x01])
        #expect(data.structures.map(\.type) == [0x01, 0xFF])
        #expect(Array(data.structures[1].data) == [0x59, 0x00, 0x01])
    }

    /// Extended advertising reports up to 1650 bytes: structures of up to 254 data bytes each, all kept.
    @Test func longAdvertisingDataSplitsWhole() throws {
        let structures = (0..<6).map { (type: UInt8(0x20 + $0), data: [UInt8](repeating: UInt8($0), count: 254)) }
            + [(type: UInt8(0xFF), data: [UInt8](repeating: 0xAB, count: 112))]
        let found = DeviceFound(controller: ControllerIndex(0), address: BluetoothAddress("C0:FF:EE:00:00:01")!,
                                addressType: .leRandom, rssi: -40, advertisingData: AdvertisingData(structures))
        #expect(found.advertisingData.bytes.count == 1650)
        guard case .deviceFound(let parsed) = try Event(parsing: found.frame) else {
            Issue.record("not a device found")
            return
        }
        #expect(parsed.advertisingData.structures.map(\.type) == structures.map(\.type))
        #expect(parsed.advertisingData.structures.map { Array($0.data) } == structures.map(\.data))
    }

    /// The address comes least significant byte first; the RSSI is signed, 127 meaning none.
    @Test func aDeviceFoundReadsItsFields() throws {
        let frame: [UInt8] = [0x12, 0x00, 0x02, 0x00, 0x11, 0x00,
                              0x06, 0x05, 0x04, 0x03, 0x02, 0x01, 0x01, 0x80, 0x25, 0x00, 0x00, 0x80, 0x03, 0x00,
                              0x02, 0x01, 0x1A]
        guard case .deviceFound(let found) = try Event(parsing: frame) else {
            Issue.record("not a device found")
            return
        }
        #expect(found.controller == ControllerIndex(2))
        #expect(found.address == BluetoothAddress("01:02:03:04:05:06"))
        #expect(found.addressType == .lePublic)
        #expect(found.rssi == -128)
        #expect(found.flags == [.confirmName, .notConnectable, .scanResponse, DeviceFoundFlags(rawValue: 1 << 31)])
        #expect(found.monitor == nil)
        #expect(found.advertisingData.bytes == [0x02, 0x01, 0x1A])
    }

    /// What the simulator will send decodes to what it meant, monitor handle and missing RSSI included.
    @Test(arguments: [nil, 0, 7] as [UInt16?])
    func aDeviceFoundRoundTrips(_ monitor: UInt16?) throws {
        var found = deviceFound(1, "C0:FF:EE:00:00:01", rssi: nil, ad: [(0x01, [0x06]), (0x09, Array("RB-Periph".utf8))])
        found.monitor = monitor
        found.flags = .notConnectable
        #expect(try Event(parsing: found.frame) == .deviceFound(found))
    }

    /// The simulator's links up and down decode to what it meant.
    @Test func connectionEventsRoundTrip() throws {
        let address = BluetoothAddress("C0:FF:EE:00:00:01")!
        let connected = DeviceConnected(controller: ControllerIndex(2), address: address, addressType: .lePublic,
                                        flags: [.initiatedConnection, DeviceConnectedFlags(rawValue: 1 << 30)],
                                        advertisingData: AdvertisingData([(0x09, Array("RB-Periph".utf8))]))
        #expect(try Event(parsing: connected.frame) == .deviceConnected(connected))
        for reason in [DisconnectReason.unspecified, .timeout, .localHost, .remoteHost, .authenticationFailure, .localHostSuspend,
                       DisconnectReason(rawValue: 0xFF)] {
            let disconnected = DeviceDisconnected(controller: ControllerIndex(0), address: address, addressType: .leRandom, reason: reason)
            #expect(disconnected.frame.count == 14)
            #expect(try Event(parsing: disconnected.frame) == .deviceDisconnected(disconnected))
        }
    }

    /// The encoders that write into a kept buffer make the frames the values make.
    @Test func framesAppendToAKeptBuffer() {
        let found = deviceFound(0, "C0:FF:EE:00:00:01", rssi: -70, ad: [(0x01, [0x06]), (0xFF, [0x59, 0x00, 0x07])])
        var buffer: [UInt8] = [0xAA]
        DeviceFound.append(to: &buffer, controller: found.controller, address: found.address, addressType: found.addressType,
                           rssi: found.rssi, flags: found.flags) { ad in
            AdvertisingData.appendStructure(type: 0x01, to: &ad) { $0.append(0x06) }
            AdvertisingData.appendStructure(type: 0xFF, to: &ad) { $0 += [0x59, 0x00, 0x07] }
        }
        #expect(buffer == [0xAA] + found.frame)
    }

    @Test(arguments: [
        ("hci0", 0 as UInt16?), ("hci1", 1), ("hci65534", 65534), ("hci65535", nil), ("hci", nil), ("hci01", nil),
        ("hci+1", nil), ("eth0", nil), ("HCI0", nil),
    ] as [(String, UInt16?)])
    func adapterNamesAreControllerIndexes(_ name: String, _ index: UInt16?) {
        #expect(ControllerIndex(adapterName: name)?.rawValue == index)
    }

    @Test func codesSayTheirNames() {
        #expect(Status(rawValue: 0x14).description == "Permission Denied (0x14)")
        #expect(Status(rawValue: 0x99).description == "unknown status (0x99)")
        #expect(Opcode.readIndexList.description == "Read Controller Index List")
        #expect(Opcode(rawValue: 0x0023).description == "command 0x0023")
        #expect(EventCode(rawValue: 0x0013).description == "event 0x0013")
        #expect(EventCode.deviceDisconnected.description == "Device Disconnected")
        #expect(DisconnectReason.remoteHost.description == "terminated by the remote host (0x03)")
        #expect(DisconnectReason(rawValue: 0x2A).description == "unknown reason (0x2a)")
    }

    @Test func theOpeningAnswersParse() {
        #expect(ManagementVersion(parameters: [0x01, 0x16, 0x00]) == ManagementVersion(version: 1, revision: 22))
        #expect(ManagementVersion(parameters: [0x01, 0x16]) == nil)
        let supported = SupportedCommands(commands: [0x0003, 0x0004], events: [0x0004, 0x0012])
        #expect(supported.parameters == [0x02, 0x00, 0x02, 0x00, 0x03, 0x00, 0x04, 0x00, 0x04, 0x00, 0x12, 0x00])
        #expect(SupportedCommands(parameters: supported.parameters) == supported)
        #expect(supported.includesDeviceFound)
        #expect(SupportedCommands(parameters: supported.parameters.dropLast()) == nil)
        #expect(SupportedCommands(parameters: supported.parameters + [0]) == nil)
        #expect(SupportedCommands(parameters: [0xFF, 0xFF, 0xFF, 0xFF]) == nil)
        #expect(IndexList(parameters: [0x02, 0x00, 0x00, 0x00, 0x01, 0x00]) == IndexList([ControllerIndex(0), ControllerIndex(1)]))
        #expect(IndexList(parameters: [0x02, 0x00, 0x00, 0x00]) == nil)
        #expect(IndexList(parameters: []) == nil)
    }
}
