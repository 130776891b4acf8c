import BLE
import Glibc
import Synchronization
import Testing
@testable import GatewayCore
import GatewayTesting
@testable import SerialBridge

@Suite struct LineFramerTests {
    @Test func splitsOnNewlinesAndDropsTheCarriageReturnBeforeThem() {
        var framer = LineFramer(maxLine: 100)
        #expect(framer.feed(Array("one\r\ntw".utf8)) == [Array("one".utf8)])
        #expect(framer.feed(Array("o\n\nthree".utf8)) == [Array("two".utf8), []])
        #expect(framer.feed(Array("\n".utf8)) == [Array("three".utf8)])
    }

    @Test func aLineLongerThanTheMaximumGoesOutInPieces() {
        var framer = LineFramer(maxLine: 4)
        #expect(framer.feed(Array("abcdefghij".utf8)) == [Array("abcd".utf8), Array("efgh".utf8)])
        #expect(framer.feed(Array("\n".utf8)) == [Array("ij".utf8)])
        // Exactly the maximum, then its end: one line, no empty piece.
        #expect(framer.feed(Array("wxyz\n".utf8)) == [Array("wxyz".utf8)])
    }

    @Test func aCarriageReturnAloneStaysInTheLine() {
        var framer = LineFramer(maxLine: 10)
        #expect(framer.feed(Array("a\rb\n".utf8)) == [Array("a\rb".utf8)])
    }
}

@Suite struct SerialProfileTests {
    let device = BluetoothAddress("F0:00:00:00:00:01")!

    @Test func findsTheFirstKnownProfileTheDeviceHas() throws {
        let resolved = try SerialProfile.resolve(nil, in: FakeCentral().tree, device: device)
        #expect(resolved.profile.name == "hm10")
        #expect(resolved.rx.handle == 0x0032 && resolved.tx.handle == 0x0032)
    }

    @Test func aNamedProfileTheDeviceLacksIsAnInvalidHandle() {
        #expect(throws: BLEError.self) { try SerialProfile.resolve(SerialProfile.known[1], in: FakeCentral().tree, device: device) }
        do {
            _ = try SerialProfile.resolve(SerialProfile.known[1], in: FakeCentral().tree, device: device)
        } catch {
            #expect(error.code == .cb(.invalidHandle))
            #expect(error.message.contains("nordic"))
        }
    }

    @Test func aCustomProfileNamesItsCharacteristics() throws {
        let custom = try #require(try SerialProfile.named(nil, service: "ffe0", rx: "ffe1", tx: "ffe1"))
        #expect(custom.name == "custom")
        #expect(try SerialProfile.resolve(custom, in: FakeCentral().tree, device: device).rx.handle == 0x0032)
        // Not a UUID, half a pair, or a known name with characteristics: refused, with why.
        #expect(throws: BLEError.self) { try SerialProfile.named(nil, service: nil, rx: "nope", tx: "ffe1") }
        #expect(throws: BLEError.self) { try SerialProfile.named(nil, service: nil, rx: "ffe1", tx: nil) }
        #expect(throws: BLEError.self) { try SerialProfile.named("nordic", service: nil, rx: "ffe1", tx: "ffe1") }
        #expect(throws: BLEError.self) { try SerialProfile.named("hm-11", service: nil, rx: nil, tx: nil) }
        #expect(try SerialProfile.named(nil, service: nil, rx: nil, tx: nil) == nil)
        #expect(try SerialProfile.named("microchip", service: nil, rx: nil, tx: nil)?.name == "microchip")
    }
}

