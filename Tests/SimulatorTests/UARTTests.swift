import BLE
import DBus
import Testing
@testable import Simulator

/// The UART model over D-Bus: writes to rx fill a receive buffer that drains at its rate and
/// comes back on tx in pieces of MTU-3 bytes; writes without response overflow it, writes with
/// response wait for room; the stream; the control methods.
@Suite(.serialized) struct UARTTests {
    static let nusService = "6E400001-B5A3-F393-E0A9-E50E24DCCA9E"
    static let nusRX = "6E400002-B5A3-F393-E0A9-E50E24DCCA9E"
    static let nusTX = "6E400003-B5A3-F393-E0A9-E50E24DCCA9E"
    static let mchpService = "49535343-FE7D-4AE5-8FA9-9FAFD205E455"
    static let mchpTX = "49535343-1E4D-4BD9-BA61-23C647249616"
    static let mchpRX = "49535343-8841-43F4-A8D4-ECBE34729BB3"

    /// Sim NUS connected, its TX subscribed, and its UART set to `uart` (keys besides rx and tx).
    private func nus(_ uart: String? = nil, _ configuration: SimulatorConfiguration = .builtIn) async throws -> (Sim, rx: String, tx: String) {
        let sim = try await Sim.connected([Sim.nus], configuration)
        if let uart { try await sim.setUART(Sim.nus, #"{"rx": "\#(Self.nusRX)", "tx": "\#(Self.nusTX)", \#(uart)}"#) }
        let rx = try await sim.characteristic(Sim.nus, Self.nusRX)
        let tx = try await sim.characteristic(Sim.nus, Self.nusTX)
        try await sim.call(tx, Interface.characteristic, "StartNotify")
        return (sim, rx, tx)
    }

    /// Bytes that tell their place apart (a piece out of order or lost shows).
    private func pattern(_ count: Int, from start: Int) -> [UInt8] {
        (start..<start + count).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 / 251) }
    }

    /// Writes to `path` one after the other, of these sizes and write types, with bytes of
    /// `pattern`; returns all that was written.
    private func write(_ sim: Sim, _ path: String, _ writes: [(count: Int, type: String)]) async throws -> [UInt8] {
        var written: [UInt8] = []
        for (count, type) in writes {
            let bytes = pattern(count, from: written.count)
            try await sim.write(path, bytes, type: type)
            written += bytes
        }
        return written
    }

