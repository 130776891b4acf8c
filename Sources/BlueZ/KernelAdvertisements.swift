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
    /// The controllers the kernel listed when the channel opened; nil for a stream of frames
    /// (the simulator's), which is of BlueZ's adapters by construction.
    private let known = Mutex<Set<ControllerIndex>?>(nil)

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
        let opened: ManagementChannel?
        let why: String
        // The simulator's stream answers the monitor commands; a kernel says whether it does.
        var monitorCommands = true
        switch source {
        case .dbus:
            (opened, why) = (nil, "--advertisements dbus")
        case .auto:
            switch ManagementChannel.open(controllers: controllers, log: log, ended: ended, handler: handler) {
            case .opened(let c, let kernel):
                known.withLock { $0 = Set(kernel.controllers) }
                monitorCommands = [Opcode.readAdvertisementMonitorFeatures, .addAdvertisementPatternsMonitor, .removeAdvertisementMonitor]
                    .allSatisfy { kernel.supported.commands.contains($0.rawValue) }
                (opened, why) = (c, "the kernel's management socket")
            case .notPermitted(let reason): (opened, why) = (nil, "the kernel's management socket is not permitted (\(reason)); run as root or grant CAP_NET_ADMIN")
            case .unavailable(let reason): (opened, why) = (nil, "no kernel management socket here (\(reason))")
            }
        case .socket(let path):
            do throws(ChannelError) {
                (opened, why) = (try ManagementChannel.connect(socketPath: path, controllers: controllers, log: log, ended: ended, handler: handler),
                                 "the management events at \(path)")
            } catch {
                (opened, why) = (nil, "cannot read the management events at \(path) (\(error))")
            }
        case .descriptor(let fd):
            do throws(ChannelError) {
                (opened, why) = (try ManagementChannel(reading: fd, controllers: controllers, log: log, ended: ended, handler: handler),
                                 "the simulator's management events")
            } catch {
                (opened, why) = (nil, "cannot read the simulator's management events (\(error))")
            }
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

    /// The adapters in use changed: their events from now on. An adapter the kernel does not
    /// know is not this kernel's (BlueZ's bus bridged from another machine, as in the lab; a
    /// controller plugged in after the channel opened): then D-Bus, for all of them.
    func adaptersChanged() {
        guard let channel = channel.withLock({ $0 }) else { return }
        let inUse = controllers()
        if let known = known.withLock({ $0 }), let stranger = inUse.subtracting(known).min() {
            end("BlueZ's \(stranger) is not one of this kernel's controllers (\(known.sorted().map(\.description).joined(separator: ", ")))")
            return
        }
        channel.setControllers(inUse)
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
