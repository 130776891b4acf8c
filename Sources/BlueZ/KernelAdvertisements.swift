import BLE
import DBus
import Management
import Synchronization

/// Where gattway reads advertisements from (issue 36).
public enum AdvertisementSource: Sendable, Equatable {
    /// The kernel's management socket when this process may read it (root or CAP_NET_ADMIN),
    /// else BlueZ's D-Bus signals.
    case auto
    /// BlueZ's D-Bus signals only.
    case dbus
    /// The same events from a Unix seqpacket socket at this path (a simulator's stream).
    case socket(String)
    /// The same events from this descriptor, which the central then owns (the embedded
    /// simulator's socketpair).
    case descriptor(Int32)
}

/// The kernel's management events beside BlueZ: each advertisement as the controller reported
/// it, read on the channel's own thread and told as BlueZ's signals were (`AdvertisementReports`),
/// while BlueZ stays the source of devices, connections, GATT and pairing, and discovery is still
/// started through it. While the channel reads, bluetoothd's Device1 signals are read only for
/// engaged devices (`PropertySignals`). When it ends, D-Bus takes over again.
final class KernelAdvertisements: Sendable {
    private let link: BusLink
    private let reports: AdvertisementReports
    private let source: AdvertisementSource
    private let log: @Sendable (String) -> Void
    /// Passive scanning, on the same channel.
    private let monitors: AdvertisementMonitors
    private let channel = Mutex<ManagementChannel?>(nil)
    private let controllerState = Mutex(ControllerState())

    /// What the channel's controllers are waiting on.
    private struct ControllerState {
        /// Controllers the kernel removed (Index Removed) that BlueZ may still list a moment.
        var departed: Set<ControllerIndex> = []
        /// The kernel was asked for its controllers (`askControllers`) and has not answered: this
        /// question's number, and the adapters it was asked about.
        var question: (number: Int, about: Set<ControllerIndex>)?
        var questions = 0
    }

    /// The commands passive scanning sends (`AdvertisementMonitors`).
    static let monitorOpcodes: [Opcode] = [.readAdvertisementMonitorFeatures, .addAdvertisementPatternsMonitor, .removeAdvertisementMonitor]

    /// How long the kernel may take to list its controllers when asked.
    static let answerDeadline = Duration.seconds(2)

    init(link: BusLink, reports: AdvertisementReports, source: AdvertisementSource, monitors: AdvertisementMonitors,
         log: @escaping @Sendable (String) -> Void) {
        self.link = link
        self.reports = reports
        self.source = source
        self.monitors = monitors
        self.log = log
    }

    /// Opens the channel (before the bus link starts, so that its first rules are already the
    /// narrow ones) and says in one line which path advertisements take.
    func start() async {
        let controllers = self.controllers()
        let ended: @Sendable (String) -> Void = { [weak self] reason in self?.ended(reason) }
        let news: @Sendable (ManagementChannel.ControllerNews) -> Void = { [weak self] news in self?.controllersChanged(news) }
        let handler: @Sendable (ManagementEvent) -> Void = { [reports, link] event in
            switch event {
            case .deviceFound(let found):
                reports.heard(found)
            case .deviceConnected(let connected):
                // A link this side did not ask for (a remote central, another client): BlueZ's
                // signals about it are read from now on.
                guard let path = link.index.devicePath(connected.address,
                                                       onAdapter: AdvertisementReports.adapterName(connected.controller.rawValue)) else { return }
                Task { await link.engage(path) }
            case .deviceDisconnected:
                break  // BlueZ's Connected=false of an engaged device tells it.
            }
        }
        let opening: ManagementChannel.Opening
        let named: String
        switch source {
        case .dbus:
            log("advertisements: from BlueZ's D-Bus signals (--advertisements dbus)")
            return
        case .auto:
            opening = ManagementChannel.open(controllers: controllers, log: log, ended: ended, controllersChanged: news, handler: handler)
            named = "the kernel's management socket"
        case .socket(let path):
            opening = ManagementChannel.open(socketPath: path, controllers: controllers, log: log, ended: ended, controllersChanged: news,
                                             handler: handler)
            named = "the management events at \(path)"
        case .descriptor(let fd):
            opening = ManagementChannel.open(descriptor: fd, controllers: controllers, log: log, ended: ended, controllersChanged: news,
                                             handler: handler)
            named = "the simulator's management events"
        }
        let opened: ManagementChannel?
        let why: String
        // Whether it takes the monitor commands (passive scanning), as the kernel (or the
        // simulator's stream) says in its Read Management Supported Commands answer.
        var monitorCommands = false
        switch (opening, source) {
        case (.opened(let c, let kernel), _):
            monitorCommands = Self.monitorOpcodes.allSatisfy { kernel.supported.commands.contains($0.rawValue) }
            (opened, why) = (c, named)
        case (.notPermitted(let reason), .auto):
            (opened, why) = (nil, "\(named) is not permitted (\(reason)); run as root or grant CAP_NET_ADMIN")
        case (.unavailable(let reason), .auto):
            (opened, why) = (nil, "no kernel management socket here (\(reason))")
        case (.notPermitted(let reason), _), (.unavailable(let reason), _):
            (opened, why) = (nil, "cannot read \(named) (\(reason))")
        }
        guard let opened else {
            log("advertisements: from BlueZ's D-Bus signals (\(why))")
            return
        }
        channel.withLock { $0 = opened }
        monitors.opened(opened, supported: monitorCommands)
        await link.signals.setScope(.engagedDevices)
        log("advertisements: from \(why); BlueZ's device signals only for devices gattway connects, pairs or finds linked")
    }

