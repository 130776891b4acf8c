import BLE
import DBus
import Dispatch
import Glibc
import Management
import Sockets
import Synchronization
import Testing
@testable import Simulator

/// The kernel's management events for the simulator's adapters, read as gattway reads the
/// kernel's socket: through `ManagementChannel(reading:)`.
@Suite(.serialized) struct ManagementStreamTests {
    static let sensor = BluetoothAddress("C0:FF:EE:00:00:01")!  // both adapters, connectable, random address
    static let loud = BluetoothAddress("C0:FF:EE:00:00:02")!  // hci0 at -40
    static let beacon = BluetoothAddress("F0:00:00:00:00:44")!  // hci1 only, no Flags, not connectable
    static let custom = BluetoothUUID("12345678-1234-5678-1234-56789abc0001")!

    static let configuration = SimulatorConfiguration(adapters: [.numbered(0), .numbered(1)], devices: [
        SimulatorConfiguration.Device(address: sensor, addressType: "random", name: "Mgmt Sensor", rssi: -60, rssiJitter: 3,
                                      txPower: -4, advertisingIntervalMs: 50, uuids: [BluetoothUUID("180D")!, custom],
                                      manufacturerData: [0x0059: [0x01, 0x02, 0x03]], serviceData: [BluetoothUUID("FCD2")!: [0x40, 0x01, 0x64]],
                                      connectDelayMs: 5),
        SimulatorConfiguration.Device(address: loud, name: "Loud", rssi: -40, rssiByAdapter: ["hci0": -40], rssiJitter: 0,
                                      advertisingIntervalMs: 50, nameInScanResponse: true),
        SimulatorConfiguration.Device(address: beacon, rssi: -70, rssiByAdapter: ["hci1": -70], rssiJitter: 0, connectable: false,
                                      advertisingIntervalMs: 50, advertisingFlags: [], manufacturerData: [0x004C: [0x02, 0x15, 0xAA]]),
    ])

    /// The simulator, with a channel reading its stream for hci0 and hci1; at the end every
    /// frame it read must have parsed whole.
    final class Fixture: Sendable {
        let sim: Sim
        let channel: ManagementChannel
        let events = StreamEvents()

        init() async throws {
            sim = try await Sim.start(ManagementStreamTests.configuration)
            let events = events
            channel = try ManagementChannel(reading: try sim.simulator.managementStream(),
                                            controllers: [ControllerIndex(0), ControllerIndex(1)]) { events.add($0) }
        }

        func close() {
            channel.close()
            sim.close()
            #expect(channel.counters.badFrames == 0 && channel.counters.droppedAdvertisingData == 0)
        }
    }

