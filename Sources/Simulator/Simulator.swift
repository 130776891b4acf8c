import BLE
import DBus
import Sockets
import Synchronization

/// A stand-in for bluetoothd 5.66: owns `org.bluez` on the bus of `connection` and serves the
/// configured adapters (hci0, …) and the peripherals around them through the BlueZ D-Bus API
/// (with the peripheral role: an adapter's registered advertisements and GATT applications are
/// heard and reached by the other adapters), plus the `io.gattway.Simulator1` control
/// interface at /io/gattway/simulator:
///
/// - `SetFault(s address, s faultJSON)` replaces a device's faults (`SimulatorConfiguration.Faults`)
/// - `ClearFaults(s address)` ("" = every device)
/// - `DropLink(s address)` loses the link as if the peripheral vanished
/// - `CallCount(s member, s path) → u` counts method calls ("" matches any member or path)
/// - `ResetCounters()`
/// - `SetValue(s address, s uuid, ay value, b notify)` sets a characteristic's value on the peripheral
/// - `SetServiceData(s address, s uuid, ay data)` changes what the peripheral advertises as that
///   service's data from its next advertisement on (sensor payloads that change)
/// - `SetServices(s address, s servicesJSON, b serviceChanged)` gives the peripheral new services
///   (a firmware update); bluetoothd's objects, its GATT cache, follow when it discovers again
/// - `SetPairing(s address, s pairingJSON)` replaces how a device pairs (`SimulatorConfiguration.Pairing`)
/// - `DisplayedPasskey(s address) → u` the passkey a device displays while pairing
/// - `SetUART(s address, s uartJSON)` replaces a device's UART (`SimulatorConfiguration.UART`; "" removes it)
/// - `UARTStats(s address) → (t received, t dropped, t echoed, t streamed)` a UART's byte counters
/// - `ResetUARTStats(s address)`
/// - `Restart(u downMs)` plays bluetoothd exiting (links, discovery and notify sessions gone,
///   org.bluez released, no signals) and starting again `downMs` later (unpaired devices forgotten)
/// - `SetPowered(b on)` powers hci0 off or on, as rfkill or a reset would
/// - `SetAdapterPowered(s adapter, b on)` the same for any adapter
/// - `RemoveAdapter(s adapter)` unplugs an adapter (its objects go, its links with them);
///   `AddAdapter(s adapter)` plugs it in again (bonded devices back, powered on by itself)
/// - `SetRSSI(s address, s adapter, n rssi)` how loud an adapter hears a device (127: not at all)
/// - `EndDiscovery()` ends every discovery session by itself, as BlueZ does when the adapter resets
/// - `CentralConnect(s central, s address)`, `CentralDisconnect(s central, s address)`,
///   `CentralRead(s central, s address, s uuid) → ay`, `CentralWrite(s central, s address, s uuid, ay value, b withResponse)`,
///   `CentralSubscribe(s central, s address, s uuid, b on)`, `CentralNotifications(s central, s address, s uuid) → aay`:
///   a test acts as a phone on adapter `central` (another adapter's advertisement and applications, or a device)
///
/// Incoming messages are queued in arrival order (at most 1024 waiting; beyond that a call is
/// refused with `org.freedesktop.DBus.Error.LimitsExceeded`) and handled one at a time.
public final class Simulator: Sendable {
    private let connection: Connection
    private let engine: Engine
    private let tasks = TaskBag()
    private let inbox: AsyncStream<Message>.Continuation
    private let messages: Mutex<AsyncStream<Message>?>
    private let subscription = Mutex<SubscriptionID?>(nil)
    private let log: @Sendable (String) -> Void
    private let management: ManagementStream

