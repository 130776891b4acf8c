import BLE
import DBus
import FoundationEssentials
import Synchronization
import Threading

/// BlueZ's discovery, and what it is for: the scan (until it is stopped, or its timeout), the
/// watch (a discovery of its own that lasts as long as the gateway, for sensors) and the devices
/// listened for (kept devices to connect again once heard). One BlueZ discovery serves them all:
/// its filter is what all can take (BlueZ merges every client's filters; what it cannot take is
/// applied to the advertisement reports). When BlueZ's discovery ends without this side stopping
/// it (the adapter reset or powered off and on, another client, bluetoothd restarting, the bus
/// coming back) it is started again.
///
/// A scan or watch that asks for passive scanning (`active: false`) runs no BlueZ discovery of
/// its own: the kernel's advertisement monitors (`AdvertisementMonitors`) make the controllers
/// scan passively while no discovery runs, and their reports come through the management
/// channel. Where monitors cannot be added, a passive watch scans actively (and says so); a
/// passive scan is refused where the channel does not read.
final class Discovery: Sendable {
    private let link: BusLink
    private let devices: DeviceList
    private let monitors: AdvertisementMonitors
    private let log: @Sendable (String) -> Void
    /// Devices listened for (to be connected again once heard): discovery runs meanwhile.
    let hearing: Hearing
    private let state = Mutex(Wanted())
    /// Starting and stopping take several BlueZ calls each; one runs at a time, so that a stop
    /// cannot interleave with a start.
    private let calls = SerialQueues<Int>(maxWaiting: 64, maxWait: .seconds(60))
    /// Restarts of a discovery that ended by itself, and the one scheduled.
    private let restarts = Mutex<(count: Int, failures: Int, timer: Task<Void, Never>?)>((0, 0, nil))

    /// What the discovery is for.
    private struct Wanted {
        var scanning = false
        var options: ScanOptions?
        var startedAt: Date?
        var stopsAt: Date?
        /// Bumped by every start and stop, so that an old timeout cannot stop a newer scan.
        var generation = 0
        /// The running watch's options, and since when.
        var watch: (options: WatchOptions, since: Date)?
        /// Devices are listened for (`Hearing`).
        var listening = false
        /// Passive scanning was asked for and cannot run (no monitor could be added): the
        /// passive scan or watch scans actively instead.
        var passiveFallback = false

        /// The scan, the watch, scan actively (BlueZ's discovery).
        var scanActive: Bool { scanning && (options?.active != false || passiveFallback) }
        var watchActive: Bool { watch.map { $0.options.active || passiveFallback } ?? false }
        /// The scan or the watch asks for passive scanning.
        var passiveWanted: Bool { (scanning && options?.active == false) || watch?.options.active == false }
        /// Monitors should be in place.
        var monitoring: Bool { passiveWanted && !passiveFallback }

        /// Whether BlueZ's discovery should run (for an active scan or watch, or devices listened for).
        var discovering: Bool { scanActive || watchActive || listening }

        /// The discovery filter that serves them all.
        var filter: [(String, Value)] {
            Discovery.filter(scan: scanActive ? options : nil, watch: watchActive ? watch?.options : nil, listening: listening)
        }

        mutating func end() {
            scanning = false
            stopsAt = nil
            generation += 1
        }
    }

    init(link: BusLink, devices: DeviceList, hearing: Hearing, monitors: AdvertisementMonitors, log: @escaping @Sendable (String) -> Void) {
        self.link = link
        self.devices = devices
        self.hearing = hearing
        self.monitors = monitors
        self.log = log
        monitors.onAvailabilityChange { [weak self] in self?.passiveAvailabilityChanged() }
    }

    private var tree: ObjectTree { link.tree }
    private var index: GATTIndex { link.index }

    /// What advertisement reports are matched against: the running scan's options, the watch's.
    func wanted() -> (scan: ScanOptions?, watch: WatchOptions?) {
        state.withLock { s in (s.scanning ? s.options : nil, s.watch?.options) }
    }

    // MARK: - The scan

    func start(_ options: ScanOptions) async throws(BLEError) -> ScanStatus {
        try await calls.run(0, refused: Self.refusal) { () async throws(BLEError) -> ScanStatus in try await self.startNow(options) }
    }

    func stop() async throws(BLEError) -> ScanStatus {
        try await calls.run(0, refused: Self.refusal) { () async throws(BLEError) -> ScanStatus in try await self.stopNow() }
    }

