import BLE
import Management
import Synchronization

/// Passive scanning through the kernel's advertisement monitors (issue 36), where the kernel's
/// management channel reads: a monitor added to a controller makes the kernel scan passively (no
/// scan requests, so no scan responses) whenever no discovery runs on it, and report what it
/// hears as Advertisement Monitor Device Found, which the channel hands on as Device Found.
/// bluetoothd 5.66 without --experimental has no AdvertisementMonitorManager1, and makes no
/// device objects of these reports. While a discovery runs (the watch's, a connect's, another
/// program's) the controller scans actively and the kernel reports Device Found as usual.
///
/// The kernel keeps a monitor until it is removed (not when the socket that added it closes):
/// gattway removes its own when passive scanning ends and when it shuts down, and with a ledger
/// (the state directory) those a gattway that could not left behind, before it adds its own.
final class AdvertisementMonitors: Sendable {
    private struct State {
        var channel: ManagementChannel?
        /// Why the open channel cannot add monitors (the kernel lacks the commands).
        var unsupported: String?
        /// gattway's monitor on each controller.
        var handles: [ControllerIndex: UInt16] = [:]
        /// Monitors a gattway added and did not remove (the ledger's, or this one's on a channel
        /// that ended), to be removed before one is added on their controller.
        var leftovers: [ControllerIndex: Set<UInt16>] = [:]
    }

    private let state: Mutex<State>
    private let ledger: MonitorLedger?
    /// Held while the ledger is written, so that the last state is the one written last.
    private let writing = Mutex(())
    private let log: @Sendable (String) -> Void
    /// Told when passive scanning became possible or impossible (the channel opened or ended).
    private let availabilityChanged = Mutex<(@Sendable () -> Void)?>(nil)
    /// How long the kernel may take to answer a command.
    static let deadline = Duration.seconds(5)

    init(ledger: MonitorLedger? = nil, log: @escaping @Sendable (String) -> Void) {
        var state = State()
        state.leftovers = ledger?.load() ?? [:]
        self.state = Mutex(state)
        self.ledger = ledger
        self.log = log
        if !state.leftovers.isEmpty {
            log("passive scanning: the ledger lists monitors a gattway left on \(Self.list(state.leftovers)):"
                + " those the kernel still has are removed before passive scanning starts there")
        }
    }

    func onAvailabilityChange(_ handler: @escaping @Sendable () -> Void) { availabilityChanged.withLock { $0 = handler } }

    /// The channel reads; `supported`: it may send the monitor commands.
    func opened(_ channel: ManagementChannel, supported: Bool) {
        state.withLock { s in
            s.channel = channel
            s.unsupported = supported ? nil : "this kernel does not offer the advertisement monitor commands (Linux 5.10 or later does)"
            s.handles = [:]
        }
        availabilityChanged.withLock { $0 }?()
    }

    /// The channel ended: monitors can be neither added nor removed any more.
    func ended() {
        let left = state.withLock { s -> [ControllerIndex: UInt16] in
            defer {
                for (controller, handle) in s.handles { s.leftovers[controller, default: []].insert(handle) }
                s = State(leftovers: s.leftovers)
            }
            return s.handles
        }
        if !left.isEmpty {
            log("passive scanning: the management channel ended with monitors on \(Self.list(left.mapValues { [$0] })); the kernel keeps them"
                + " until they are removed (before passive scanning starts there again)")
            record()
        }
        availabilityChanged.withLock { $0 }?()
    }

    /// Why passive scanning cannot run here; nil when it can.
    var unavailable: String? {
        state.withLock { s in
            guard s.channel != nil else { return "advertisements come from BlueZ's D-Bus signals here, not the kernel's management socket" }
            return s.unsupported
        }
    }

    /// Monitors are in place on some controller.
    var running: Bool { state.withLock { !$0.handles.isEmpty } }

    /// A monitor on each of these adapters' controllers (one already there is kept) and none
    /// elsewhere; why not on some, if they refused (those that took one keep it).
    func start(onAdapters adapters: [String]) async -> String? {
        let controllers = Set(adapters.compactMap(ControllerIndex.init(adapterName:)))
        guard let channel = state.withLock({ $0.unsupported == nil ? $0.channel : nil }) else { return unavailable ?? "no channel" }
        let current = state.withLock { $0.handles }
        for (controller, handle) in current where !controllers.contains(controller) { await remove(handle, on: controller, channel) }
        var refusals: [String] = []
        for controller in controllers.sorted() where current[controller] == nil {
            do throws(ChannelError) {
                let handle = try await add(on: controller, channel)
                state.withLock { $0.handles[controller] = handle }
                record()
                log("passive scanning: advertisement monitor \(handle) added on \(controller)")
            } catch {
                refusals.append("\(controller): \(error)")
            }
        }
        return refusals.isEmpty ? nil : refusals.joined(separator: "; ")
    }

