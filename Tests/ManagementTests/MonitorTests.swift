import BLE
import Glibc
@testable import Management
import Testing

/// The advertisement monitor commands, and the channel's commands and answers.
@Suite struct MonitorTests {
    @Test func thePatternsForEveryAdvertisementEncodeAsTheKernelReadsThem() throws {
        let parameters = AdvertisementMonitor.addParameters(AdvertisementMonitor.everyAdvertisement)
        // The count, then 34 bytes a pattern: Flags (0x01) at offset 0, one byte, padded to 31.
        #expect(parameters.count == 1 + 4 * 34)
        #expect(parameters[0] == 4)
        #expect(Array(parameters[1..<5]) == [0x01, 0x00, 0x01, 0x02])
        #expect(parameters[5..<35].allSatisfy { $0 == 0 })
        #expect(AdvertisementMonitor.patterns(parsing: parameters) == AdvertisementMonitor.everyAdvertisement)
        // The lab's probe (Tests/e2e/lab/kernel_view.py) sent this one; the kernel took it.
        let lab = [1, 0x09, 0, 2] + Array("RB".utf8) + [UInt8](repeating: 0, count: 29)
        #expect(AdvertisementMonitor.patterns(parsing: lab) == [AdvertisementPattern(type: 0x09, value: Array("RB".utf8))!])
    }

    @Test(arguments: [
        ("no pattern", [0x00]),
        ("17 patterns", [0x11] + [UInt8](repeating: 0, count: 17 * 34)),
        ("short", [0x01, 0x01, 0x00, 0x01, 0x06]),
        ("empty value", [0x01, 0x01, 0x00, 0x00] + [UInt8](repeating: 0, count: 31)),
        ("past 31 bytes", [0x01, 0x01, 0x1E, 0x02] + [UInt8](repeating: 0, count: 31)),
        ("longer than 31", [0x01, 0x01, 0x00, 0x20] + [UInt8](repeating: 0, count: 31)),
    ] as [(String, [UInt8])])
    func patternsTheKernelRefusesDoNotParse(_ why: String, _ parameters: [UInt8]) {
        #expect(AdvertisementMonitor.patterns(parsing: parameters) == nil, "\(why)")
    }

    @Test func aPatternMustFitTheAdvertisement() {
        #expect(AdvertisementPattern(type: 0xFF, offset: 0, value: []) == nil)
        #expect(AdvertisementPattern(type: 0xFF, offset: 30, value: [1, 2]) == nil)
        #expect(AdvertisementPattern(type: 0xFF, offset: 29, value: [1, 2])?.description == "ff@29=0102")
    }

    @Test func theFeaturesAnswerRoundTrips() throws {
        // btmgmt monitor.features in the lab (kernel 6.1, btvirt): no offload, 32 handles, 16 patterns.
        let features = AdvertisementMonitorFeatures(maxHandles: 32, maxPatterns: 16, handles: [1, 3])
        #expect(hex(features.parameters) == "00000000" + "00000000" + "2000" + "10" + "0200" + "0100" + "0300")
        #expect(AdvertisementMonitorFeatures(parameters: features.parameters) == features)
        #expect(AdvertisementMonitorFeatures(parameters: features.parameters.dropLast()) == nil)
        #expect(AdvertisementMonitorFeatures(parameters: features.parameters + [0]) == nil)
        #expect(features.hasRoom)
        #expect(!AdvertisementMonitorFeatures(maxHandles: 2, maxPatterns: 16, handles: [1, 3]).hasRoom)
        #expect(AdvertisementMonitor.handle(parsing: AdvertisementMonitor.handleParameters(0x0102)) == 0x0102)
        #expect(AdvertisementMonitor.handle(parsing: [1]) == nil)
    }

    /// The kernel's answers, recorded in the lab (kernel 6.1, btvirt's controller, 2026-12-06):
    /// Add Advertisement Patterns Monitor's handle, then Read Advertisement Monitor Features
    /// after the socket that added it closed (the kernel keeps the monitor), then after its removal.
    @Test(arguments: [
        ("0100000005005200000100", Opcode.addAdvertisementPatternsMonitor, [UInt16](), UInt16(1)),
        ("010000001200510000000000000000000020001001000100", .readAdvertisementMonitorFeatures, [1], nil),
        ("0100000005005300000100", .removeAdvertisementMonitor, [], 1),
        ("01000000100051000000000000000000002000100000", .readAdvertisementMonitorFeatures, [], nil),
    ] as [(String, Opcode, [UInt16], UInt16?)])
    func theLabKernelsAnswersParse(_ frame: String, _ opcode: Opcode, _ handles: [UInt16], _ handle: UInt16?) throws {
        guard case .commandComplete(let answered, .success, let controller, let parameters) = try Event(parsing: try #require(bytes(hex: frame))) else {
            Issue.record("not a successful Command Complete: \(frame)")
            return
        }
        #expect(answered == opcode && controller == ControllerIndex(0))
        if let handle {
            #expect(AdvertisementMonitor.handle(parsing: parameters) == handle)
        } else {
            #expect(AdvertisementMonitorFeatures(parameters: parameters) == AdvertisementMonitorFeatures(maxHandles: 32, maxPatterns: 16, handles: handles))
        }
    }