@Suite struct SerialPortOptionTests {
    @Test func parsesHostPortAddressAndOptions() throws {
        let plain = try SerialPort.Configuration(parsing: "127.0.0.1:7000=F0:00:00:00:00:02")
        #expect(plain.host == "127.0.0.1" && plain.port == 7000)
        #expect(plain.device == BluetoothAddress("F0:00:00:00:00:02"))
        #expect(plain.profile == nil && plain.onLinkLoss == .close && plain.writeOptions == .init())

        let all = try SerialPort.Configuration(parsing: "[::1]:7001=f0:00:00:00:00:0f,nordic,hold,mode=command,rate=2000")
        #expect(all.host == "::1" && all.port == 7001)
        #expect(all.profile?.name == "nordic" && all.onLinkLoss == .hold)
        #expect(all.writeOptions == SerialLink.WriteOptions(mode: .command, rate: 2000))

        let custom = try SerialPort.Configuration(parsing: "localhost:0=F0:00:00:00:00:02,service=ffe0,rx=ffe1,tx=ffe1")
        #expect(custom.profile == SerialProfile(name: "custom", service: BluetoothUUID("ffe0"), rx: BluetoothUUID("ffe1")!, tx: BluetoothUUID("ffe1")!))
    }

    @Test(arguments: [
        "7000=F0:00:00:00:00:02",              // no host
        "127.0.0.1=F0:00:00:00:00:02",         // no port
        "127.0.0.1:70000=F0:00:00:00:00:02",   // port out of range
        "127.0.0.1:7000",                      // no device
        "127.0.0.1:7000=F0:00:00:00:02",       // not an address
        "127.0.0.1:7000=F0:00:00:00:00:02,hm10,nordic",
        "127.0.0.1:7000=F0:00:00:00:00:02,speed=9600",
        "127.0.0.1:7000=F0:00:00:00:00:02,mode=fast",
        "127.0.0.1:7000=F0:00:00:00:00:02,rate=0",
        "127.0.0.1:7000=F0:00:00:00:00:02,rx=ffe1",
    ])
    func refusesWhatItCannotServe(_ text: String) {
        #expect(throws: BLEError.self) { try SerialPort.Configuration(parsing: text) }
        do {
            _ = try SerialPort.Configuration(parsing: text)
        } catch {
            #expect(error.code == .cb(.invalidParameters))
            #expect(error.message.contains("HOST:PORT=ADDRESS"))
        }
    }
}

/// The links over the fake central: its device F0:00:00:00:00:01 has an HM-10 FFE1 (0x0032,
/// written with or without response, notifying) and an MTU of 185.
@Suite struct SerialLinkTests {
    let central = FakeCentral()
    let gateway: Gateway
    let links: SerialLinks
    let device = BluetoothAddress("F0:00:00:00:00:01")!
    let logged = Log()

    final class Log: Sendable {
        let lines = Mutex<[String]>([])
    }

    init() {
        gateway = Gateway(central: central, version: "test")
        let logged = self.logged
        links = SerialLinks(gateway: gateway, policy: ReconnectPolicy(first: 0.01...0.01, factor: 1, jitter: 0, maximum: 0.01)) { line in
            logged.lines.withLock { $0.append(line) }
        }
    }

    func notification(_ bytes: String) -> CentralEvent {
        .value(ValueUpdate(device: device, serviceHandle: 0x0030, serviceUUID: BluetoothUUID("ffe0")!,
                           characteristicHandle: 0x0032, characteristicUUID: BluetoothUUID("ffe1")!, value: Array(bytes.utf8)))
    }

    /// A reader collecting what it is given, and the link changes it heard.
    final class Collector: Sendable {
        let bytes = Mutex<[UInt8]>([])
        let changes = Mutex<[SerialLink.LinkChange]>([])
        let room: Int
        init(room: Int = .max) { self.room = room }
        var reader: SerialLink.Reader {
            SerialLink.Reader(bytes: { new in
                self.bytes.withLock { b in
                    guard b.count + new.count <= self.room else { return false }
                    b += new
                    return true
                }
            }, link: { change in self.changes.withLock { $0.append(change) } })
        }
        var text: String { String(decoding: bytes.withLock { $0 }, as: UTF8.self) }
    }