    /// The adapters in use, or the kernel's controllers, changed: the events of those in use that
    /// the kernel has, from now on. An adapter in use that the kernel does not have is not this
    /// kernel's (BlueZ's bus bridged from another machine, as in the lab): then D-Bus, for all of
    /// them. But the channel's thread may not have read yet the Index Added of a controller just
    /// plugged in when the bus's thread reads its adapter (bluetoothd exports it after the kernel
    /// told every socket): the kernel is asked for its list first, whose answer comes after that
    /// event, and only a stranger it was asked about and still is one is.
    func adaptersChanged(listed: Bool = false) {
        guard let channel = channel.withLock({ $0 }) else { return }
        let inUse = controllers(), known = channel.kernelControllers
        let (strangers, askedAbout) = controllerState.withLock { state in
            // An adapter the kernel removed stays in BlueZ's list until bluetoothd withdraws it.
            state.departed.formIntersection(inUse)
            let asked = listed ? state.question?.about ?? [] : []
            if listed { state.question = nil }
            return (inUse.subtracting(known).subtracting(state.departed), asked)
        }
        channel.setControllers(inUse.intersection(known))
        if let stranger = strangers.intersection(askedAbout).min() {
            return end("BlueZ's \(stranger) is not one of this kernel's controllers (\(known.sorted().map(\.description).joined(separator: ", ")))")
        }
        if !strangers.isEmpty { ask(channel, about: strangers) }
    }

    /// Asks the kernel for its controllers, unless a question is out already (its answer asks
    /// again for a stranger it was not about); D-Bus if it does not answer within the deadline.
    private func ask(_ channel: ManagementChannel, about strangers: Set<ControllerIndex>) {
        let question: Int? = controllerState.withLock { state in
            guard state.question == nil else { return nil }
            state.questions += 1
            state.question = (state.questions, strangers)
            return state.questions
        }
        guard let question else { return }
        guard channel.askControllers() else { return end("the kernel could not be asked for its controllers") }
        let shown = strangers.sorted().map(\.description).joined(separator: ", ")
        Task { [weak self] in
            try? await Task.sleep(for: Self.answerDeadline)
            guard let self, controllerState.withLock({ $0.question?.number == question }) else { return }
            end("the kernel did not list its controllers within \(Self.answerDeadline) when BlueZ showed \(shown)")
        }
    }

    /// The channel read of a controller the kernel came to have or lost, or the kernel's list.
    private func controllersChanged(_ news: ManagementChannel.ControllerNews) {
        switch news {
        case .index(.added(let c)):
            controllerState.withLock { _ = $0.departed.remove(c) }
            log("advertisements: the kernel has a new controller, \(c)")
        case .index(.removed(let c)):
            controllerState.withLock { _ = $0.departed.insert(c) }
            log("advertisements: the kernel's controller \(c) is gone")
        case .listed:
            break
        }
        adaptersChanged(listed: news == .listed)
    }

    /// Counters, for /metrics.
    var counters: ManagementChannel.Counters? { channel.withLock { $0 }?.counters }

    func close() {
        monitors.close()
        channel.withLock { c in defer { c = nil }; return c }?.close()
    }

    /// The channel ended by itself: back to D-Bus.
    private func ended(_ reason: String) {
        guard channel.withLock({ c in defer { c = nil }; return c != nil }) else { return }
        log("advertisements: the management channel ended (\(reason)); from BlueZ's D-Bus signals from now on")
        monitors.ended()
        backToDBus()
    }

    /// The channel is of no use here: closed, and back to D-Bus.
    private func end(_ reason: String) {
        guard let closing = channel.withLock({ c in defer { c = nil }; return c }) else { return }
        monitors.close()
        monitors.ended()
        closing.close()
        log("advertisements: from BlueZ's D-Bus signals (\(reason))")
        backToDBus()
    }

    /// Every device's signals again, and their properties read anew (those not engaged went unread).
    private func backToDBus() {
        Task { [link] in
            await link.signals.setScope(.everything)
            await link.reload()
        }
    }

    private func controllers() -> Set<ControllerIndex> {
        Set(link.index.adapterPaths().compactMap { ControllerIndex(adapterName: String($0.lastElement)) })
    }
}
