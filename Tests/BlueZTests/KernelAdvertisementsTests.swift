import BLE
import DBus
import Glibc
import Management
import Simulator
import Testing
@testable import BlueZ

/// The central on the kernel's path, with the test in the kernel's place (a socketpair that keeps
/// frames apart) and the simulator as bluetoothd with hci0 and hci1, hci1 pulled out before the
/// central starts: the kernel's list when the channel opens lacks it.
@Suite(.serialized) struct KernelAdvertisementsTests {
    final class Rig: Sendable {
        let bus: PrivateBus
        let server: Connection
        let control: Connection
        let simulator: Simulator
        let central: BlueZCentral
        let kernel: Int32
        let lines = EventLogOf<String>()

        init() async throws {
            bus = try PrivateBus()
            server = try Connection(address: bus.address)
            control = try Connection(address: bus.address)
            simulator = Simulator(connection: server, configuration: SimulatorConfiguration(adapters: [.numbered(0), .numbered(1)], devices: []))
            var fds: [Int32] = [-1, -1]
            precondition(socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0)
            kernel = fds[1]
            let address = bus.address, lines = lines
            central = BlueZCentral(advertisements: .descriptor(fds[0]),
                                   log: { lines.append($0) }) { () throws(BusError) in
                try Connection(address: address)
            }
            try await simulator.start()
            try await call("RemoveAdapter", "hci1")
            // What the kernel answers the channel as it opens: it has hci0 only.
            for (opcode, parameters) in [(Opcode.readVersion, ManagementVersion(version: 1, revision: 22).parameters),
                                         (.readCommands, SupportedCommands(commands: [1, 2, 3], events: [0x0004, 0x0005, 0x0012]).parameters),
                                         (.readIndexList, IndexList([ControllerIndex(0)]).parameters)] {
                send(Frame.commandComplete(opcode, .success, controller: .none, parameters: parameters))
            }
            await central.start()
            #expect([command(), command(), command()] == [Frame.command(.readVersion), Frame.command(.readCommands),
                                                          Frame.command(.readIndexList)])
            try await until("hci0 on the kernel's path") { await self.paths() == ["hci0": .kernel] }
        }

        func call(_ member: String, _ adapter: String) async throws {
            _ = try await control.call(.methodCall(destination: "org.bluez", path: ObjectPath("/io/gattway/simulator")!,
                                                   interface: "io.gattway.Simulator1", member: member, [.string(adapter)]),
                                       timeout: .seconds(10))
        }

        func send(_ frame: [UInt8]) {
            #expect(Glibc.send(kernel, frame, frame.count, Int32(MSG_NOSIGNAL)) == frame.count)
        }

        /// An advertisement heard by controller `index`.
        func sendDeviceFound(on index: UInt16) {
            send(DeviceFound(controller: ControllerIndex(index), address: BluetoothAddress("C0:FF:EE:00:00:01")!, addressType: .leRandom,
                             rssi: -50, advertisingData: AdvertisingData([(0x01, [0x06])])).frame)
        }

        /// The next command the channel sends, within `milliseconds` (its frame).
        func command(within milliseconds: Int32 = 5000) -> [UInt8]? {
            var watched = pollfd(fd: kernel, events: Int16(POLLIN), revents: 0)
            guard poll(&watched, 1, milliseconds) == 1 else { return nil }
            var buffer = [UInt8](repeating: 0, count: 64)
            let count = recv(kernel, &buffer, buffer.count, 0)
            return count > 0 ? Array(buffer[..<count]) : nil
        }

        func paths() async -> [String: AdvertisementPath] {
            Dictionary(uniqueKeysWithValues: ((try? await central.adapters()) ?? []).map { ($0.id, $0.advertisements) })
        }

        func frames(_ outcome: String) -> Double? {
            central.diagnostics().first { $0.name == "gattway_management_frames_total" && $0.labels.contains { $0 == ("outcome", outcome) } }?.value
        }

        /// Waits (bounded) for a state that no event announces.
        func until(_ what: String, _ condition: @escaping @Sendable () async -> Bool) async throws {
            let deadline = ContinuousClock.now + .seconds(10)
            while !(await condition()) {
                guard ContinuousClock.now < deadline else { throw Timeout(what: what) }
                try await Task.sleep(for: .milliseconds(20))
            }
        }

        func close() {
            central.close()
            simulator.stop()
            Glibc.close(kernel)
            control.close()
            server.close()
            bus.stop()
        }
    }

    /// BlueZ shows hci1 before the channel read of it (here the kernel sends no Index Added at
    /// all): the channel asks the kernel for its list, and its answer, which has hci1, keeps the
    /// kernel's path for both; hci1's events are handed on from then.
    @Test func anAdapterTheKernelListsWhenAskedTakesTheKernelsPath() async throws {
        let rig = try await Rig()
        defer { rig.close() }
        try await rig.call("AddAdapter", "hci1")
        #expect(rig.command() == Frame.command(.readIndexList))
        rig.send(Frame.commandComplete(.readIndexList, .success, controller: .none,
                                       parameters: IndexList([ControllerIndex(0), ControllerIndex(1)]).parameters))
        rig.sendDeviceFound(on: 1)
        try await rig.until("hci1's Device Found handed on") { rig.frames("delivered") == 1 }
        #expect(rig.frames("other_controller") == 0)
        #expect(await rig.paths() == ["hci0": .kernel, "hci1": .kernel])
        #expect(!rig.lines.all.contains { $0.contains("D-Bus signals") })
    }

    /// An adapter in use that the kernel does not list even when asked is not its own (a bus
    /// bridged from elsewhere), and a kernel that does not answer within the deadline is not waited
    /// for longer: every adapter goes back to D-Bus, said in the log.
    @Test(arguments: [
        (true, "BlueZ's hci1 is not one of this kernel's controllers (hci0)"),
        (false, "the kernel did not list its controllers within 2.0 seconds when BlueZ showed hci1"),
    ])
    func anAdapterTheKernelDoesNotListSendsEveryAdapterToDBus(answered: Bool, reason: String) async throws {
        let rig = try await Rig()
        defer { rig.close() }
        try await rig.call("AddAdapter", "hci1")
        #expect(rig.command() == Frame.command(.readIndexList))
        if answered {
            rig.send(Frame.commandComplete(.readIndexList, .success, controller: .none, parameters: IndexList([ControllerIndex(0)]).parameters))
        }
        try await rig.until("D-Bus for both") { await rig.paths() == ["hci0": .dbus, "hci1": .dbus] }
        #expect(rig.lines.all.contains("advertisements: from BlueZ's D-Bus signals (\(reason))"))
    }

    /// The kernel tells of hci1 (Index Added) before bluetoothd shows it: nothing to ask, and its
    /// events are handed on. Pulled out (Index Removed, then bluetoothd withdraws it), hci0 keeps
    /// the kernel's path.
    @Test func indexEventsKeepTheKernelsPathAsAdaptersComeAndGo() async throws {
        let rig = try await Rig()
        defer { rig.close() }
        rig.send(IndexEvent.added(ControllerIndex(1)).frame)
        try await rig.until("the Index Added read") { rig.frames("controller") == 1 }
        try await rig.call("AddAdapter", "hci1")
        try await rig.until("hci1 listed") { await rig.paths() == ["hci0": .kernel, "hci1": .kernel] }
        rig.sendDeviceFound(on: 1)
        try await rig.until("hci1's Device Found handed on") { rig.frames("delivered") == 1 }
        #expect(rig.command(within: 0) == nil, "the kernel was asked")
        rig.send(IndexEvent.removed(ControllerIndex(1)).frame)
        try await rig.until("the Index Removed read") { rig.frames("controller") == 2 }
        try await rig.call("RemoveAdapter", "hci1")
        try await rig.until("hci1 gone") { await rig.paths() == ["hci0": .kernel] }
        rig.sendDeviceFound(on: 0)
        try await rig.until("hci0's Device Found handed on") { rig.frames("delivered") == 2 }
        #expect(await rig.paths() == ["hci0": .kernel])
        #expect(rig.command(within: 0) == nil, "the kernel was asked")
    }
}