    @Test func holdsTxOnceForAllClientsAndReleasesItAfterTheLast() async throws {
        let a = try await links.open(device, profile: nil, reader: Collector().reader, writer: true)
        let b = try await links.open(device, profile: nil, reader: Collector().reader, writer: false)
        #expect(central.notify.all == [.init(enabled: true, device: device, characteristic: 0x0032)])
        await a.close()
        #expect(links.link(device) != nil)
        await b.close()
        await b.close()  // twice: harmless
        #expect(links.link(device) == nil)
        #expect(central.notify.all.last == .init(enabled: false, device: device, characteristic: 0x0032))
    }

    @Test func everyReaderGetsWhatTheDeviceSendsInOrder() async throws {
        let (one, two) = (Collector(), Collector())
        let a = try await links.open(device, profile: nil, reader: one.reader, writer: false)
        let b = try await links.open(device, profile: nil, reader: two.reader, writer: false)
        for piece in ["hel", "lo ", "world"] { _ = central.handler(notification(piece)) }
        #expect(await eventually { one.text == "hello world" && two.text == "hello world" })
        #expect(links.link(device)?.counters.received == 11)
        await a.close()
        await b.close()
    }

    @Test func aReaderWithNoRoomHasItsBytesDroppedCountedAndLogged() async throws {
        let small = Collector(room: 4)
        let a = try await links.open(device, profile: nil, reader: small.reader, writer: false)
        _ = central.handler(notification("abc"))
        _ = central.handler(notification("defgh"))
        #expect(await eventually { links.link(device)?.counters.dropped == 5 })
        #expect(small.text == "abc")
        #expect(logged.lines.withLock { $0.contains { $0.contains("5 received byte(s) dropped") } })
        await a.close()
    }

    @Test func oneWriterAtATimeTheNextIsRefused() async throws {
        let a = try await links.open(device, profile: nil, reader: Collector().reader, writer: true)
        await #expect(throws: BLEError.self) { try await links.open(device, profile: nil, reader: Collector().reader, writer: true) }
        do {
            _ = try await links.open(device, profile: nil, reader: Collector().reader, writer: true)
        } catch {
            #expect(error.code == .cb(.connectionLimitReached))
        }
        // A reader's write is refused; after the writer leaves, another may write.
        let reader = try await links.open(device, profile: nil, reader: Collector().reader, writer: false)
        await #expect(throws: BLEError.self) { try await reader.write([1], options: .init()) }
        await a.close()
        let b = try await links.open(device, profile: nil, reader: Collector().reader, writer: true)
        try await b.write([1], options: .init())
        await b.close()
        await reader.close()
    }

    @Test func aSecondClientAskingForAnotherProfileIsRefused() async throws {
        let a = try await links.open(device, profile: nil, reader: Collector().reader, writer: false)
        let custom = SerialProfile(name: "custom", service: nil, rx: BluetoothUUID("ffe1")!, tx: BluetoothUUID("ffe1")!)
        await #expect(throws: BLEError.self) { try await links.open(device, profile: custom, reader: Collector().reader, writer: false) }
        await a.close()
    }

    @Test func writesGoInPiecesOfMTUMinusThreeInOrder() async throws {
        let a = try await links.open(device, profile: nil, reader: Collector().reader, writer: true)
        let message = (0..<1000).map { UInt8($0 % 251) }
        try await a.write(message, options: .init())
        let writes = central.writes.withLock { $0 }
        #expect(writes.map(\.1.count) == [182, 182, 182, 182, 182, 90])
        #expect(writes.flatMap(\.1) == message)
        #expect(writes.allSatisfy { $0.0 == 0x0032 && $0.2 == .withResponse })
        // Without response when asked: the same pieces.
        try await a.write(message, options: .init(mode: .command))
        #expect(central.writes.withLock { $0.dropFirst(6).allSatisfy { $0.2 == .withoutResponse } })
        #expect(links.link(device)?.counters.sent == 2000)
        await a.close()
    }

