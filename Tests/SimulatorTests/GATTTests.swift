import BLE
import DBus
import Testing
@testable import Simulator

@Suite(.serialized) struct GATTTests {
    @Test("ReadValue answers the value and signals it as Value first, like bluetoothd's cache")
    func readUpdatesTheCache() async throws {
        let sim = try await Sim.connected([Sim.hr, Sim.serial])
        defer { sim.close() }
        let battery = try await sim.characteristic(Sim.hr, "2A19")
        #expect(try await sim.managedObjects()[ObjectPath(battery)!]?[Interface.characteristic]?["Value"] == nil)
        let mark = sim.mark
        let value = try await sim.read(battery)
        #expect(value == [100])
        #expect(!sim.signals(after: mark) { $0.changes(battery, Interface.characteristic, "Value", .bytes([100])) }.isEmpty)
        #expect(try await sim.property(battery, Interface.characteristic, "Value") == .bytes([100]))
        let manufacturer = try await sim.characteristic(Sim.hr, "2A29")
        #expect(try await sim.read(manufacturer) == Array("gattway simulator".utf8))
        #expect(try await sim.read(manufacturer, offset: 8) == Array("simulator".utf8))
        await expectError("org.bluez.Error.InvalidArguments", "Invalid offset") { _ = try await sim.read(manufacturer, offset: 40) }
    }

    @Test func writeThenReadBackAndEchoAsNotification() async throws {
        let sim = try await Sim.connected([Sim.hr, Sim.serial])
        defer { sim.close() }
        let fifo = try await sim.characteristic(Sim.serial, "FFE1")
        #expect(try await sim.property(fifo, Interface.characteristic, "MTU") == .uint16(185))
        try await sim.write(fifo, Array("hello".utf8), type: "request")
        #expect(try await sim.read(fifo) == Array("hello".utf8))
        try await sim.write(fifo, Array("quiet".utf8), type: "command")
        #expect(try await sim.read(fifo) == Array("quiet".utf8))

        try await sim.call(fifo, Interface.characteristic, "StartNotify")
        #expect(try await sim.property(fifo, Interface.characteristic, "Notifying") == .bool(true))
        var mark = sim.mark
        try await sim.write(fifo, Array("ping".utf8), type: "request")
        try await sim.signal(after: mark) { $0.changes(fifo, Interface.characteristic, "Value", .bytes(Array("ping".utf8))) }
        mark = sim.mark
        try await sim.write(fifo, Array("pong".utf8))  // no type: write request, from the flags
        try await sim.signal(after: mark) { $0.changes(fifo, Interface.characteristic, "Value", .bytes(Array("pong".utf8))) }
        // A command longer than MTU-3 cannot be sent.
        await expectError("org.bluez.Error.Failed", "Failed to initiate write") {
            try await sim.write(fifo, Array(repeating: 0x41, count: 183), type: "command")
        }
        // Long writes go through (prepare/execute) up to 512 bytes.
        try await sim.write(fifo, Array(repeating: 0x42, count: 300), type: "request")
        await expectError("org.bluez.Error.InvalidArguments", "Invalid Length") {
            try await sim.write(fifo, Array(repeating: 0x43, count: 513), type: "request")
        }
        await expectError("org.bluez.Error.InvalidArguments", "Invalid offset") {
            try await sim.write(fifo, [1], type: "request", offset: 400)
        }
    }

    @Test func heartRateNotificationsArriveAsBroadcastValueChanges() async throws {
        let sim = try await Sim.connected([Sim.hr, Sim.serial])
        defer { sim.close() }
        let measurement = try await sim.characteristic(Sim.hr, "2A37")
        // A client that is not the subscriber sees the notifications too: they are broadcast.
        let mark = sim.mark
        let subscriber = try Connection(address: sim.bus.address)
        defer { subscriber.close() }
        try await sim.call(measurement, Interface.characteristic, "StartNotify", from: subscriber)
        try await sim.signal(after: mark) { $0.changes(measurement, Interface.characteristic, "Notifying", .bool(true)) }
        let first = try await sim.signal(after: mark, timeout: .seconds(3)) { $0.changes(measurement, Interface.characteristic, "Value") }
        let value = try #require(first.body[1].stringDictionary?["Value"]?.bytes)
        #expect(value.count == 2 && value[0] == 0x06 && (60...90).contains(value[1]))
    }