    func status() -> ScanStatus {
        let s = state.withLock { $0 }
        return ScanStatus(scanning: s.scanning, options: s.options, startedAt: s.startedAt, stopsAt: s.stopsAt, discovered: devices.scanCount,
                          mode: s.scanning ? mode(passive: !s.scanActive, s) : nil)
    }

    /// How the controllers scan for a scan or watch that asked for `passive`: passively while
    /// monitors are in place and no adapter in use discovers (the watch's discovery, a
    /// connect's, another program's make them scan actively).
    private func mode(passive: Bool, _ s: Wanted) -> ScanMode {
        guard passive, s.monitoring, monitors.running else { return .active }
        return adaptersDiscovering ? .active : .passive
    }

    private var adaptersDiscovering: Bool {
        index.adapterPaths().contains { tree.properties(at: $0, BlueZ.adapterInterface)?["Discovering"]?.bool == true }
    }

    private static func refusal(_ refusal: SerialQueues<Int>.Refusal) -> BLEError {
        BLEError(refusal: refusal, waitingFor: "the adapter's scan calls")
    }

    private func startNow(_ options: ScanOptions) async throws(BLEError) -> ScanStatus {
        try options.validate()
        if !options.active, let why = monitors.unavailable {
            throw BLEError(.operationNotSupported, "passive scanning works only on the kernel's advertisement path: \(why)")
        }
        // What the discovery becomes with this scan (a passive scan's fallback starts afresh).
        let (next, wasMonitoring) = state.withLock { s -> (Wanted, Bool) in
            var next = s
            next.scanning = true
            next.options = options
            if !options.active { next.passiveFallback = false }
            return (next, s.monitoring)
        }
        // Always asked: BlueZ ends every discovery when the adapter powers off, whatever this
        // side believes.
        if next.discovering {
            try await discoverOnEveryAdapter(filter: next.filter)
        } else {
            _ = try link.usableAdapter()  // as for a discovery: Bluetooth must be on
        }
        let now = Date()
        let generation = state.withLock { s -> Int in
            s.generation += 1
            s.scanning = true
            s.options = options
            if !options.active { s.passiveFallback = false }
            s.startedAt = now
            s.stopsAt = options.timeout.map { now.addingTimeInterval($0) }
            return s.generation
        }
        // Passive: BlueZ's discovery stops unless another wants it, and the monitors go in.
        if next.monitoring || wasMonitoring { await discoveryNeeded() }
        devices.scanStarted()
        log("scan started: \(Self.describe(options))")
        if let timeout = options.timeout {
            Task { [weak self] in
                try? await Task.sleep(for: .milliseconds(Int(timeout * 1000)))
                guard let self, self.state.withLock({ $0.scanning && $0.generation == generation }) else { return }
                _ = try? await self.stop()
            }
        }
        return self.status()
    }

    private func stopNow() async throws(BLEError) -> ScanStatus {
        let wasScanning = state.withLock { s -> Bool in
            defer { s.end() }
            return s.scanning
        }
        if wasScanning {
            await discoveryNeeded()
            log("scan stopped")
        }
        return status()
    }

    /// After the scan, the watch or the listening stopped (or turned passive): BlueZ's discovery
    /// goes on with the filter of what remains, or stops; the monitors follow.
    private func discoveryNeeded() async {
        for adapter in index.adapterPaths() {
            do {
                if let filter = state.withLock({ $0.discovering ? $0.filter : nil }) {
                    try await adapterCall(adapter, "SetDiscoveryFilter", [.stringVariantDictionary(filter)])
                    continue
                }
                try await adapterCall(adapter, "StopDiscovery")
                try await adapterCall(adapter, "SetDiscoveryFilter", [.emptyDictionary(key: "s", value: "v")])
            } catch {
                // "No discovery started" (a passive scan started none) or a powered-off adapter:
                // the discovery is over either way.
                if error.message.contains("No discovery started") || error.detail?.contains("No discovery started") == true { continue }
                log("stopping discovery on \(adapter.lastElement): \(error)")
            }
        }
        await monitorsNeeded()
    }

    /// The monitors in place while passive scanning is wanted, removed when it is not. Where
    /// none could be added, the passive scan or watch scans actively instead.
    private func monitorsNeeded() async {
        guard state.withLock({ $0.monitoring }) else {
            if monitors.running { await monitors.stop() }
            return
        }
        let adapters = link.usableAdapters().map { String($0.lastElement) }
        guard let refused = await monitors.start(onAdapters: adapters) else { return }
        guard !monitors.running else { return log("passive scanning: \(refused)") }
        let filter = state.withLock { s -> [(String, Value)] in
            s.passiveFallback = true
            return s.filter
        }
        log("passive scanning is not possible (\(refused)); scanning actively instead")
        do throws(BLEError) { try await discoverOnEveryAdapter(filter: filter) } catch { log("discovery: \(error.message)") }
    }