    @Test func aPacedWriteTakesItsTime() async throws {
        let a = try await links.open(device, profile: nil, reader: Collector().reader, writer: true)
        let start = ContinuousClock.now
        // 2 000 bytes at 10 000 B/s: the last of 11 pieces may leave after 1 820 bytes, at 182 ms.
        try await a.write([UInt8](repeating: 0x55, count: 2000), options: .init(mode: .command, rate: 10_000))
        #expect(ContinuousClock.now - start >= .milliseconds(180))
        await a.close()
    }

    @Test func aLinkLossIsToldToEveryClient() async throws {
        let one = Collector()
        let a = try await links.open(device, profile: nil, reader: one.reader, writer: false)
        _ = central.handler(.connection(id: device, state: .disconnected, error: BLEError(.peripheralDisconnected, "gone")))
        #expect(await eventually { one.changes.withLock { $0.count } == 1 })
        #expect(links.link(device)?.isUp == false)
        _ = central.handler(.resubscribed(id: device, characteristic: 0x0032, uuids: nil, error: nil))
        #expect(await eventually { one.changes.withLock { $0 } == [.lost(BLEError(.peripheralDisconnected, "gone")), .back] })
        await a.close()
    }

    @Test func aHoldingWriterWaitsForTheLinkToComeBack() async throws {
        let a = try await links.open(device, profile: nil, reader: Collector().reader, writer: true, onLinkLoss: .hold)
        _ = central.handler(.connection(id: device, state: .disconnected, error: nil))
        #expect(await eventually { links.link(device)?.isUp == false })
        let write = Task { try await a.write(Array("after".utf8), options: .init()) }
        // Nothing is written while the link is down ...
        try await Task.sleep(for: .milliseconds(50))
        #expect(central.writes.withLock { $0.isEmpty })
        // ... and all of it once tx notifies again.
        _ = central.handler(.resubscribed(id: device, characteristic: 0x0032, uuids: nil, error: nil))
        try await write.value
        #expect(central.writes.withLock { $0.map(\.1) } == [Array("after".utf8)])
        await a.close()
    }

    @Test func aDeviceThatIsNotConnectedIsConnectedOnlyWhenAsked() async throws {
        let other = PeripheralInfo(id: BluetoothAddress("F0:00:00:00:00:09")!, addressType: "public", name: nil, rssi: nil,
                                   lastSeen: nil, state: .disconnected, paired: false, advertisement: AdvertisementData())
        central.list([other])
        await #expect(throws: BLEError.self) { try await links.open(other.id, profile: nil, reader: Collector().reader, writer: false) }
        do {
            _ = try await links.open(other.id, profile: nil, reader: Collector().reader, writer: false)
        } catch {
            #expect(error.code == .cb(.notConnected))
        }
    }
}

/// A TCP port over the fake central, with a plain socket as its client.
@Suite struct SerialPortTests {
    let central = FakeCentral()
    let gateway: Gateway
    let ports: SerialPorts
    let device = BluetoothAddress("F0:00:00:00:00:01")!

    init() {
        gateway = Gateway(central: central, version: "test")
        ports = SerialPorts(links: SerialLinks(gateway: gateway) { _ in }, log: { _ in })
    }

