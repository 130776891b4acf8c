import BLE
import Dispatch
import Glibc
@testable import Management
import Synchronization
import Testing

/// What a channel's handler was given, and a wait for it (a semaphore per event: no sleeps).
final class Received: Sendable {
    private let events = Mutex<[ManagementEvent]>([])
    private let arrived = DispatchSemaphore(value: 0)

    func add(_ event: ManagementEvent) {
        events.withLock { $0.append(event) }
        arrived.signal()
    }

    /// The first `count` events, once they came (within 10 s; fewer if they did not).
    func wait(for count: Int) -> [ManagementEvent] {
        for _ in 0..<count where arrived.wait(timeout: .now() + 10) == .timedOut { break }
        return all
    }

    var all: [ManagementEvent] { events.withLock { $0 } }
}

/// What a channel told of the kernel's controllers, and a wait for it.
final class News: Sendable {
    private let news = Mutex<[ManagementChannel.ControllerNews]>([])
    private let arrived = DispatchSemaphore(value: 0)

    func add(_ item: ManagementChannel.ControllerNews) {
        news.withLock { $0.append(item) }
        arrived.signal()
    }

    /// Everything told once `count` came (within 10 s; fewer if they did not).
    func wait(for count: Int) -> [ManagementChannel.ControllerNews] {
        while all.count < count, arrived.wait(timeout: .now() + 10) == .success {}
        return all
    }

    var all: [ManagementChannel.ControllerNews] { news.withLock { $0 } }
}

/// The channel over a socketpair that keeps frames apart, as the kernel's socket does: the test
/// plays the kernel.
@Suite(.serialized) struct ChannelTests {
    @Test func deviceFoundEventsOfItsControllersReachTheHandlerAndTheRestIsCounted() throws {
        let (fd, kernel) = framePair()
        defer { close(kernel) }
        let received = Received()
        let channel = try ManagementChannel(reading: fd, controllers: [ControllerIndex(0)]) { received.add($0) }
        defer { channel.close() }
        let first = deviceFound(0, "C0:FF:EE:00:00:01", ad: [(0x01, [0x06]), (0x09, Array("RB-Periph".utf8))])
        let last = deviceFound(0, "C0:FF:EE:00:00:09", .lePublic, rssi: nil)
        var overrun = deviceFound(0, "C0:FF:EE:00:00:02").frame
        overrun[overrun.count - 3] = 0x09  // the AD structure claims more than there is
        for frame in [
            first.frame,
            deviceFound(1, "C0:FF:EE:00:00:03").frame,  // another controller
            deviceFound(0, "00:1A:7D:DA:71:13", .bredr).frame,  // a classic device
            [0x12, 0x00, 0x00, 0x00],  // shorter than a header
            Array(first.frame.dropLast()),  // truncated
            overrun,
            [0x13, 0x00, 0x00, 0x00, 0x02, 0x00, 0x06, 0x01],  // Discovering
            Frame.encode(code: 0x0001, controller: .none, parameters: [0x01, 0x00, 0x00, 0x01, 0x16, 0x00]),
            last.frame,
        ] {
            #expect(write(kernel, frame))
        }
        let events = received.wait(for: 3)
        #expect(events.map(\.address.description) == ["C0:FF:EE:00:00:01", "C0:FF:EE:00:00:02", "C0:FF:EE:00:00:09"])
        #expect(events.first == .deviceFound(first))
        #expect(events.dropFirst().first?.advertisingDataDropped == true)
        #expect(events.last == .deviceFound(last))
        var expected = ManagementChannel.Counters()
        expected.frames = 9
        expected.delivered = 3
        expected.badFrames = 2
        expected.droppedAdvertisingData = 1
        expected.otherControllers = 1
        expected.classicDevices = 1
        expected.otherEvents = 2
        #expect(channel.counters == expected)
    }

    /// Links up and down of LE devices are handed on as they came; a classic device's, another
    /// controller's and malformed ones are not.
    @Test func connectionEventsReachTheHandler() throws {
        let (fd, kernel) = framePair()
        defer { close(kernel) }
        let received = Received()
        let channel = try ManagementChannel(reading: fd, controllers: [ControllerIndex(0)]) { received.add($0) }
        defer { channel.close() }
        let device = BluetoothAddress("C0:FF:EE:00:00:01")!
        let connected = DeviceConnected(controller: ControllerIndex(0), address: device, addressType: .leRandom,
                                        flags: .initiatedConnection, advertisingData: AdvertisingData([(0x01, [0x06])]))
        let disconnected = DeviceDisconnected(controller: ControllerIndex(0), address: device, addressType: .leRandom, reason: .remoteHost)
        var otherController = disconnected
        otherController.controller = ControllerIndex(1)
        var classic = connected
        classic.addressType = .bredr
        for frame in [connected.frame, otherController.frame, classic.frame, Array(disconnected.frame.dropLast()), disconnected.frame] {
            #expect(write(kernel, frame))
        }
        #expect(received.wait(for: 2) == [.deviceConnected(connected), .deviceDisconnected(disconnected)])
        var expected = ManagementChannel.Counters()
        expected.frames = 5
        expected.delivered = 2
        expected.badFrames = 1
        expected.otherControllers = 1
        expected.classicDevices = 1
        #expect(channel.counters == expected)
    }