    /// The management channel opened or ended: a passive scan or watch is set up again (actively
    /// without monitors, passively with).
    private func passiveAvailabilityChanged() {
        let possible = monitors.unavailable == nil
        let wanted = state.withLock { s -> Bool in
            s.passiveFallback = !possible
            return s.passiveWanted
        }
        guard wanted else { return }
        Task { [weak self] in
            guard let self else { return }
            try? await self.calls.run(0, refused: Self.refusal) { () async throws(BLEError) in
                if let filter = self.state.withLock({ $0.discovering ? $0.filter : nil }) {
                    try? await self.discoverOnEveryAdapter(filter: filter)
                }
                await self.discoveryNeeded()
            }
        }
    }

    /// The same discovery on every usable adapter in use; an error only when none runs it.
    private func discoverOnEveryAdapter(filter: [(String, Value)]) async throws(BLEError) {
        _ = try link.usableAdapter()
        var failure: BLEError?
        var started = 0
        for adapter in link.usableAdapters() {
            do throws(BLEError) {
                try await discover(adapter, filter: filter)
                started += 1
            } catch {
                log("discovery on \(adapter.lastElement): \(error.message)")
                failure = error
            }
        }
        if started == 0, let failure { throw failure }
    }

    // MARK: - The watch

    func startWatch(_ options: WatchOptions) async throws(BLEError) -> WatchStatus {
        try options.validate()
        return try await calls.run(0, refused: Self.refusal) { () async throws(BLEError) -> WatchStatus in
            let (replaced, filter, passiveChanged) = self.state.withLock { s -> (Bool, [(String, Value)]?, Bool) in
                let replaced = s.watch != nil
                let wasMonitoring = s.monitoring
                s.watch = (options, Date())
                if !options.active { s.passiveFallback = self.monitors.unavailable != nil }
                return (replaced, s.discovering ? s.filter : nil, wasMonitoring || s.monitoring)
            }
            // Replaced options start afresh, as a new scan does: only what matches them is listed.
            self.devices.watching(true)
            self.log("watch \(replaced ? "changed" : "started"): \(Self.describe(options))")
            // The watch is on from here, whatever BlueZ says now: when the adapter is not usable
            // (off, bluetoothd away) the discovery starts when it is.
            if let filter {
                do throws(BLEError) {
                    try await self.discoverOnEveryAdapter(filter: filter)
                } catch {
                    self.log("watch: not discovering yet (\(error.message)); it starts when the adapter is usable")
                }
            }
            // A passive watch: BlueZ's discovery stops unless another wants it, the monitors go in.
            if passiveChanged { await self.discoveryNeeded() }
            return self.watchStatus()
        }
    }

    func stopWatch() async throws(BLEError) -> WatchStatus {
        try await calls.run(0, refused: Self.refusal) { () async throws(BLEError) -> WatchStatus in
            let wasWatching = self.state.withLock { s -> Bool in
                defer { s.watch = nil }
                return s.watch != nil
            }
            self.devices.watching(false)
            if wasWatching {
                await self.discoveryNeeded()
                self.log("watch stopped")
            }
            return self.watchStatus()
        }
    }

    func watchStatus() -> WatchStatus {
        let s = state.withLock { $0 }
        guard let watch = s.watch else { return .off }
        let mode = mode(passive: !s.watchActive, s)
        return WatchStatus(watching: true, options: watch.options, since: watch.since, discovering: mode == .passive || adaptersDiscovering,
                           devices: devices.watchCount, mode: mode)
    }

    /// Discoveries restarted after BlueZ ended them by itself.
    var restartCount: Int { restarts.withLock { $0.count } }

    /// BlueZ's discovery ended, or may have, without this side stopping the scan: start it again
    /// (soon, and with backoff while it fails).
    private func discoveryEnded(_ why: String) {
        guard state.withLock({ $0.discovering }) else { return }
        restarts.withLock { r in
            guard r.timer == nil else { return }
            let delay = Duration.milliseconds(min(30_000, 200 << min(r.failures, 7)))
            log("discovery ended (\(why)); scanning again in \(delay)")
            r.timer = Task { [weak self] in
                do { try await Task.sleep(for: delay) } catch { return }
                await self?.restartDiscovery()
            }
        }
    }