    @Test func everyAdvertisementHeardWhileDiscoveringIsADeviceFoundWithItsADStructures() async throws {
        let fixture = try await Fixture()
        defer { fixture.close() }
        let (sim, events) = (fixture.sim, fixture.events)
        try await sim.call(Sim.adapter, Interface.adapter, "StartDiscovery")
        let found = (0..<5).compactMap { _ in events.next { $0.found?.address == Self.sensor && $0.controller == ControllerIndex(0) }?.found }
        try #require(found.count == 5)
        for report in found {
            #expect(report.addressType == .leRandom)
            #expect(report.flags == [])
            #expect(report.monitor == nil)
            #expect((-63 ... -57).contains(report.rssi ?? 0), "RSSI \(report.rssi.map(String.init) ?? "none")")
            #expect(report.advertisingData.structures.map { hex($0.type) + ":" + hex($0.data) } == [
                "01:06",
                "03:0d18",
                "07:" + hex(Self.custom.bytes.reversed()),
                "09:" + hex(Array("Mgmt Sensor".utf8)),
                "0a:fc",
                "16:d2fc400164",
                "ff:5900010203",
            ])
        }
        // bluetoothd listed the device with the first report's RSSI (it signals changes of 8 dB
        // or more only): the same jittered value.
        try await sim.signal { $0.adds(Sim.devicePath(Self.sensor.description)) }
        #expect(try await sim.property(Sim.devicePath(Self.sensor.description), Interface.device, "RSSI").integer == found[0].rssi)
    }

    /// The kernel reports before bluetoothd decides: a beacon without Flags is not discoverable,
    /// so bluetoothd lists it nowhere, and its Device Found comes all the same (on hci1, the only
    /// adapter that hears it).
    @Test func theKernelReportsWhatBluetoothdThenLeavesOut() async throws {
        let fixture = try await Fixture()
        defer { fixture.close() }
        let (sim, events) = (fixture.sim, fixture.events)
        try await sim.call("/org/bluez/hci1", Interface.adapter, "StartDiscovery")
        let heard = try #require(events.next { $0.found?.address == Self.beacon }?.found)
        #expect(heard.controller == ControllerIndex(1))
        #expect(heard.addressType == .lePublic)
        #expect(heard.flags == .notConnectable)
        #expect(heard.rssi == -70)
        #expect(heard.advertisingData.bytes == [0x06, 0xFF, 0x4C, 0x00, 0x02, 0x15, 0xAA])
        // The sensor heard there too, and listed by bluetoothd: the beacon is not.
        #expect(events.next { $0.found?.address == Self.sensor && $0.controller == ControllerIndex(1) } != nil)
        try await sim.signal { $0.adds(Sim.devicePath(Self.sensor.description, on: "hci1")) }
        #expect(try await sim.managedObjects()[ObjectPath(Sim.devicePath(Self.beacon.description, on: "hci1"))!] == nil)
        #expect(!events.all.contains { $0.found?.address == Self.beacon && $0.controller != ControllerIndex(1) })
    }

    /// With a discovery filter's RSSI, bluetoothd has the kernel drop what is quieter: those
    /// advertisements are not reported to the management socket either.
    @Test func theKernelsDiscoveryFilterDropsQuieterDevices() async throws {
        let fixture = try await Fixture()
        defer { fixture.close() }
        let (sim, events) = (fixture.sim, fixture.events)
        try await sim.call(Sim.adapter, Interface.adapter, "SetDiscoveryFilter", [.stringVariantDictionary([("RSSI", .int16(-50))])])
        try await sim.call(Sim.adapter, Interface.adapter, "StartDiscovery")
        // Five of the loud device's advertisements (every 50 ms, as the sensor's): the sensor's
        // at -60 came meanwhile, and were dropped.
        for _ in 0..<5 { try #require(events.next { $0.found?.address == Self.loud } != nil) }
        #expect(!events.all.contains { $0.found?.address == Self.sensor })
    }

    /// An advertisement monitor added on the stream, as on the kernel's socket: the controller
    /// scans passively while it does not discover (Advertisement Monitor Device Found, handle 0,
    /// no scan response, nothing for bluetoothd), actively again while it does.
    @Test func aMonitorMakesTheControllerScanPassivelyWhileItDoesNotDiscover() async throws {
        let fixture = try await Fixture()
        defer { fixture.close() }
        let (sim, events, channel) = (fixture.sim, fixture.events, fixture.channel)
        let hci0 = ControllerIndex(0)
        let features = try await channel.command(.readAdvertisementMonitorFeatures, controller: hci0)
        #expect(features.status == .success)
        #expect(AdvertisementMonitorFeatures(parameters: features.parameters) == AdvertisementMonitorFeatures(maxHandles: 32, maxPatterns: 16, handles: []))
        let added = try await channel.command(.addAdvertisementPatternsMonitor, controller: hci0,
                                              parameters: AdvertisementMonitor.addParameters(AdvertisementMonitor.everyAdvertisement))
        #expect(added == ManagementChannel.Answer(status: .success, parameters: [0x01, 0x00]))
        let passive = try #require(events.next { $0.found?.address == Self.loud }?.found)
        #expect(passive.monitor == 0 && passive.controller == hci0 && passive.rssi == -40)
        // Its name is in its scan response: a passive scan sends no scan request.
        #expect(passive.advertisingData.structures.map(\.type) == [0x01])
        #expect(try await sim.managedObjects()[ObjectPath(Sim.devicePath(Self.loud.description))!] == nil)
        let listed = try await channel.command(.readAdvertisementMonitorFeatures, controller: hci0)
        #expect(AdvertisementMonitorFeatures(parameters: listed.parameters)?.handles == [1])

        try await sim.call(Sim.adapter, Interface.adapter, "StartDiscovery")
        let active = try #require(events.next { $0.found?.address == Self.loud && $0.found?.monitor == nil }?.found)
        #expect(active.advertisingData.structures.map(\.type) == [0x01, 0x09])

        let removed = try await channel.command(.removeAdvertisementMonitor, controller: hci0, parameters: AdvertisementMonitor.handleParameters(1))
        #expect(removed == ManagementChannel.Answer(status: .success, parameters: [0x01, 0x00]))
        let again = try await channel.command(.removeAdvertisementMonitor, controller: hci0, parameters: AdvertisementMonitor.handleParameters(1))
        #expect(again == ManagementChannel.Answer(status: .invalidParameters, parameters: [0x01, 0x00]))
        let elsewhere = try await channel.command(.readAdvertisementMonitorFeatures, controller: ControllerIndex(7))
        #expect(elsewhere.status == .invalidIndex)
        let badPattern = try await channel.command(.addAdvertisementPatternsMonitor, controller: hci0, parameters: [0x01, 0x01, 0x1F, 0x01] + [UInt8](repeating: 0, count: 31))
        #expect(badPattern.status == .invalidParameters)
        let unknown = try await channel.command(Opcode(rawValue: 0x0004), controller: hci0)
        #expect(unknown.status == .unknownCommand)
    }

    /// Links up and down, as the kernel tells them: the connecting adapter's Device Connected has
    /// the Initiated flag; the reason says who ended the link.
    @Test func linksComeAndGoAsDeviceConnectedAndDisconnected() async throws {
        let fixture = try await Fixture()
        defer { fixture.close() }
        let (sim, events) = (fixture.sim, fixture.events)
        try await sim.discover([Self.sensor.description])
        let path = Sim.devicePath(Self.sensor.description)
        try await sim.connect(Self.sensor.description)
        let up = DeviceConnected(controller: ControllerIndex(0), address: Self.sensor, addressType: .leRandom, flags: .initiatedConnection)
        #expect(events.next { $0.connected != nil } == .deviceConnected(up))

        var mark = events.count
        try await sim.call(path, Interface.device, "Disconnect")
        let down = DeviceDisconnected(controller: ControllerIndex(0), address: Self.sensor, addressType: .leRandom, reason: .localHost)
        #expect(events.next(after: mark) { $0.disconnected != nil } == .deviceDisconnected(down))

        try await sim.connect(Self.sensor.description)
        #expect(events.next(after: mark) { $0.connected != nil } == .deviceConnected(up))
        mark = events.count
        _ = try await sim.control("DropLink", [.string(Self.sensor.description)])
        var lost = down
        lost.reason = .timeout
        #expect(events.next(after: mark) { $0.disconnected != nil } == .deviceDisconnected(lost))
    }

    /// A link between two of the simulator's adapters (hci1 connects to hci0's advertisement and
    /// application) shows on both: hci1 asked for it, hci0 did not; hci0 ending it is the local
    /// host there and the remote host on hci1.
    @Test func aLinkBetweenTwoAdaptersShowsOnBoth() async throws {
        let fixture = try await Fixture()
        defer { fixture.close() }
        let (sim, events) = (fixture.sim, fixture.events)
        let app = try TestApplication(sim)
        try await app.register()
        try await app.advertise()
        try await sim.discover([PeripheralRoleTests.hci0Address], on: "hci1")
        try await sim.connect(PeripheralRoleTests.hci0Address, on: "hci1")
        let hci0 = BluetoothAddress(PeripheralRoleTests.hci0Address)!, hci1 = BluetoothAddress(PeripheralRoleTests.hci1Address)!
        let connected = [
            DeviceConnected(controller: ControllerIndex(1), address: hci0, addressType: .lePublic, flags: .initiatedConnection),
            DeviceConnected(controller: ControllerIndex(0), address: hci1, addressType: .lePublic),
        ]
        #expect([events.next { $0.connected != nil }, events.next { $0.connected != nil }] == connected.map { .deviceConnected($0) })
        try await sim.call(PeripheralRoleTests.central, Interface.device, "Disconnect")
        let disconnected = [
            DeviceDisconnected(controller: ControllerIndex(1), address: hci0, addressType: .lePublic, reason: .remoteHost),
            DeviceDisconnected(controller: ControllerIndex(0), address: hci1, addressType: .lePublic, reason: .localHost),
        ]
        #expect([events.next { $0.disconnected != nil }, events.next { $0.disconnected != nil }]
                == disconnected.map { .deviceDisconnected($0) })
    }

    /// The stream answers what a reader asks as it opens, as the kernel does: the channel opens
    /// on it and knows the controllers plugged in. One pulled out or plugged in is an Index
    /// Removed or Added; a list asked for then says the same; another command is unknown.
    @Test func controllersComeAndGoAsTheKernelTellsThem() async throws {
        let sim = try await Sim.start(Self.configuration)
        defer { sim.close() }
        let news = Mutex<[ManagementChannel.ControllerNews]>([])
        let told = DispatchSemaphore(value: 0)
        let opening = ManagementChannel.open(descriptor: try sim.simulator.managementStream(), controllers: [ControllerIndex(0)],
                                             controllersChanged: { item in
                                                 news.withLock { $0.append(item) }
                                                 told.signal()
                                             }) { _ in }
        guard case .opened(let channel, let kernel) = opening else { return #expect(Bool(false), "\(opening)") }
        defer { channel.close() }
        #expect(kernel.version == ManagementVersion(version: 1, revision: 22))
        #expect(kernel.controllers == [ControllerIndex(0), ControllerIndex(1)])
        #expect(kernel.supported.includesDeviceFound && kernel.supported.events.contains(EventCode.indexAdded.rawValue))
        func next() -> ManagementChannel.ControllerNews? {
            told.wait(timeout: .now() + 5) == .success ? news.withLock { $0.last } : nil
        }
        _ = try await sim.control("RemoveAdapter", [.string("hci1")])
        #expect(next() == .index(.removed(ControllerIndex(1))))
        #expect(channel.kernelControllers == [ControllerIndex(0)])
        #expect(channel.askControllers())
        #expect(next() == .listed)
        #expect(channel.kernelControllers == [ControllerIndex(0)])
        _ = try await sim.control("AddAdapter", [.string("hci1")])
        #expect(next() == .index(.added(ControllerIndex(1))))
        #expect(channel.kernelControllers == [ControllerIndex(0), ControllerIndex(1)])
        #expect(channel.counters.badFrames == 0 && channel.counters.controllerEvents == 3)

        let client = try sim.simulator.managementStream()
        defer { close(client) }
        let unknown = Frame.command(Opcode(rawValue: 0x0023), controller: ControllerIndex(0))
        #expect(send(client, unknown, unknown.count, 0) == unknown.count)
        var answer = [UInt8](repeating: 0, count: 64)
        #expect(recv(client, &answer, answer.count, 0) == 9)
        #expect(Array(answer.prefix(9)) == Frame.commandStatus(Opcode(rawValue: 0x0023), .unknownCommand, controller: ControllerIndex(0)))
    }

    /// Nothing is built while nobody reads; a client that does not read loses frames, counted,
    /// without holding anything up; one that closed its end is let go.
    @Test func clientsThatDoNotReadOrLeftHoldNothingUp() async throws {
        let stream = ManagementStream(log: { _ in })
        #expect(!stream.isActive)
        let silent = try stream.connect()
        #expect(stream.isActive)
        let frame = DeviceDisconnected(controller: ControllerIndex(0), address: Self.sensor, addressType: .leRandom, reason: .timeout).frame
        var sent = 0
        while stream.currentCounters.dropped == 0 && sent < 1_000_000 {
            stream.send(frame)
            sent += 1
        }
        #expect(stream.currentCounters.dropped == 1)
        // What it holds it still reads, frame by frame.
        var buffer = [UInt8](repeating: 0, count: 64)
        #expect(recv(silent, &buffer, buffer.count, Int32(MSG_DONTWAIT)) == frame.count)
        #expect(Array(buffer.prefix(frame.count)) == frame)
        close(silent)
        // The next send finds the end closed. (Tests run in parallel and spawn processes: a child
        // may hold a copy of the closed end until its exec, so sends go on until it is let go.)
        let deadline = ContinuousClock.now + .seconds(5)
        repeat { stream.send(frame) } while stream.isActive && ContinuousClock.now < deadline
        #expect(!stream.isActive)
        let counters = stream.currentCounters
        #expect(counters.clients == 0 && counters.connected == 1 && counters.left == 1 && counters.frames > sent, "\(counters)")
        stream.stop()
    }

    /// A socket file left there is replaced; clients get frames once accepted (frames go out
    /// every 10 ms until one arrives: the accept has no sign of its own); the file goes at stop;
    /// another kind of file is not touched.
    @Test func aSocketPathServesClientsAndIsRemovedAtStop() throws {
        let path = "/tmp/gattway-sim-test-\(getpid()).sock"
        let stale = socket(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue), 0)
        #expect(bindUnix(stale, path))
        close(stale)
        let stream = ManagementStream(log: { _ in })
        try stream.listen(path: path)
        let clients = (0..<2).map { _ in socket(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue), 0) }
        defer { clients.forEach { close($0) } }
        for client in clients { #expect(connectUnix(client, path)) }
        let frame = DeviceDisconnected(controller: ControllerIndex(1), address: Self.sensor, addressType: .leRandom, reason: .remoteHost).frame
        for client in clients {
            var watched = pollfd(fd: client, events: Int16(POLLIN), revents: 0)
            let deadline = ContinuousClock.now + .seconds(5)
            while poll(&watched, 1, 0) == 0 && ContinuousClock.now < deadline {
                stream.send(frame)
                _ = poll(&watched, 1, 10)
            }
            var buffer = [UInt8](repeating: 0, count: 64)
            #expect(recv(client, &buffer, buffer.count, Int32(MSG_DONTWAIT)) == frame.count)
            #expect(Array(buffer.prefix(frame.count)) == frame)
        }
        #expect(stream.currentCounters.clients == 2)
        stream.stop()
        #expect(access(path, F_OK) != 0)

        let file = "/tmp/gattway-sim-test-\(getpid()).txt"
        let created = creat(file, 0o600)
        #expect(created >= 0)
        close(created)
        defer { unlink(file) }
        #expect(throws: SocketError.self) { try stream.listen(path: file) }
        #expect(access(file, F_OK) == 0)
    }
}