    @Test func theControllersInUseCanChange() throws {
        let (fd, kernel) = framePair()
        defer { close(kernel) }
        let received = Received()
        let channel = try ManagementChannel(reading: fd, controllers: [ControllerIndex(0)]) { received.add($0) }
        defer { channel.close() }
        channel.setControllers([ControllerIndex(1)])
        write(kernel, deviceFound(0, "C0:FF:EE:00:00:01").frame)
        write(kernel, deviceFound(1, "C0:FF:EE:00:00:02").frame)
        #expect(received.wait(for: 1).map(\.controller) == [ControllerIndex(1)])
        #expect(channel.counters.otherControllers == 1)
    }

    /// Index Added and Removed keep the kernel's controllers current, and so does the answer to
    /// `askControllers` (a failed one leaves them): each is told, after it was applied.
    @Test func theKernelsControllersAreKeptCurrent() throws {
        let (fd, kernel) = framePair()
        defer { close(kernel) }
        let news = News()
        let received = Received()
        let channel = try ManagementChannel(reading: fd, controllers: [ControllerIndex(0)], known: [ControllerIndex(0)],
                                            controllersChanged: { news.add($0) }) { received.add($0) }
        defer { channel.close() }
        #expect(channel.kernelControllers == [ControllerIndex(0)])
        write(kernel, IndexEvent.added(ControllerIndex(1)).frame)
        #expect(news.wait(for: 1) == [.index(.added(ControllerIndex(1)))])
        #expect(channel.kernelControllers == [ControllerIndex(0), ControllerIndex(1)])
        write(kernel, IndexEvent.removed(ControllerIndex(0)).frame)
        write(kernel, [0x04, 0x00, 0xFF, 0xFF, 0x00, 0x00])  // for no controller: dropped
        #expect(news.wait(for: 2).last == .index(.removed(ControllerIndex(0))))
        #expect(channel.kernelControllers == [ControllerIndex(1)])

        #expect(channel.askControllers())
        var command = [UInt8](repeating: 0, count: 16)
        #expect(recv(kernel, &command, command.count, 0) == 6)
        #expect(Array(command.prefix(6)) == Frame.command(.readIndexList))
        write(kernel, Frame.commandComplete(.readIndexList, .success, controller: .none,
                                           parameters: IndexList([ControllerIndex(0), ControllerIndex(2)]).parameters))
        #expect(news.wait(for: 3).last == .listed)
        #expect(channel.kernelControllers == [ControllerIndex(0), ControllerIndex(2)])
        write(kernel, Frame.commandComplete(.readIndexList, Status(rawValue: 0x03), controller: .none))
        #expect(news.wait(for: 4).last == .listed)
        #expect(channel.kernelControllers == [ControllerIndex(0), ControllerIndex(2)])

        // None of them is a device event.
        write(kernel, deviceFound(0, "C0:FF:EE:00:00:01").frame)
        #expect(received.wait(for: 1).count == 1)
        #expect(news.all.count == 4)
        var expected = ManagementChannel.Counters()
        expected.frames = 6
        expected.delivered = 1
        expected.badFrames = 1
        expected.controllerEvents = 4
        #expect(channel.counters == expected)
        channel.close()
        #expect(!channel.askControllers())
    }

    @Test func closeStopsTheThreadAndClosesTheSocket() throws {
        let (fd, kernel) = framePair()
        defer { close(kernel) }
        let received = Received()
        let channel = try ManagementChannel(reading: fd, controllers: [ControllerIndex(0)]) { received.add($0) }
        write(kernel, deviceFound(0, "C0:FF:EE:00:00:01").frame)
        #expect(received.wait(for: 1).count == 1)
        channel.close()
        // Closed when close returns; the hang-up is waited for (bounded) all the same: a process
        // another test spawns holds copies of every descriptor until its exec.
        #expect(hungUp(kernel, within: .seconds(5)))
        #expect(!write(kernel, deviceFound(0, "C0:FF:EE:00:00:02").frame))
        #expect(received.all.count == 1)
        channel.close()  // again: nothing
    }

    @Test func theHandlerMayCloseTheChannel() throws {
        let (fd, kernel) = framePair()
        defer { close(kernel) }
        let slot = Mutex<ManagementChannel?>(nil)
        let received = Received()
        let channel = try ManagementChannel(reading: fd, controllers: [ControllerIndex(0)]) { found in
            received.add(found)
            slot.withLock { $0 }?.close()
        }
        slot.withLock { $0 = channel }
        write(kernel, deviceFound(0, "C0:FF:EE:00:00:01").frame)
        write(kernel, deviceFound(0, "C0:FF:EE:00:00:02").frame)
        #expect(hungUp(kernel, within: .seconds(10)))
        #expect(received.all.count == 1)
        slot.withLock { $0 = nil }
    }