    /// A blocking client socket connected to `port`, with a receive timeout.
    func connect(_ port: UInt16) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        try #require(connected == 0)
        return fd
    }

    func receive(_ fd: Int32, count: Int) -> [UInt8] {
        var got: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while got.count < count {
            let n = recv(fd, &buffer, buffer.count, 0)
            guard n > 0 else { break }
            got += buffer[..<n]
        }
        return got
    }

    /// A port open with one client attached (its session open on the device).
    func attached(_ configuration: SerialPort.Configuration) async throws -> (SerialPort, Int32) {
        let port = try ports.open(configuration)
        let fd = try connect(port.port)
        #expect(await eventually { port.link?.clients == 1 })
        return (port, fd)
    }

    func notification(_ bytes: [UInt8]) -> CentralEvent {
        .value(ValueUpdate(device: device, serviceHandle: 0x0030, serviceUUID: BluetoothUUID("ffe0")!,
                           characteristicHandle: 0x0032, characteristicUUID: BluetoothUUID("ffe1")!, value: bytes))
    }

    @Test func bytesGoBothWays() async throws {
        let (port, fd) = try await attached(SerialPort.Configuration(port: 0, device: device))
        defer { close(fd); ports.stop() }
        let message = (0..<3000).map { UInt8($0 % 256) }
        #expect(send(fd, message, message.count, 0) == message.count)
        #expect(await eventually { central.writes.withLock { $0.flatMap(\.1) } == message })
        _ = central.handler(notification(Array("from the device".utf8)))
        #expect(receive(fd, count: 15) == Array("from the device".utf8))
    }

    @Test func aLinkLossClosesTheClientByDefault() async throws {
        let (port, fd) = try await attached(SerialPort.Configuration(port: 0, device: device))
        defer { close(fd); ports.stop() }
        _ = central.handler(notification(Array("last".utf8)))
        _ = central.handler(.connection(id: device, state: .disconnected, error: BLEError(.peripheralDisconnected, "gone")))
        // What came before the loss is still delivered, then the end of the stream.
        #expect(receive(fd, count: 100) == Array("last".utf8))
        #expect(await eventually { port.clientCount == 0 && port.link == nil })
    }

    @Test func aHoldingClientStaysThroughALinkLoss() async throws {
        let (port, fd) = try await attached(SerialPort.Configuration(port: 0, device: device, onLinkLoss: .hold))
        defer { close(fd); ports.stop() }
        _ = central.handler(.connection(id: device, state: .disconnected, error: nil))
        #expect(await eventually { port.link?.isUp == false })
        _ = central.handler(.resubscribed(id: device, characteristic: 0x0032, uuids: nil, error: nil))
        #expect(await eventually { port.link?.isUp == true })
        _ = central.handler(notification(Array("still here".utf8)))
        #expect(receive(fd, count: 10) == Array("still here".utf8))
        #expect(port.clientCount == 1)
    }

    @Test func aPortTakenIsRefusedAndAClosedPortFreesItsNumber() throws {
        let port = try ports.open(SerialPort.Configuration(port: 0, device: device))
        #expect(throws: BLEError.self) { try ports.open(SerialPort.Configuration(port: port.port, device: device)) }
        #expect(ports.close(port.port))
        #expect(!ports.close(port.port))
        let again = try ports.open(SerialPort.Configuration(port: port.port, device: device))
        #expect(again.port == port.port)
        ports.stop()
    }

    @Test func clientsBeyondTheLimitAreRefused() async throws {
        var configuration = SerialPort.Configuration(port: 0, device: device)
        configuration.maxClients = 1
        let port = try ports.open(configuration)
        defer { ports.stop() }
        let first = try connect(port.port)
        defer { close(first) }
        #expect(await eventually { port.clientCount == 1 })
        let second = try connect(port.port)
        defer { close(second) }
        // Refused: closed at once.
        #expect(receive(second, count: 1) == [])
        #expect(port.clientCount == 1)
    }

    @Test func aSecondClientReadsAndIsDetachedIfItSends() async throws {
        let port = try ports.open(SerialPort.Configuration(port: 0, device: device))
        defer { ports.stop() }
        let writer = try connect(port.port)
        defer { close(writer) }
        #expect(await eventually { port.link?.clients == 1 })
        let reader = try connect(port.port)
        defer { close(reader) }
        #expect(await eventually { port.link?.clients == 2 })
        #expect(port.link?.hasWriter == true)
        _ = central.handler(notification(Array("both".utf8)))
        #expect(receive(writer, count: 4) == Array("both".utf8))
        #expect(receive(reader, count: 4) == Array("both".utf8))
        #expect(send(reader, "x", 1, 0) == 1)
        #expect(receive(reader, count: 1) == [])
        #expect(await eventually { port.clientCount == 1 && port.link?.clients == 1 })
        #expect(central.writes.withLock { $0.isEmpty })
    }
}