    @Test("the UART modules advertise their service, and offer its characteristics with MTU 247", arguments: [
        (Sim.nus, nusService, nusRX, ["write-without-response", "write"], nusTX, ["notify"]),
        (Sim.mchp, mchpService, mchpRX, ["write-without-response", "write"], mchpTX, ["notify"]),
        (Sim.hm10, "FFE0", "FFE1", ["read", "write-without-response", "write", "notify"], "FFE1",
         ["read", "write-without-response", "write", "notify"]),
    ])
    func builtInModules(address: String, service: String, rx: String, rxFlags: [String], tx: String, txFlags: [String]) async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        try await sim.discover([address])
        let device = Sim.devicePath(address)
        // Advertised, before any connection.
        #expect(try await sim.property(device, Interface.device, "UUIDs") == .strings([BluetoothUUID(service)!.uuidString]))
        try await sim.connect(address)
        let rxPath = try await sim.characteristic(address, rx)
        let txPath = try await sim.characteristic(address, tx)
        #expect(try await sim.property(rxPath, Interface.characteristic, "Flags") == .strings(rxFlags))
        #expect(try await sim.property(txPath, Interface.characteristic, "Flags") == .strings(txFlags))
        #expect(try await sim.property(rxPath, Interface.characteristic, "MTU") == .uint16(247))
        #expect(try await sim.uartStats(address) == UARTState.Counters())
    }

    @Test("what is written, with or without response, comes back on tx in order, in pieces of MTU-3 bytes",
          arguments: [(Sim.nus, nusRX, nusTX), (Sim.mchp, mchpRX, mchpTX), (Sim.hm10, "FFE1", "FFE1")])
    func echoInOrder(address: String, rx: String, tx: String) async throws {
        let sim = try await Sim.connected([address])
        defer { sim.close() }
        let rxPath = try await sim.characteristic(address, rx)
        let txPath = try await sim.characteristic(address, tx)
        try await sim.call(txPath, Interface.characteristic, "StartNotify")
        let mark = sim.mark
        // Commands as large as they can be (MTU-3), requests long writes (prepare/execute).
        let written = try await write(sim, rxPath, (0..<10).flatMap { i in
            [(244, "command")] + (i % 3 == 0 ? [(500, "request")] : [])
        })
        let echoed = try await sim.notified(txPath, after: mark, count: written.count)
        #expect(echoed == written)
        #expect(sim.pieces(txPath, after: mark).allSatisfy { $0.count <= 244 })
        #expect(try await sim.uartStats(address) == UARTState.Counters(received: UInt64(written.count), echoed: UInt64(written.count)))
    }

    @Test("a burst of writes without response beyond the buffer loses exactly the bytes that do not fit")
    func commandsOverflowTheBuffer() async throws {
        // Draining 1 byte a second: nothing drains during the burst.
        let (sim, rx, tx) = try await nus(#""bufferBytes": 1000, "drainBytesPerSecond": 1"#)
        defer { sim.close() }
        let mark = sim.mark
        let written = try await write(sim, rx, Array(repeating: (150, "command"), count: 8))
        #expect(try await sim.uartStats(Sim.nus) == UARTState.Counters(received: 1000, dropped: 200))
        // Drained fast now: what the buffer held, the first 1000 bytes (6 writes and 100 of the seventh).
        try await sim.setUART(Sim.nus, #"{"rx": "\#(Self.nusRX)", "tx": "\#(Self.nusTX)", "bufferBytes": 1000, "drainBytesPerSecond": 1000000}"#)
        #expect(try await sim.notified(tx, after: mark, count: 1000) == Array(written.prefix(1000)))
        // Notified in pieces of at most MTU-3 bytes. (Usually all of it drains in one step,
        // [244, 244, 244, 244, 24]; a step that came just after the one before, on a busy
        // machine, drained only what its few microseconds allowed, and a full unit run failed on
        // the exact list.)
        let pieces = sim.pieces(tx, after: mark).map(\.count)
        #expect(pieces.allSatisfy { $0 <= 244 } && pieces.contains(244) && pieces.reduce(0, +) == 1000, "\(pieces)")
        #expect(try await sim.uartStats(Sim.nus) == UARTState.Counters(received: 1000, dropped: 200, echoed: 1000))
    }

    @Test("writes with response never lose a byte: each is answered once its bytes are in, as the buffer drains")
    func requestsWaitForRoom() async throws {
        let (sim, rx, tx) = try await nus(#""bufferBytes": 1000, "drainBytesPerSecond": 10000"#)
        defer { sim.close() }
        let mark = sim.mark
        var written: [UInt8] = []
        var answered: [ContinuousClock.Instant] = []
        let start = ContinuousClock.now
        for _ in 0..<10 {
            let request = pattern(500, from: written.count)
            try await sim.write(rx, request, type: "request")
            answered.append(.now)
            written += request
        }
        // The first two fit at once; the other 4000 bytes had to wait for 10 000 bytes/s to make
        // room: the last answer came at least 0.4 s after the first byte was sent. (Counted from
        // the start, a bound no delay can break: from the second answer, a late second answer on
        // a busy machine shortened the wait it saw, and a full unit run failed so.)
        let waited = answered[9] - start
        #expect(waited >= .milliseconds(380), "\(waited)")
        #expect(answered[9] - start < .seconds(5))
        #expect(try await sim.notified(tx, after: mark, count: written.count) == written)
        #expect(try await sim.uartStats(Sim.nus) == UARTState.Counters(received: 5000, echoed: 5000))
    }

    @Test("while a write waits for room bluetoothd sends no other on the characteristic, and the echo needs a subscription")
    func aHeldWriteIsTheOnlyOne() async throws {
        let sim = try await Sim.connected([Sim.nus])
        defer { sim.close() }
        try await sim.setUART(Sim.nus, #"{"rx": "\#(Self.nusRX)", "tx": "\#(Self.nusTX)", "bufferBytes": 100, "drainBytesPerSecond": 1}"#)
        let rx = try await sim.characteristic(Sim.nus, Self.nusRX)
        _ = try await sim.control("ResetCounters", [])
        try await sim.write(rx, pattern(100, from: 0), type: "command")
        let held = Task { try await sim.write(rx, pattern(100, from: 100), type: "request") }
        try await sim.waitForCalls("WriteValue", rx, 2)
        await expectError("org.bluez.Error.InProgress", "In Progress") { try await sim.write(rx, [1], type: "command") }
        await expectError("org.bluez.Error.InProgress", "In Progress") { try await sim.write(rx, [1], type: "request") }
        // Room comes: the held write is answered once all of it is in, that is once the first
        // 100 bytes drained. Nobody had TX subscribed: nothing was echoed.
        try await sim.setUART(Sim.nus, #"{"rx": "\#(Self.nusRX)", "tx": "\#(Self.nusTX)", "bufferBytes": 100, "drainBytesPerSecond": 100000}"#)
        try await held.value
        #expect(try await sim.uartStats(Sim.nus) == UARTState.Counters(received: 200))
    }

    @Test("a write response held past ATT's timeout: the central gives the link up")
    func heldPastTheATTTimeout() async throws {
        var configuration = SimulatorConfiguration.builtIn
        configuration.adapter.attTimeoutMs = 300
        let (sim, rx, _) = try await nus(#""bufferBytes": 100, "drainBytesPerSecond": 1"#, configuration)
        defer { sim.close() }
        let device = Sim.devicePath(Sim.nus)
        let mark = sim.mark
        let start = ContinuousClock.now
        await expectError("org.bluez.Error.Failed", "Operation failed") { try await sim.write(rx, pattern(200, from: 0), type: "request") }
        #expect(ContinuousClock.now - start >= .milliseconds(290))
        try await sim.signal(after: mark) { $0.changes(device, Interface.device, "Connected", .bool(false)) }
        #expect(try await sim.uartStats(Sim.nus).received == 100)
    }

    @Test("the stream: numbered lines at its rate while notifications are on, on again after a reconnection")
    func stream() async throws {
        let sim = try await Sim.connected([Sim.nus])
        defer { sim.close() }
        try await sim.setUART(Sim.nus, #"{"rx": "\#(Self.nusRX)", "tx": "\#(Self.nusTX)", "streamBytesPerSecond": 3900}"#)
        let tx = try await sim.characteristic(Sim.nus, Self.nusTX)
        let mark = sim.mark
        try await sim.call(tx, Interface.characteristic, "StartNotify")
        let start = ContinuousClock.now
        try await Task.sleep(for: .seconds(1))  // the window the rate is measured over
        try await sim.call(tx, Interface.characteristic, "StopNotify")
        let elapsed = (ContinuousClock.now - start) / .seconds(1)
        let first = sim.notified(tx, after: mark)
        let rate = Double(first.count) / elapsed
        #expect(rate > 3900 * 0.75 && rate < 3900 * 1.25, "\(rate) bytes/s")
        #expect(sim.pieces(tx, after: mark).allSatisfy { $0.count <= 244 })
        #expect(try await sim.uartStats(Sim.nus) == UARTState.Counters(streamed: UInt64(first.count)))

        // Notifications on again after a link loss: the lines go on where they stopped.
        let again = sim.mark
        try await sim.call(tx, Interface.characteristic, "StartNotify")
        _ = try await sim.control("DropLink", [.string(Sim.nus)])
        let reconnected = sim.mark
        try await sim.connect(Sim.nus)
        _ = try await sim.notified(tx, after: reconnected, count: 100)
        try await sim.call(tx, Interface.characteristic, "StopNotify")
        let all = first + sim.notified(tx, after: again)
        let lines = all.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).dropLast()
        #expect(lines.count >= 100)
        for (n, line) in lines.enumerated() {
            #expect(Array(line) == Array(UARTState.line(n).dropLast()), "line \(n): \(String(decoding: line, as: UTF8.self))")
        }
        #expect(try await sim.uartStats(Sim.nus).streamed == UInt64(all.count))
    }

    @Test("SetUART makes a device a UART module and back; UARTStats and ResetUARTStats")
    func controlMethods() async throws {
        let sim = try await Sim.connected([Sim.serial])
        defer { sim.close() }
        let fifo = try await sim.characteristic(Sim.serial, "FFE1")
        try await sim.call(fifo, Interface.characteristic, "StartNotify")
        await expectError("io.gattway.Simulator1.Error.NoUART", "F0:00:00:00:00:02 has no UART") { _ = try await sim.uartStats(Sim.serial) }
        await expectError("io.gattway.Simulator1.Error.NoUART") { _ = try await sim.control("ResetUARTStats", [.string(Sim.serial)]) }
        await expectError("io.gattway.Simulator1.Error.UnknownDevice") { _ = try await sim.uartStats("F0:00:00:00:00:99") }

        // Sim Serial's plain echo gives way to the UART's: a full buffer drops, nothing comes back at once.
        try await sim.setUART(Sim.serial, #"{"rx": "ffe1", "tx": "ffe1", "bufferBytes": 10, "drainBytesPerSecond": 1}"#)
        let mark = sim.mark
        try await sim.write(fifo, pattern(20, from: 0), type: "command")
        #expect(try await sim.uartStats(Sim.serial) == UARTState.Counters(received: 10, dropped: 10))
        #expect(sim.pieces(fifo, after: mark).isEmpty)
        _ = try await sim.control("ResetUARTStats", [.string(Sim.serial)])
        #expect(try await sim.uartStats(Sim.serial) == UARTState.Counters())

        // echo false: drained, never sent back.
        try await sim.setUART(Sim.serial, #"{"rx": "ffe1", "tx": "ffe1", "echo": false, "drainBytesPerSecond": 100000}"#)
        try await sim.write(fifo, [1, 2, 3], type: "request")
        #expect(try await sim.uartStats(Sim.serial) == UARTState.Counters(received: 3))

        // No UART any more: writes echo as before.
        try await sim.setUART(Sim.serial, "")
        let plain = sim.mark
        try await sim.write(fifo, Array("hi".utf8), type: "request")
        try await sim.signal(after: plain) { $0.changes(fifo, Interface.characteristic, "Value", .bytes(Array("hi".utf8))) }
        await expectError("io.gattway.Simulator1.Error.NoUART") { _ = try await sim.uartStats(Sim.serial) }
    }

    @Test("SetUART refuses what the device cannot do", arguments: [
        (Sim.serial, #"{"rx": "ffe1"}"#, "uart: tx: required key is missing"),
        (Sim.serial, #"{"rx": "ffe1", "tx": "ffe1", "buffer": 10}"#, "uart: buffer: unknown key"),
        (Sim.serial, #"{"rx": "ffe1", "tx": "ffe1", "bufferBytes": 0}"#, "uart: bufferBytes: 0 is out of range 1...1048576"),
        (Sim.serial, #"{"rx": "ffe1", "tx": "ffe1", "drainBytesPerSecond": 0}"#, "uart: drainBytesPerSecond: 0 is out of range"),
        (Sim.serial, #"{"rx": "1234", "tx": "ffe1"}"#, "uart: rx: the device has no characteristic"),
        (Sim.hr, #"{"rx": "2a38", "tx": "2a37"}"#, "can be written neither with nor without response"),
        (Sim.hr, #"{"rx": "2a39", "tx": "2a38"}"#, "uart: tx: 00002a38-0000-1000-8000-00805f9b34fb can neither notify nor indicate"),
    ])
    func setUARTErrors(address: String, json: String, message: String) async throws {
        let sim = try await Sim.start()
        defer { sim.close() }
        do {
            try await sim.setUART(address, json)
            Issue.record("accepted: \(json)")
        } catch let error as BusError {
            #expect(error.name == "io.gattway.Simulator1.Error.InvalidArguments")
            #expect(error.message.contains(message), "\(error.message)")
        }
    }

    @Test("the model's steps: drained at the rate with fractions carried, the stream cut anywhere yet whole")
    func steps() {
        var uart = UARTState(SimulatorConfiguration.UART(rx: BluetoothUUID("ffe1")!, tx: BluetoothUUID("ffe1")!, bufferBytes: 300,
                                                         drainBytesPerSecond: 150, streamBytesPerSecond: 50))
        uart.takeCommand(Array(0..<200))
        uart.takeCommand(Array(200..<400).map { UInt8(truncatingIfNeeded: $0) })
        #expect(uart.counters == UARTState.Counters(received: 300, dropped: 100))
        var drained: [UInt8] = []
        var streamed: [UInt8] = []
        for _ in 0..<100 {
            let step = uart.step(seconds: 0.01, streaming: true)
            drained += step.drained
            streamed += step.streamed
        }
        #expect(drained.count == 150 || drained.count == 149)  // 100 × 1.5 bytes, as floating point adds up
        #expect(drained == (0..<drained.count).map { UInt8(truncatingIfNeeded: $0) })
        #expect(streamed.count == 50 || streamed.count == 49)
        #expect(streamed == Array((UARTState.line(0) + UARTState.line(1)).prefix(streamed.count)))
        #expect(String(decoding: UARTState.line(123), as: UTF8.self) == "uart 000123 abcdefghijklmnopqrstuvwxyz\n")
        // Not streaming: nothing saved up for later.
        _ = uart.step(seconds: 5, streaming: false)
        #expect(uart.step(seconds: 0.01, streaming: true).streamed.count <= 1)
    }
}

extension Sim {
    func setUART(_ address: String, _ json: String) async throws {
        _ = try await control("SetUART", [.string(address), .string(json)])
    }

    func uartStats(_ address: String) async throws -> UARTState.Counters {
        let values = try await control("UARTStats", [.string(address)]).map { value -> UInt64 in
            guard case .uint64(let n) = value else { return .max }
            return n
        }
        return UARTState.Counters(received: values[0], dropped: values[1], echoed: values[2], streamed: values[3])
    }

    /// The values notified on `path` after `mark`, one per notification.
    func pieces(_ path: String, after mark: Int) -> [[UInt8]] {
        signals(after: mark) { $0.changes(path, Interface.characteristic, "Value") }.map { $0.body[1].stringDictionary?["Value"]?.bytes ?? [] }
    }

    /// The bytes notified on `path` after `mark`, in order.
    func notified(_ path: String, after mark: Int) -> [UInt8] {
        pieces(path, after: mark).flatMap { $0 }
    }

    /// The bytes notified on `path` after `mark`, once there are at least `count`.
    func notified(_ path: String, after mark: Int, count: Int, timeout: Duration = .seconds(10),
                  _ sourceLocation: SourceLocation = #_sourceLocation) async throws -> [UInt8] {
        let deadline = ContinuousClock.now + timeout
        while true {
            let bytes = notified(path, after: mark)
            if bytes.count >= count { return bytes }
            guard ContinuousClock.now < deadline else {
                Issue.record("\(bytes.count) of \(count) bytes notified within \(timeout)", sourceLocation: sourceLocation)
                throw BusError.timedOut("notifications")
            }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    /// Waits until bluetoothd was asked `member` on `path` `count` times (a call sent from another task arrived).
    func waitForCalls(_ member: String, _ path: String, _ count: UInt32) async throws {
        let deadline = ContinuousClock.now + .seconds(5)
        while try await control("CallCount", [.string(member), .string(path)]) != [.uint32(count)] {
            guard ContinuousClock.now < deadline else { throw BusError.timedOut("\(member) on \(path)") }
            try await Task.sleep(for: .milliseconds(5))
        }
    }
}