    @Test func theEndOfTheSocketIsReported() throws {
        let (fd, kernel) = framePair()
        let ended = Mutex<String?>(nil)
        let endedSignal = DispatchSemaphore(value: 0)
        let channel = try ManagementChannel(reading: fd, controllers: [ControllerIndex(0)], ended: { reason in
            ended.withLock { $0 = reason }
            endedSignal.signal()
        }) { _ in }
        close(kernel)
        #expect(endedSignal.wait(timeout: .now() + 10) == .success)
        #expect(ended.withLock { $0 } == "closed at the other end")
        channel.close()
    }
}

/// What `open` asks the kernel and how it reads the answers (the test answers in its place).
@Suite struct HandshakeTests {
    static let version = ManagementVersion(version: 1, revision: 22)
    static let trusted = SupportedCommands(commands: [0x0003, 0x0004, 0x0023], events: [0x0004, 0x0012, 0x002F])
    static let untrusted = SupportedCommands(commands: [0x0003, 0x0004], events: [0x0004, 0x0005])

    static func complete(_ opcode: Opcode, status: Status = .success, _ parameters: [UInt8]) -> [UInt8] {
        Frame.encode(code: EventCode.commandComplete.rawValue, controller: .none,
                     parameters: [UInt8(opcode.rawValue), UInt8(opcode.rawValue >> 8), status.rawValue] + parameters)
    }

    static func answers(_ supported: SupportedCommands) -> [[UInt8]] {
        [complete(.readVersion, version.parameters), complete(.readCommands, supported.parameters),
         complete(.readIndexList, IndexList([ControllerIndex(0), ControllerIndex(1)]).parameters)]
    }

    enum Outcome: Equatable { case opened(ManagementChannel.Kernel), notPermitted, unavailable(String) }

    /// Runs the handshake against `frames` (written before it starts); its outcome, and the
    /// commands it sent.
    static func run(_ frames: [[UInt8]], timeout: Duration = .seconds(10)) -> (Outcome, [[UInt8]]) {
        let (fd, kernel) = framePair()
        defer {
            close(fd)
            close(kernel)
        }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        for frame in frames { write(kernel, frame) }
        let outcome: Outcome = switch ManagementChannel.handshake(fd: fd, timeout: timeout) {
        case .success(let kernel): .opened(kernel)
        case .failure(.notPermitted): .notPermitted
        case .failure(.unavailable(let why)): .unavailable(why)
        }
        var sent: [[UInt8]] = []
        var buffer = [UInt8](repeating: 0, count: 64)
        while case let count = recv(kernel, &buffer, buffer.count, Int32(MSG_DONTWAIT)), count > 0 {
            sent.append(Array(buffer[..<count]))
        }
        return (outcome, sent)
    }

    @Test func aTrustedSocketOpensWithTheKernelsAnswers() {
        // A device heard and a bad frame before the answers are passed over.
        let noise = [deviceFound(0, "C0:FF:EE:00:00:01").frame, [0x01, 0x00]]
        let (outcome, sent) = Self.run(noise + Self.answers(Self.trusted))
        #expect(outcome == .opened(.init(version: Self.version, supported: Self.trusted,
                                          controllers: [ControllerIndex(0), ControllerIndex(1)])))
        #expect(sent == [[0x01, 0x00, 0xFF, 0xFF, 0x00, 0x00], [0x02, 0x00, 0xFF, 0xFF, 0x00, 0x00],
                         [0x03, 0x00, 0xFF, 0xFF, 0x00, 0x00]])
    }

    /// Newer kernels bind a socket without CAP_NET_ADMIN but never send it device-found events.
    @Test func anUntrustedSocketIsNotPermitted() {
        #expect(Self.run(Self.answers(Self.untrusted)).0 == .notPermitted)
    }

    @Test func aPermissionDeniedAnswerIsNotPermitted() {
        let denied = Frame.encode(code: EventCode.commandStatus.rawValue, controller: .none, parameters: [0x02, 0x00, 0x14])
        #expect(Self.run([Self.answers(Self.trusted)[0], denied]).0 == .notPermitted)
    }

    @Test func aMalformedAnswerIsUnavailable() {
        var answers = Self.answers(Self.trusted)
        answers[0] = Self.complete(.readVersion, [0x01, 0x16])
        #expect(Self.run(answers).0 == .unavailable("the kernel's answer to Read Management Version Information does not fit its format"))
    }

    @Test func aKernelThatDoesNotAnswerIsUnavailableAtTheDeadline() {
        let start = ContinuousClock.now
        let (outcome, _) = Self.run(Array(Self.answers(Self.trusted).prefix(2)), timeout: .milliseconds(200))
        #expect(outcome == .unavailable("the kernel did not answer Read Controller Index List within 0.2 seconds"))
        #expect(ContinuousClock.now - start >= .milliseconds(200))
    }

    @Test(arguments: [(EPERM, true), (EACCES, true), (EAFNOSUPPORT, false), (EPROTONOSUPPORT, false), (EBUSY, false)])
    func refusedCallsSayWhetherPermissionIsMissing(_ code: Int32, _ permission: Bool) {
        switch ManagementChannel.refusal("bind", code) {
        case .notPermitted(let why): #expect(permission, "\(why)")
        case .unavailable(let why): #expect(!permission, "\(why)")
        }
    }
}
