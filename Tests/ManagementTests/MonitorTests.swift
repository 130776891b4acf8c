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

    @Test func codesSayTheirNames() {
        #expect(Opcode.addAdvertisementPatternsMonitor.description == "Add Advertisement Patterns Monitor")
        #expect(Opcode(rawValue: 0x0053) == .removeAdvertisementMonitor)
        #expect(Status.invalidParameters.description == "Invalid Parameters (0x0d)")
    }
}

/// A command sent on the channel, answered by the test playing the kernel.
@Suite(.serialized) struct CommandTests {
    /// Reads one command the channel sent.
    static func read(_ kernel: Int32) -> [UInt8] {
        var watched = pollfd(fd: kernel, events: Int16(POLLIN), revents: 0)
        guard poll(&watched, 1, 10_000) == 1 else { return [] }
        var buffer = [UInt8](repeating: 0, count: 512)
        let count = recv(kernel, &buffer, buffer.count, 0)
        return count > 0 ? Array(buffer[..<count]) : []
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
        let sent = Self.read(kernel)
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
        #expect(Self.read(kernel) == [0x53, 0x00, 0x00, 0x00, 0x02, 0x00, 0x07, 0x00])
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
        _ = Self.read(kernel)
        _ = Self.read(kernel)
        channel.close()
        await #expect(throws: ChannelError.self) { try await waiting.value }
        await #expect(throws: ChannelError.self) {
            try await channel.command(.readAdvertisementMonitorFeatures, controller: ControllerIndex(0))
        }
    }
}