    /// `log` receives one line per notable event (discovery, connections, faults).
    public init(connection: Connection, configuration: SimulatorConfiguration, log: (@Sendable (String) -> Void)? = nil) {
        self.connection = connection
        let log = log ?? { _ in }
        self.log = log
        management = ManagementStream(log: log)
        engine = Engine(connection: connection, configuration: configuration, tasks: tasks, management: management, log: log)
        let (stream, continuation) = AsyncStream<Message>.makeStream(bufferingPolicy: .bufferingOldest(1024))
        inbox = continuation
        messages = Mutex(stream)
    }

    /// Starts serving: takes the name `org.bluez` once everything is ready to answer, then
    /// announces the adapter. Throws if the name is taken or the bus refuses.
    public func start() async throws {
        guard let stream = messages.withLock({ s -> AsyncStream<Message>? in defer { s = nil }; return s }) else {
            throw BusError(name: "org.freedesktop.DBus.Error.Failed", message: "the simulator was already started")
        }
        do {
            try await serve(stream)
        } catch {
            stop()
            throw error
        }
        log("serving org.bluez as \(connection.uniqueName)")
    }

    private func serve(_ stream: AsyncStream<Message>) async throws {
        let engine = engine
        tasks.spawn {
            for await message in stream { await engine.handle(message) }
        }
        let inbox = inbox
        let connection = connection
        connection.setMethodCallHandler { call in
            if case .dropped = inbox.yield(call), !call.noReplyExpected {
                try? connection.send(call.errorReply(BusError(name: "org.freedesktop.DBus.Error.LimitsExceeded",
                                                              message: "the simulator has too many calls waiting")))
            }
        }
        let id = try await connection.subscribe(MatchRule(sender: "org.freedesktop.DBus", interface: "org.freedesktop.DBus",
                                                          member: "NameOwnerChanged")) { signal in inbox.yield(signal) }
        subscription.withLock { $0 = id }
        await engine.setDeliver { inbox.yield($0) }
        management.setCommandHandler { [engine] frame in await engine.managementCommand(frame) }
        await engine.start()
        try await connection.requestName("org.bluez")
        await engine.announce()
    }

    /// Stops every timer and pending reply and stops answering calls. The connection stays
    /// open (its owner closes it, which also releases org.bluez).
    public func stop() {
        management.stop()
        connection.setMethodCallHandler(nil)
        if let id = subscription.withLock({ s -> SubscriptionID? in defer { s = nil }; return s }) { connection.unsubscribe(id) }
        inbox.finish()
        tasks.close()
    }

    deinit { stop() }

    // MARK: the kernel's management events

    /// One end of a new socketpair (AF_UNIX, SOCK_SEQPACKET) that receives, from now on, the
    /// events the kernel's Bluetooth management socket would send a trusted reader for the
    /// simulator's adapters (controller index N for hciN), one frame per packet as the kernel
    /// frames them: Device Found for every advertisement an adapter receives while discovering
    /// (before bluetoothd's own filtering), Device Connected and Device Disconnected as links come
    /// and go. The caller owns the descriptor and closes it (the simulator lets go of its end at
    /// the next frame). Frames that do not fit its socket buffer while it does not read are
    /// dropped for it and counted (`managementStreamCounters`).
    public func managementStream() throws(SocketError) -> Int32 {
        try management.connect()
    }

    /// Serves the same stream (`managementStream`) on a Unix SOCK_SEQPACKET socket at `path`, to
    /// any number of clients; a socket file already there is removed first, and the file is
    /// removed at `stop`.
    public func serveManagementSocket(at path: String) throws(SocketError) {
        try management.listen(path: path)
    }

    public var managementStreamCounters: ManagementStreamCounters { management.currentCounters }
}

extension Engine {
    func start() {
        guard !started else { return }
        started = true
        startTimers()
    }

    /// bluetoothd announces the adapters when it has set them up.
    func announce() {
        export(.bluez)
        for a in adapters.indices where adapters[a].present { export(.adapter(a)) }
    }
}
/// The simulator under a name that differs from its module's (Swift cannot tell a type from a module of the same name).
public typealias BlueZSimulator = Simulator