    /// Removes gattway's monitors: the controllers scan passively no more.
    func stop() async {
        guard let channel = state.withLock({ $0.channel }) else { return }
        for (controller, handle) in state.withLock({ $0.handles }).sorted(by: { $0.key < $1.key }) {
            await remove(handle, on: controller, channel)
        }
    }

    /// Shutdown: the removals are sent without waiting for their answers (the kernel carries
    /// them out after the socket closes).
    func close() {
        let (channel, handles) = state.withLock { s in
            defer { s.handles = [:] }
            return (s.channel, s.handles)
        }
        guard let channel else { return }
        for (controller, handle) in handles {
            _ = channel.post(.removeAdvertisementMonitor, controller: controller, parameters: AdvertisementMonitor.handleParameters(handle))
        }
        if !handles.isEmpty { record() }
    }

    /// Read Advertisement Monitor Features (room for one more?; the monitors a gattway left there
    /// are removed first), then Add Advertisement Patterns Monitor with patterns that match every
    /// advertisement; its handle.
    private func add(on controller: ControllerIndex, _ channel: ManagementChannel) async throws(ChannelError) -> UInt16 {
        var read = try await features(on: controller, channel)
        let left = state.withLock { $0.leftovers.removeValue(forKey: controller) ?? [] }
        let there = left.intersection(read.handles)
        for handle in there.sorted() {
            await remove(handle, on: controller, channel, leftover: true)
        }
        if !left.isEmpty { record() }
        if !there.isEmpty { read = try await features(on: controller, channel) }
        guard read.hasRoom else { throw ChannelError("the controller has \(read.handles.count) monitors, its most") }
        if !read.handles.isEmpty {
            // The kernel keeps a monitor until it is removed: another program's, or one a gattway
            // killed before it could remove it left with no ledger to find it by (no state
            // directory): `btmgmt --index N monitor.remove HANDLE`.
            log("passive scanning: \(controller) has monitors \(read.handles.map(String.init).joined(separator: ", ")) already")
        }
        let added = try await channel.command(.addAdvertisementPatternsMonitor, controller: controller,
                                              parameters: AdvertisementMonitor.addParameters(AdvertisementMonitor.everyAdvertisement),
                                              timeout: Self.deadline)
        guard added.status == .success, let handle = AdvertisementMonitor.handle(parsing: added.parameters) else {
            throw ChannelError("\(Opcode.addAdvertisementPatternsMonitor): \(added.status)")
        }
        return handle
    }

    private func features(on controller: ControllerIndex, _ channel: ManagementChannel) async throws(ChannelError) -> AdvertisementMonitorFeatures {
        let features = try await channel.command(.readAdvertisementMonitorFeatures, controller: controller, timeout: Self.deadline)
        guard features.status == .success, let read = AdvertisementMonitorFeatures(parameters: features.parameters) else {
            throw ChannelError("\(Opcode.readAdvertisementMonitorFeatures): \(features.status)")
        }
        return read
    }

    /// Writes gattway's monitors, and those left to remove, in the ledger (if there is one).
    private func record() {
        guard let ledger else { return }
        writing.withLock { _ in
            let monitors = state.withLock { s in
                s.handles.reduce(into: s.leftovers) { all, monitor in all[monitor.key, default: []].insert(monitor.value) }
            }
            if let problem = ledger.save(monitors) {
                log("passive scanning: cannot write down the monitors (\(problem)); a gattway killed now would leave them in the kernel")
            }
        }
    }

    /// Removes a monitor: gattway's own, or a `leftover` of a gattway that ended without removing it.
    private func remove(_ handle: UInt16, on controller: ControllerIndex, _ channel: ManagementChannel, leftover: Bool = false) async {
        do throws(ChannelError) {
            let answer = try await channel.command(.removeAdvertisementMonitor, controller: controller,
                                                   parameters: AdvertisementMonitor.handleParameters(handle), timeout: Self.deadline)
            // Invalid Parameters: it is gone already (the controller went away and came back);
            // Invalid Index: so is the controller.
            if answer.status != .success && answer.status != .invalidParameters && answer.status != .invalidIndex {
                log("passive scanning: removing monitor \(handle) on \(controller): \(answer.status)")
            }
        } catch {
            log("passive scanning: removing monitor \(handle) on \(controller): \(error)")
        }
        if !leftover {
            state.withLock { _ = $0.handles.removeValue(forKey: controller) }
            record()
        }
        log("passive scanning: advertisement monitor \(handle) removed on \(controller)"
            + (leftover ? " (left by a gattway that ended without removing it)" : ""))
    }

    private static func list(_ handles: [ControllerIndex: Set<UInt16>]) -> String {
        handles.sorted { $0.key < $1.key }.map { "\($0.key) (\($0.value.sorted().map(String.init).joined(separator: ", ")))" }
            .joined(separator: ", ")
    }
}