    private func restartDiscovery() async {
        restarts.withLock { $0.timer = nil }
        guard state.withLock({ $0.discovering }) else { return }
        do {
            try await calls.run(0, refused: Self.refusal) { () async throws(BLEError) in
                let (wanted, filter, options, watch) = self.state.withLock {
                    ($0.discovering, $0.filter, $0.scanning ? $0.options : nil, $0.watch?.options)
                }
                guard wanted else { return }
                _ = try self.link.usableAdapter()
                // Every usable adapter that is not discovering: the one that ended, one that came.
                let ended = self.link.usableAdapters().filter {
                    self.tree.properties(at: $0, BlueZ.adapterInterface)?["Discovering"]?.bool != true
                }
                guard !ended.isEmpty else { return }
                for adapter in ended { try await self.discover(adapter, filter: filter) }
                self.restarts.withLock { $0.count += 1; $0.failures = 0 }
                let on = self.index.adapterPaths().count > 1 ? " on " + ended.map { String($0.lastElement) }.joined(separator: ", ") : ""
                self.log((options.map { "scan started again\(on): \(Self.describe($0))" } ?? "discovery started again\(on)")
                         + (watch.map { options == nil ? " for the watch: \(Self.describe($0))" : ", with the watch" }
                            ?? (options == nil ? " to hear devices to connect again" : "")))
            }
        } catch {
            // Not usable yet (powered off, no bluetoothd): a state change starts it; else try later.
            restarts.withLock { $0.failures += 1 }
            if link.status().state == .poweredOn { discoveryEnded("starting it again failed: \(error.message)") }
        }
    }

    /// SetDiscoveryFilter (when given), then StartDiscovery; InProgress means this connection
    /// discovers already.
    private func discover(_ adapter: ObjectPath, filter: [(String, Value)]?) async throws(BLEError) {
        if let filter { try await adapterCall(adapter, "SetDiscoveryFilter", [.stringVariantDictionary(filter)]) }
        do {
            try await adapterCall(adapter, "StartDiscovery")
        } catch where error.detail?.contains("InProgress") == true {
        }
    }

    private func adapterCall(_ adapter: ObjectPath, _ member: String, _ body: [Value] = []) async throws(BLEError) {
        do {
            _ = try await link.call(.methodCall(destination: BlueZ.service, path: adapter, interface: BlueZ.adapterInterface,
                                                           member: member, body), timeout: BusLink.callDeadline)
        } catch {
            throw ErrorMapping.map(error, context: .adapter)
        }
    }

    /// What BlueZ's discovery filter can take of the scan's options and the watch's (the rest
    /// is applied here): the scan's alone; with the watch, what lets both see all they want.
    /// The watch never pushes its services down: BlueZ matches UUIDs against advertised service
    /// UUIDs only, and most sensors send service data alone. Listening for devices pushes
    /// nothing down either, and asks for every advertisement (DuplicateData): BlueZ then signals
    /// each one it receives, which is how a device is heard.
    static func filter(scan options: ScanOptions?, watch: WatchOptions?, listening: Bool = false) -> [(String, Value)] {
        if listening { return [("Transport", .string("le")), ("DuplicateData", .bool(true))] }
        guard let watch else {
            guard let options else { return [("Transport", .string("le"))] }
            var filter: [(String, Value)] = [("Transport", .string("le")), ("DuplicateData", .bool(options.allowDuplicates))]
            if !options.services.isEmpty { filter.append(("UUIDs", .strings(options.services.map(\.uuidString)))) }
            if let rssi = options.rssi { filter.append(("RSSI", .int16(Int16(rssi)))) }
            return filter
        }
        var filter: [(String, Value)] = [("Transport", .string("le")), ("DuplicateData", .bool(true))]
        // A floor both have (the lower), or the watch's alone.
        let floor = options.map { scan in scan.rssi.flatMap { r in watch.rssi.map { min(r, $0) } } } ?? watch.rssi
        if let floor { filter.append(("RSSI", .int16(Int16(floor)))) }
        return filter
    }

    static func describe(_ options: WatchOptions) -> String {
        var parts: [String] = []
        if !options.devices.isEmpty { parts.append("devices=" + options.devices.map(\.description).joined(separator: ",")) }
        if !options.services.isEmpty { parts.append("services=" + shortList(options.services)) }
        if let prefix = options.namePrefix { parts.append("namePrefix=\(prefix)") }
        if let rssi = options.rssi { parts.append("rssi>=\(rssi)") }
        if !options.active { parts.append("passive") }
        return parts.isEmpty ? "every device" : parts.joined(separator: " ")
    }