    @Test("ATT errors become bluetoothd's D-Bus errors", arguments: [
        (0x02, "org.bluez.Error.NotPermitted", "Read not permitted"),
        (0x03, "org.bluez.Error.NotPermitted", "Write not permitted"),
        (0x05, "org.bluez.Error.NotPermitted", "Not paired"),
        (0x06, "org.bluez.Error.NotSupported", "Operation is not supported"),
        (0x07, "org.bluez.Error.InvalidArguments", "Invalid offset"),
        (0x08, "org.bluez.Error.NotAuthorized", "Operation Not Authorized"),
        (0x0C, "org.bluez.Error.NotPermitted", "Not paired"),
        (0x0D, "org.bluez.Error.InvalidArguments", "Invalid Length"),
        (0x0E, "org.bluez.Error.Failed", "Operation failed with ATT error: 0x0e"),
        (0x0F, "org.bluez.Error.NotPermitted", "Not paired"),
        (0x11, "org.bluez.Error.Failed", "Operation failed with ATT error: 0x11"),
        (0x80, "org.bluez.Error.Failed", "Operation failed with ATT error: 0x80"),
    ])
    func attErrorTexts(code: Int, name: String, message: String) async throws {
        let sim = try await Sim.connected([Sim.hr])
        defer { sim.close() }
        try await sim.setFault(Sim.hr, #"{"attErrors": [{"uuid": "2A38", "operation": "read", "code": \#(code)}]}"#)
        let location = try await sim.characteristic(Sim.hr, "2A38")
        await expectError(name, message) { _ = try await sim.read(location) }
        // The mapping is bluetoothd's own (one table for every ATT error).
        #expect(BlueZError.att(ATTErrorCode(rawValue: UInt8(code))) == BusError(name: name, message: message))
    }

    @Test func errorsForWhatTheCharacteristicCannotDo() async throws {
        let sim = try await Sim.connected([Sim.hr, Sim.serial])
        defer { sim.close() }
        let measurement = try await sim.characteristic(Sim.hr, "2A37")
        let location = try await sim.characteristic(Sim.hr, "2A38")
        let control = try await sim.characteristic(Sim.hr, "2A39")
        let battery = try await sim.characteristic(Sim.hr, "2A19")
        // The peer refuses a read of a notify-only characteristic.
        await expectError("org.bluez.Error.NotPermitted", "Read not permitted") { _ = try await sim.read(measurement) }
        // Without a type bluetoothd finds no write procedure; a request reaches the peer, which refuses it.
        await expectError("org.bluez.Error.NotSupported", "Operation is not supported") { try await sim.write(battery, [1]) }
        await expectError("org.bluez.Error.NotPermitted", "Write not permitted") { try await sim.write(battery, [1], type: "request") }
        await expectError("org.bluez.Error.NotSupported", "Operation is not supported") { try await sim.write(battery, [1], type: "fast") }
        // The control point takes only 01.
        try await sim.write(control, [0x01])
        await expectError("org.bluez.Error.Failed", "Operation failed with ATT error: 0x80") { try await sim.write(control, [0x02]) }
        // Notifications need notify or indicate; sessions are per client.
        await expectError("org.bluez.Error.NotSupported", "Operation is not supported") {
            try await sim.call(location, Interface.characteristic, "StartNotify")
        }
        await expectError("org.bluez.Error.Failed", "No notify session started") {
            try await sim.call(battery, Interface.characteristic, "StopNotify")
        }
        await expectError("org.bluez.Error.NotSupported", "Operation is not supported") {
            try await sim.call(battery, Interface.characteristic, "AcquireNotify", [.stringVariantDictionary([])])
        }
        // The CCCD belongs to StartNotify.
        let cccd = try await sim.descriptor(Sim.hr, "2902")
        await expectError("org.bluez.Error.NotPermitted", "Write not permitted") { try await sim.write(cccd, [1, 0]) }
        #expect(try await sim.read(cccd) == [0, 0])
        // Options of the wrong type.
        await expectError("org.bluez.Error.InvalidArguments", "Invalid arguments in method call") {
            try await sim.call(battery, Interface.characteristic, "ReadValue", [.stringVariantDictionary([("offset", .string("0"))])])
        }
    }

    @Test("StartNotify sessions are per client: Notifying until the last leaves")
    func notifySessionsPerClient() async throws {
        let sim = try await Sim.connected([Sim.hr, Sim.serial])
        defer { sim.close() }
        let battery = try await sim.characteristic(Sim.hr, "2A19")
        let a = try Connection(address: sim.bus.address)
        let b = try Connection(address: sim.bus.address)
        defer { a.close(); b.close() }
        _ = try await sim.control("ResetCounters", [])
        let mark = sim.mark
        try await sim.call(battery, Interface.characteristic, "StartNotify", from: a)
        try await sim.call(battery, Interface.characteristic, "StartNotify", from: b)
        try await sim.call(battery, Interface.characteristic, "StartNotify", from: b)  // again: success
        #expect(sim.signals(after: mark) { $0.changes(battery, Interface.characteristic, "Notifying") }.count == 1)
        #expect(try await sim.control("CallCount", [.string("StartNotify"), .string(battery)]) == [.uint32(3)])
        #expect(try await sim.cccdValue(Sim.hr) == [1, 0])

        try await sim.call(battery, Interface.characteristic, "StopNotify", from: a)
        #expect(try await sim.property(battery, Interface.characteristic, "Notifying") == .bool(true))
        let leave = sim.mark
        b.close()
        try await sim.signal(after: leave) { $0.changes(battery, Interface.characteristic, "Notifying", .bool(false)) }
    }

    @Test("StartNotify while disconnected succeeds and takes effect on the next connection")
    func notifyWhileDisconnected() async throws {
        let sim = try await Sim.connected([Sim.serial])
        defer { sim.close() }
        let fifo = try await sim.characteristic(Sim.serial, "FFE1")
        try await sim.call(Sim.devicePath(Sim.serial), Interface.device, "Disconnect")
        try await sim.call(fifo, Interface.characteristic, "StartNotify")
        #expect(try await sim.property(fifo, Interface.characteristic, "Notifying") == .bool(false))
        // A second StartNotify from the same client is still waiting for the link.
        await expectError("org.bluez.Error.InProgress", "In Progress") { try await sim.call(fifo, Interface.characteristic, "StartNotify") }
        let mark = sim.mark
        try await sim.connect(Sim.serial)
        try await sim.signal(after: mark) { $0.changes(fifo, Interface.characteristic, "Notifying", .bool(true)) }
        let echo = sim.mark
        try await sim.write(fifo, [0x2A], type: "command")
        try await sim.signal(after: echo) { $0.changes(fifo, Interface.characteristic, "Value", .bytes([0x2A])) }
    }

    @Test func duplicateServicesAreExportedSeparately() async throws {
        let sim = try await Sim.connected([Sim.hr, Sim.serial])
        defer { sim.close() }
        let prefix = Sim.devicePath(Sim.serial) + "/"
        let information = try await sim.managedObjects().filter {
            $0.key.rawValue.hasPrefix(prefix) && $0.value[Interface.service]?["UUID"] == .string("0000180a-0000-1000-8000-00805f9b34fb")
        }
        #expect(information.count == 2)
    }
}

extension Sim {
    /// The heart-rate device's battery CCCD, read through bluetoothd.
    func cccdValue(_ address: String) async throws -> [UInt8] {
        let battery = try await characteristic(address, "2A19")
        let cccd = try await managedObjects().keys.map(\.rawValue).first { $0.hasPrefix(battery + "/desc") }
        return try await read(try #require(cccd))
    }
}