    /// The kernel's refusals, recorded in the lab the same way: an unknown handle's removal is
    /// completed with Invalid Parameters (and the handle), a pattern past the 31 bytes is a
    /// Command Status of Invalid Parameters, an unknown controller one of Invalid Index.
    @Test(arguments: [
        ("01000000050053000d0700", Event.commandComplete(.removeAdvertisementMonitor, .invalidParameters, controller: ControllerIndex(0), parameters: [7, 0])),
        ("02000000030052000d", .commandStatus(.addAdvertisementPatternsMonitor, .invalidParameters, controller: ControllerIndex(0))),
        ("020009000300510011", .commandStatus(.readAdvertisementMonitorFeatures, .invalidIndex, controller: ControllerIndex(9))),
    ] as [(String, Event)])
    func theLabKernelsRefusalsParse(_ frame: String, _ expected: Event) throws {
        #expect(try Event(parsing: try #require(bytes(hex: frame))) == expected)
    }

    @Test func codesSayTheirNames() {
        #expect(Opcode.addAdvertisementPatternsMonitor.description == "Add Advertisement Patterns Monitor")
        #expect(Opcode(rawValue: 0x0053) == .removeAdvertisementMonitor)
        #expect(Status.invalidParameters.description == "Invalid Parameters (0x0d)")
    }
}

/// A command sent on the channel, answered by the test playing the kernel.
@Suite(.serialized) struct CommandTests {
    /// Reads one command the channel sent (within 10 s). It looks without blocking and yields
    /// between looks: a blocking wait would hold a thread of the cooperative pool, which the
    /// command's own task (and parallel tests) need.
    static func read(_ kernel: Int32) async -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: 512)
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            let count = recv(kernel, &buffer, buffer.count, Int32(MSG_DONTWAIT))
            if count > 0 { return Array(buffer[..<count]) }
            try? await Task.sleep(for: .milliseconds(2))
        }
        return []
    }

    static func complete(_ opcode: Opcode, _ controller: UInt16, status: Status = .success, _ parameters: [UInt8]) -> [UInt8] {
        Frame.encode(code: EventCode.commandComplete.rawValue, controller: ControllerIndex(controller),
                     parameters: [UInt8(opcode.rawValue), UInt8(opcode.rawValue >> 8), status.rawValue] + parameters)
    }

    @Test func aCommandGetsItsAnswerAmongTheEvents() async throws {
        let (fd, kernel) = framePair()
        defer { close(kernel) }
        let received = Received()
        let channel = try ManagementChannel(reading: fd, controllers: [ControllerIndex(0)]) { received.add($0) }
        defer { channel.close() }
        async let answer = channel.command(.addAdvertisementPatternsMonitor, controller: ControllerIndex(0),
                                           parameters: AdvertisementMonitor.addParameters(AdvertisementMonitor.everyAdvertisement))
        let sent = await Self.read(kernel)
        #expect(sent.prefix(6) == [0x52, 0x00, 0x00, 0x00, 137, 0x00])
        // An answer for another controller is not this one's; an event comes between.
        write(kernel, Self.complete(.addAdvertisementPatternsMonitor, 1, [0x09, 0x00]))
        write(kernel, deviceFound(0, "C0:FF:EE:00:00:01").frame)
        write(kernel, Self.complete(.addAdvertisementPatternsMonitor, 0, [0x01, 0x00]))
        let got = try await answer
        #expect(got == ManagementChannel.Answer(status: .success, parameters: [0x01, 0x00]))
        #expect(received.wait(for: 1).count == 1)
        #expect(channel.counters.answers == 1)
        #expect(channel.counters.otherEvents == 1)
    }

    @Test func aFailedCommandStatusIsTheAnswerAndAPendingOneIsNot() async throws {
        let (fd, kernel) = framePair()
        defer { close(kernel) }
        let channel = try ManagementChannel(reading: fd, controllers: [ControllerIndex(0)]) { _ in }
        defer { channel.close() }
        async let answer = channel.command(.removeAdvertisementMonitor, controller: ControllerIndex(0),
                                           parameters: AdvertisementMonitor.handleParameters(7))
        #expect(await Self.read(kernel) == [0x53, 0x00, 0x00, 0x00, 0x02, 0x00, 0x07, 0x00])
        let status = { (s: Status) in Frame.encode(code: EventCode.commandStatus.rawValue, controller: ControllerIndex(0),
                                                    parameters: [0x53, 0x00, s.rawValue]) }
        write(kernel, status(.success))
        write(kernel, status(.invalidIndex))
        #expect(try await answer == ManagementChannel.Answer(status: .invalidIndex))
    }

    @Test func aCommandNotAnsweredEndsAtItsDeadlineAndOneWaitingWhenTheChannelClosesEndsThen() async throws {
        let (fd, kernel) = framePair()
        defer { close(kernel) }
        let channel = try ManagementChannel(reading: fd, controllers: [ControllerIndex(0)]) { _ in }
        await #expect(throws: ChannelError.self) {
            try await channel.command(.readAdvertisementMonitorFeatures, controller: ControllerIndex(0), timeout: .milliseconds(100))
        }
        let waiting = Task { try await channel.command(.readAdvertisementMonitorFeatures, controller: ControllerIndex(0), timeout: .seconds(30)) }
        _ = await Self.read(kernel)
        _ = await Self.read(kernel)
        channel.close()
        await #expect(throws: ChannelError.self) { try await waiting.value }
        await #expect(throws: ChannelError.self) {
            try await channel.command(.readAdvertisementMonitorFeatures, controller: ControllerIndex(0))
        }
    }
}