    private static func shortList(_ uuids: [BluetoothUUID]) -> String { uuids.map { $0.shortForm ?? $0.uuidString }.joined(separator: ",") }

    static func describe(_ options: ScanOptions) -> String {
        var parts: [String] = []
        if !options.services.isEmpty { parts.append("services=" + shortList(options.services)) }
        if let name = options.name { parts.append("name=\(name)") }
        if let prefix = options.namePrefix { parts.append("namePrefix=\(prefix)") }
        if let rssi = options.rssi { parts.append("rssi>=\(rssi)") }
        if let timeout = options.timeout { parts.append("timeout=\(timeout)s") }
        if !options.active { parts.append("passive") }
        return parts.isEmpty ? "no filters" : parts.joined(separator: " ")
    }

    /// Listens for `id` from now on (discovery runs meanwhile, this side's own when no scan or
    /// watch does): `hearing` says when it advertises.
    func listen(_ id: BluetoothAddress) async {
        hearing.listen(id)
        await listeningChanged()
    }

    /// Stops listening for `id`; the discovery ends with the last device listened for (unless a
    /// scan or the watch goes on).
    func stopListening(_ id: BluetoothAddress) async {
        hearing.forget(id)
        await listeningChanged()
    }

    /// Waits until BlueZ knows `id` (it advertised), listening for it meanwhile when it does
    /// not; false after `deadline`.
    func lookFor(_ id: BluetoothAddress, within deadline: Duration) async -> Bool {
        if (try? index.devicePath(id)) != nil { return true }
        let listened = hearing.isListened(id)
        if !listened { await listen(id) }
        let found = await hearing.wait(id, within: deadline)
        if !listened { await stopListening(id) }
        return found || (try? index.devicePath(id)) != nil
    }

    /// Starts, retunes or ends the discovery as listening began or ended.
    private func listeningChanged() async {
        let listening = hearing.listening
        let (changed, others) = state.withLock { s -> (Bool, Bool) in
            defer { s.listening = listening }
            return (s.listening != listening, s.scanning || s.watch != nil)
        }
        guard changed, index.adapterPath() != nil else { return }
        if listening && !others { log("discovery started to hear devices to connect again") }
        do {
            // What is wanted when the turn comes (a later change may have come first).
            try await calls.run(0, refused: Self.refusal) { () async throws(BLEError) in
                if let filter = self.state.withLock({ $0.discovering ? $0.filter : nil }) {
                    try await self.discoverOnEveryAdapter(filter: filter)
                } else {
                    await self.discoveryNeeded()
                }
            }
        } catch {
            log("discovery for devices to connect again: \(error.message)")
        }
    }

    // MARK: - What the tree says

    /// BlueZ's discovery ended by itself, or may have: an adapter change, a reload. The
    /// adapters usable changed: the monitors follow them.
    func observe(_ change: ObjectTree.Change) {
        switch change {
        case .properties(let p, let interface, let changed, _) where interface == BlueZ.adapterInterface:
            guard index.isInUse(adapter: p) else { return }
            if changed["Discovering"]?.bool == false { discoveryEnded("BlueZ stopped discovering on \(p.lastElement)") }
            if changed["Powered"]?.bool == true { discoveryEnded("\(p.lastElement) is powered on again") }
            if changed["Powered"] != nil { usableAdaptersChanged() }
        case .reloaded:
            if index.adapterPath() != nil { discoveryEnded("BlueZ's objects were reloaded") }
            usableAdaptersChanged()
        case .added(let p, let interfaces) where interfaces[BlueZ.adapterInterface] != nil:
            // bluetoothd owns its name before it exports the adapters: a reload may find none,
            // and the adapter then comes as InterfacesAdded, powered already (no change signal).
            // A dongle plugged in comes the same way.
            if index.isInUse(adapter: p) { discoveryEnded("\(p.lastElement) appeared") }
            usableAdaptersChanged()
        case .removed(_, let names) where names.contains(BlueZ.adapterInterface):
            usableAdaptersChanged()
        default:
            break
        }
    }

    /// While passive scanning runs: a monitor on each usable adapter in use (one powered on or
    /// plugged in gets one; the kernel drops those of a controller that goes away).
    private func usableAdaptersChanged() {
        guard state.withLock({ $0.monitoring }) else { return }
        Task { [weak self] in
            guard let self else { return }
            try? await self.calls.run(0, refused: Self.refusal) { () async throws(BLEError) in await self.monitorsNeeded() }
        }
    }
}