/// What the channel handed on, waited for by predicate (a semaphore per event: no sleeps).
final class StreamEvents: Sendable {
    private let events = Mutex<[ManagementEvent]>([])
    private let arrived = DispatchSemaphore(value: 0)
    /// Where the next `next` without `after` starts looking.
    private let cursor = Mutex(0)

    func add(_ event: ManagementEvent) {
        events.withLock { $0.append(event) }
        arrived.signal()
    }

    var all: [ManagementEvent] { events.withLock { $0 } }
    var count: Int { events.withLock { $0.count } }

    /// The first event at index `after` or later (default: after the last one `next` returned)
    /// that matches, within `timeout`; nil if none came.
    func next(after start: Int? = nil, timeout: Duration = .seconds(5), where predicate: (ManagementEvent) -> Bool) -> ManagementEvent? {
        let deadline = DispatchTime.now() + .milliseconds(Int(timeout.components.seconds * 1000))
        var from = start ?? cursor.withLock { $0 }
        while true {
            let list = all
            if let i = list.indices.dropFirst(from).first(where: { predicate(list[$0]) }) {
                cursor.withLock { $0 = i + 1 }
                return list[i]
            }
            from = max(from, list.count)
            guard arrived.wait(timeout: deadline) == .success else { return nil }
        }
    }
}

extension ManagementEvent {
    var found: DeviceFound? { if case .deviceFound(let e) = self { e } else { nil } }
    var connected: DeviceConnected? { if case .deviceConnected(let e) = self { e } else { nil } }
    var disconnected: DeviceDisconnected? { if case .deviceDisconnected(let e) = self { e } else { nil } }
}

private func hex(_ byte: UInt8) -> String { Hex.string([byte]) }
private func hex(_ bytes: some Sequence<UInt8>) -> String { Hex.string(bytes) }

private func unixAddress(_ path: String) -> sockaddr_un {
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
    return address
}

private func bindUnix(_ fd: Int32, _ path: String) -> Bool {
    var address = unixAddress(path)
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    } == 0
}

private func connectUnix(_ fd: Int32, _ path: String) -> Bool {
    var address = unixAddress(path)
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    } == 0
}
