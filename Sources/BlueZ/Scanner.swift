import BLE
import DBus
import FoundationEssentials
import Synchronization
import Threading

/// Discovery: the scan and its filters (pushed down to BlueZ where it can take them, the rest
/// applied here), the devices it found, and the device list that `GET /v1/devices` shows; and
/// the watch, a discovery of its own that lasts as long as the gateway, for sensors. One BlueZ
/// discovery serves both (its filter is what both can take). A scan lasts until it is stopped
/// (or its timeout), the watch until it is stopped: when BlueZ's discovery ends without that
/// (the adapter reset or powered off and on, another client, bluetoothd restarting, the bus
/// coming back) it is started again.
final class Scanner: Sendable {
    private let link: BusLink
    private let events: HandlerSlot<CentralEvent>
    private let log: @Sendable (String) -> Void
    /// Devices being connected or disconnected right now (the connector says which).
    private let moving = Mutex<[BluetoothAddress: PeripheralState]>([:])
    /// Devices the connector keeps connected, and where each stands: listed even when unseen.
    private let reconnects = Mutex<[BluetoothAddress: ReconnectStatus]>([:])
    /// Tasks waiting for a device to appear (`lookFor`), and whether this side started the
    /// discovery they need.
    private let lookers = Mutex<(waiting: [Int: (id: BluetoothAddress, continuation: CheckedContinuation<Bool, Never>)], next: Int, discovering: Bool)>(([:], 0, false))
    private let scan = Mutex(ScanState())
    /// Starting and stopping take several BlueZ calls each; one runs at a time, so that a stop
    /// cannot interleave with a start.
    private let calls = SerialQueues<Int>(maxWaiting: 64, maxWait: .seconds(60))
    /// Bumped by every change that can change `peripherals()`.
    private let listVersion = Atomic<UInt64>(0)
    /// What `observe` last made of each device BlueZ has (path → snapshot): an advertisement
    /// changes a few properties, and only those are read again. Entries go with their objects
    /// (InterfacesRemoved) and all at a reload, so it holds no more than the mirror does.
    private let snapshots = Mutex<[ObjectPath: PeripheralInfo]>([:])
    /// Restarts of a discovery that ended by itself, and the one scheduled.
    private let restarts = Mutex<(count: Int, failures: Int, timer: Task<Void, Never>?)>((0, 0, nil))

    private struct ScanState {
        var scanning = false
        var options: ScanOptions?
        var startedAt: Date?
        var stopsAt: Date?
        /// Devices that matched since the scan started, with when they were last seen.
        var seen: [BluetoothAddress: Date] = [:]
        /// What each of them looked like when last seen: listed (stale) after BlueZ forgot it.
        var last: [BluetoothAddress: PeripheralInfo] = [:]
        /// Bumped by every start and stop, so that an old timeout cannot stop a newer scan.
        var generation = 0
        /// The running watch, if any.
        var watch: Watch?

        /// Whether BlueZ's discovery should run (for a scan or the watch).
        var discovering: Bool { scanning || watch != nil }

        var status: ScanStatus {
            ScanStatus(scanning: scanning, options: options, startedAt: startedAt, stopsAt: stopsAt, discovered: seen.count)
        }

        mutating func end() {
            scanning = false
            stopsAt = nil
            generation += 1
        }
    }

    /// The watch and the devices it heard: bounded, and forgetting the ones not heard for
    /// `forgetAfter` seconds (phones change their random addresses every few minutes).
    private struct Watch {
        var options: WatchOptions
        var since: Date
        var forgetAfter: Double
        var heard: [BluetoothAddress: Date] = [:]
        var last: [BluetoothAddress: PeripheralInfo] = [:]

        static let limit = 1024

        /// Notes a device heard now; whether it is new to the watch.
        mutating func hear(_ address: BluetoothAddress, _ snapshot: PeripheralInfo?, at now: Date) -> Bool {
            let known = heard[address] != nil
            if !known, heard.count >= Self.limit { forget(before: now.addingTimeInterval(-forgetAfter)) }
            if !known, heard.count >= Self.limit, let oldest = heard.min(by: { $0.value < $1.value })?.key {
                heard[oldest] = nil
                last[oldest] = nil
            }
            heard[address] = now
            last[address] = snapshot ?? last[address]
            return !known
        }

        mutating func forget(before cutoff: Date) {
            for (address, at) in heard where at < cutoff {
                heard[address] = nil
                last[address] = nil
            }
        }
    }

    /// A device not seen for this long is listed as `stale`.
    let staleAfter: Double
    /// The watch forgets a device not heard for this long.
    let forgetAfter: Double

    init(link: BusLink, events: HandlerSlot<CentralEvent>, staleAfter: Duration = .seconds(60), forgetAfter: Duration = .seconds(3600),
         log: @escaping @Sendable (String) -> Void) {
        self.staleAfter = staleAfter.inSeconds
        self.forgetAfter = forgetAfter.inSeconds
        self.link = link
        self.events = events
        self.log = log
    }

    private var tree: ObjectTree { link.tree }
    private var index: GATTIndex { link.index }

    // MARK: - The scan

    func start(_ options: ScanOptions) async throws(BLEError) -> ScanStatus {
        try await calls.run(0, refused: Self.refusal) { () async throws(BLEError) -> ScanStatus in try await self.startNow(options) }
    }

    func stop() async throws(BLEError) -> ScanStatus {
        try await calls.run(0, refused: Self.refusal) { () async throws(BLEError) -> ScanStatus in try await self.stopNow() }
    }

    func status() -> ScanStatus { scan.withLock { $0.status } }

    private static func refusal(_ refusal: SerialQueues<Int>.Refusal) -> BLEError {
        BLEError(refusal: refusal, waitingFor: "the adapter's scan calls")
    }

    private func startNow(_ options: ScanOptions) async throws(BLEError) -> ScanStatus {
        try options.validate()
        guard options.active else {
            throw BLEError(.operationNotSupported, "passive scanning is not supported: BlueZ 5.66 only scans actively through Adapter1")
        }
        let adapter = try link.usableAdapter()
        // Always asked: BlueZ ends every discovery when the adapter powers off, whatever this
        // side believes.
        try await discover(adapter, filter: Self.filter(scan: options, watch: scan.withLock { $0.watch?.options }))
        let now = Date()
        let (status, generation) = scan.withLock { s -> (ScanStatus, Int) in
            s.generation += 1
            s.scanning = true
            s.options = options
            s.startedAt = now
            s.stopsAt = options.timeout.map { now.addingTimeInterval($0) }
            s.seen.removeAll()
            s.last.removeAll()
            return (s.status, s.generation)
        }
        listChanged()
        log("scan started: \(Self.describe(options))")
        if let timeout = options.timeout {
            Task { [weak self] in
                try? await Task.sleep(for: .milliseconds(Int(timeout * 1000)))
                guard let self, self.scan.withLock({ $0.scanning && $0.generation == generation }) else { return }
                _ = try? await self.stop()
            }
        }
        return status
    }

    private func stopNow() async throws(BLEError) -> ScanStatus {
        let (wasScanning, watch) = scan.withLock { s -> (Bool, WatchOptions?) in
            defer { s.end() }
            return (s.scanning, s.watch?.options)
        }
        if wasScanning {
            await discoveryNeeded(watch: watch)
            log("scan stopped")
        }
        return scan.withLock { $0.status }
    }

    /// After the scan or the watch stopped: BlueZ's discovery goes on with the watch's filter
    /// (or, for devices being looked for, without a filter), or stops.
    private func discoveryNeeded(scan options: ScanOptions? = nil, watch: WatchOptions?) async {
        guard let adapter = index.adapterPath() else { return }
        do {
            if options != nil || watch != nil {
                try await adapterCall(adapter, "SetDiscoveryFilter", [.stringVariantDictionary(Self.filter(scan: options, watch: watch))])
                return
            }
            if !lookers.withLock({ $0.discovering }) { try await adapterCall(adapter, "StopDiscovery") }
            try await adapterCall(adapter, "SetDiscoveryFilter", [.emptyDictionary(key: "s", value: "v")])
        } catch {
            // "No discovery started" or a powered-off adapter: the discovery is over either way.
            log("stopping discovery: \(error)")
        }
    }

    // MARK: - The watch

    func startWatch(_ options: WatchOptions) async throws(BLEError) -> WatchStatus {
        try options.validate()
        return try await calls.run(0, refused: Self.refusal) { () async throws(BLEError) -> WatchStatus in
            let (replaced, scanOptions) = self.scan.withLock { s -> (Bool, ScanOptions?) in
                // Replaced options start afresh, as a new scan does: only what matches them is listed.
                let replaced = s.watch != nil
                s.watch = Watch(options: options, since: Date(), forgetAfter: self.forgetAfter)
                return (replaced, s.scanning ? s.options : nil)
            }
            self.log("watch \(replaced ? "changed" : "started"): \(Self.describe(options))")
            // The watch is on from here, whatever BlueZ says now: when the adapter is not usable
            // (off, bluetoothd away) the discovery starts when it is.
            do throws(BLEError) {
                try await self.discover(try self.link.usableAdapter(), filter: Self.filter(scan: scanOptions, watch: options))
            } catch {
                self.log("watch: not discovering yet (\(error.message)); it starts when the adapter is usable")
            }
            return self.watchStatus()
        }
    }

    func stopWatch() async throws(BLEError) -> WatchStatus {
        try await calls.run(0, refused: Self.refusal) { () async throws(BLEError) -> WatchStatus in
            let (wasWatching, scanOptions) = self.scan.withLock { s -> (Bool, ScanOptions?) in
                defer { s.watch = nil }
                return (s.watch != nil, s.scanning ? s.options : nil)
            }
            if wasWatching {
                await self.discoveryNeeded(scan: scanOptions, watch: nil)
                self.log("watch stopped")
            }
            return self.watchStatus()
        }
    }

    func watchStatus() -> WatchStatus {
        let discovering = index.adapterPath().flatMap { tree.properties(at: $0, BlueZ.adapterInterface)?["Discovering"]?.bool } ?? false
        return scan.withLock { s in
            guard let w = s.watch else { return .off }
            return WatchStatus(watching: true, options: w.options, since: w.since, discovering: discovering, devices: w.heard.count)
        }
    }

    /// The devices the watch follows, as BlueZ has them, or as last heard once BlueZ forgot them.
    func watched() -> [PeripheralInfo] {
        let adapter = index.adapterPath()
        let (heard, last) = scan.withLock { s -> ([BluetoothAddress: Date], [BluetoothAddress: PeripheralInfo]) in
            s.watch?.forget(before: Date().addingTimeInterval(-forgetAfter))
            return (s.watch?.heard ?? [:], s.watch?.last ?? [:])
        }
        let moving = self.moving.withLock { $0 }
        return heard.compactMap { address, seen -> PeripheralInfo? in
            if adapter != nil, let path = try? index.devicePath(address), let props = tree.properties(at: path, BlueZ.deviceInterface),
               let info = info(path, props, lastSeen: seen, transition: moving[address]) {
                return info
            }
            return last[address].map(stale)
        }.sorted { $0.id < $1.id }
    }

    /// Discoveries restarted after BlueZ ended them by itself.
    var restartCount: Int { restarts.withLock { $0.count } }

    /// BlueZ's discovery ended, or may have, without this side stopping the scan: start it again
    /// (soon, and with backoff while it fails).
    private func discoveryEnded(_ why: String) {
        guard scan.withLock({ $0.discovering }) else { return }
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
        guard scan.withLock({ $0.discovering }) else { return }
        do {
            try await calls.run(0, refused: Self.refusal) { () async throws(BLEError) in
                let (wanted, options, watch) = self.scan.withLock { ($0.discovering, $0.scanning ? $0.options : nil, $0.watch?.options) }
                guard wanted else { return }
                let adapter = try self.link.usableAdapter()
                guard self.tree.properties(at: adapter, BlueZ.adapterInterface)?["Discovering"]?.bool != true else { return }
                try await self.discover(adapter, filter: Self.filter(scan: options, watch: watch))
                self.restarts.withLock { $0.count += 1; $0.failures = 0 }
                self.log((options.map { "scan started again: \(Self.describe($0))" } ?? "discovery started again")
                         + (watch.map { options == nil ? " for the watch: \(Self.describe($0))" : ", with the watch" } ?? ""))
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
    /// UUIDs only, and most sensors send service data alone.
    static func filter(scan options: ScanOptions?, watch: WatchOptions?) -> [(String, Value)] {
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
        return parts.isEmpty ? "no filters" : parts.joined(separator: " ")
    }

    /// Waits until BlueZ knows `id` (it advertised), running a discovery of this side's own
    /// meanwhile when no scan runs; false after `deadline`.
    func lookFor(_ id: BluetoothAddress, within deadline: Duration) async -> Bool {
        if (try? index.devicePath(id)) != nil { return true }
        await startLooking()
        let found = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let key = lookers.withLock { l -> Int in
                l.next += 1
                l.waiting[l.next] = (id, continuation)
                return l.next
            }
            if (try? index.devicePath(id)) != nil { resolveLooker(key, true) }
            Task { [weak self] in
                try? await Task.sleep(for: deadline)
                self?.resolveLooker(key, false)
            }
        }
        await stopLookingIfDone()
        return found
    }

    private func resolveLooker(_ key: Int, _ found: Bool) {
        lookers.withLock { $0.waiting.removeValue(forKey: key) }?.continuation.resume(returning: found)
    }

    private func startLooking() async {
        let start = lookers.withLock { l -> Bool in
            defer { l.discovering = true }
            return !l.discovering
        }
        guard start, !scan.withLock({ $0.discovering }), let adapter = index.adapterPath() else { return }
        log("discovery started to find devices to reconnect")
        do {
            try await calls.run(0, refused: Self.refusal) { () async throws(BLEError) in
                try await self.discover(adapter, filter: nil)
            }
        } catch {
            log("cannot start discovery to reconnect: \(error)")
        }
    }

    private func stopLookingIfDone() async {
        let stop = lookers.withLock { l -> Bool in
            guard l.waiting.isEmpty, l.discovering else { return false }
            l.discovering = false
            return true
        }
        guard stop, !scan.withLock({ $0.discovering }), let adapter = index.adapterPath() else { return }
        try? await calls.run(0, refused: Self.refusal) { () async throws(BLEError) in
            guard !self.scan.withLock({ $0.discovering }) else { return }
            try await self.adapterCall(adapter, "StopDiscovery")
        }
    }

    // MARK: - What the tree says

    /// Called by the tree's observer: a device that advertised (or changed) during a scan joins
    /// its results if it matches; a powered-off adapter ends the scan.
    func observe(_ change: ObjectTree.Change) {
        switch change {
        case .reloaded: snapshots.withLock { $0.removeAll() }
        case .added(_, let interfaces) where interfaces[BlueZ.adapterInterface] != nil: snapshots.withLock { $0.removeAll() }
        case .removed(_, let names) where names.contains(BlueZ.adapterInterface): snapshots.withLock { $0.removeAll() }
        case .removed(let p, let names):
            snapshots.withLock { $0[p] = nil }
            if names.contains(BlueZ.deviceInterface) { forgot(p) }
        default: break
        }
        switch change {
        case .properties(_, let interface, let changed, let invalidated):
            let onlyAValue = interface == BlueZ.gattCharacteristicInterface && invalidated.isEmpty
                && changed.keys.allSatisfy { $0 == "Value" }
            if !onlyAValue { listChanged() }
        case .reloaded, .added, .removed:
            listChanged()
        }
        let path: ObjectPath
        switch change {
        case .properties(let p, let interface, let changed, _) where interface == BlueZ.adapterInterface:
            guard p == index.adapterPath() else { return }
            if changed["Discovering"]?.bool == false { discoveryEnded("BlueZ stopped discovering") }
            if changed["Powered"]?.bool == true { discoveryEnded("the adapter is powered on again") }
            return
        case .reloaded:
            if index.adapterPath() != nil { discoveryEnded("BlueZ's objects were reloaded") }
            return
        case .added(let p, let interfaces) where interfaces[BlueZ.adapterInterface] != nil:
            // bluetoothd owns its name before it exports the adapters: a reload may find none,
            // and the adapter then comes as InterfacesAdded, powered already (no change signal).
            if p == index.adapterPath() { discoveryEnded("the adapter appeared") }
            return
        case .added(let p, let interfaces) where interfaces[BlueZ.deviceInterface] != nil:
            path = p
            if let address = DeviceProperties.address(interfaces[BlueZ.deviceInterface] ?? [:]) {
                let found = lookers.withLock { l in l.waiting.filter { $0.value.id == address }.map(\.key) }
                for key in found { resolveLooker(key, true) }
            }
        case .properties(let p, let interface, _, _) where interface == BlueZ.deviceInterface: path = p
        default: return
        }
        guard let adapter = index.adapterPath(), path.parent == adapter,
              let props = tree.properties(at: path, BlueZ.deviceInterface) else {
            snapshots.withLock { $0[path] = nil }
            return
        }
        let now = Date()
        guard let snapshot = snapshot(path, props, change, at: now) else { return }
        let address = snapshot.id
        // Without DuplicateData, BlueZ signals ServiceData and ManufacturerData when they change,
        // each change once: every one is passed on, so that sensor payloads are all decoded.
        // With a discovery filter set (the watch always sets one) it signals RSSI at every
        // advertisement it receives: that, a new device or new data is an advertisement heard.
        var dataChanged = false
        var advertised = false
        switch change {
        case .properties(_, _, let changed, _):
            dataChanged = changed["ServiceData"] != nil || changed["ManufacturerData"] != nil
            advertised = dataChanged || Self.advertisedProperties.contains { changed[$0] != nil }
        case .added:
            advertised = true
        default:
            break
        }
        let (report, watched) = scan.withLock { s -> (Report?, Bool) in
            guard s.discovering else { return (nil, false) }
            // Parsed only for a device the scan or the watch does not follow yet, once.
            var parsed: (name: String?, rssi: Int?, advertisement: AdvertisementData)?
            func fields() -> (name: String?, rssi: Int?, advertisement: AdvertisementData) {
                if let parsed { return parsed }
                let f = (DeviceProperties.name(props), DeviceProperties.rssi(props), DeviceProperties.advertisement(props))
                parsed = f
                return f
            }
            var watched = false
            if let options = s.watch?.options, s.watch?.heard[address] != nil
                || options.matches(address, name: fields().name, rssi: fields().rssi, advertisement: fields().advertisement) {
                // Every advertisement of a watched device, duplicates included: a Bluetooth
                // proxy's clients (Home Assistant) expect the steady stream a radio hears.
                watched = s.watch?.hear(address, snapshot, at: now) == true || advertised
            }
            guard s.scanning, let options = s.options else { return (nil, watched) }
            let known = s.seen[address] != nil
            if known || options.matches(name: fields().name, rssi: fields().rssi, advertisement: fields().advertisement) {
                s.seen[address] = now
                s.last[address] = snapshot
                if !known || options.allowDuplicates { return (.discovered, watched) }
                return (dataChanged ? .dataChanged : nil, watched)
            }
            return (nil, watched)
        }
        listChanged()  // `seen` moved on
        let info = snapshot
        switch report {
        case .discovered: events(.advertisement(info))
        case .dataChanged: events(.advertisementChanged(info))
        case nil: if watched { events(.advertisementChanged(info)) }
        }
    }

    /// The device at `path` as `props` now say, seen `now`: from its last snapshot when only
    /// advertised properties changed, else read whole; nil without an address.
    private func snapshot(_ path: ObjectPath, _ props: [String: Value], _ change: ObjectTree.Change, at now: Date) -> PeripheralInfo? {
        snapshots.withLock { s -> PeripheralInfo? in
            if case .properties(_, _, let changed, let invalidated) = change, invalidated.isEmpty,
               changed.keys.allSatisfy(DeviceProperties.advertised.contains), let last = s[path] {
                let info = DeviceProperties.updated(last, props, changed: changed.keys, lastSeen: now)
                s[path] = info
                return info
            }
            let info = DeviceProperties.peripheral(props, lastSeen: now)
            s[path] = info
            return info
        }
    }

    /// Device1 properties BlueZ sets from a received advertisement (besides the data ones).
    private static let advertisedProperties = ["RSSI", "TxPower", "AdvertisingFlags", "AdvertisingData"]

    /// What a device's change during a scan is to clients.
    private enum Report {
        /// Found by this scan, or heard again by a scan that allows duplicates.
        case discovered
        /// Known, and its advertised data changed.
        case dataChanged
    }

    // MARK: - The device list

    /// Changes with the list, and every second (staleness is a matter of time).
    var version: UInt64 {
        listVersion.load(ordering: .acquiring) &* 1_000_003 &+ UInt64(Date().timeIntervalSince1970)
    }

    private func listChanged() { listVersion.add(1, ordering: .releasing) }

    /// The connector's view of a kept device (nil: no longer kept).
    func setReconnect(_ id: BluetoothAddress, _ status: ReconnectStatus?) {
        reconnects.withLock { $0[id] = status }
        listChanged()
    }

    /// A device began (or, with nil, ended) connecting or disconnecting.
    func setTransition(_ id: BluetoothAddress, _ state: PeripheralState?) {
        moving.withLock { $0[id] = state }
        listChanged()
    }

    /// Devices that matched the current (or last) scan, connected ones and those in transition.
    /// A matched device not seen for `staleAfter` is `stale`, and stays listed (as last seen)
    /// when BlueZ has forgotten it.
    func peripherals() -> [PeripheralInfo] {
        guard let adapter = index.adapterPath() else { return [] }
        let (seen, last, heard) = scan.withLock { ($0.seen, $0.last, $0.watch?.heard ?? [:]) }
        let moving = self.moving.withLock { $0 }
        let kept = reconnects.withLock { $0 }
        var listed = tree.objects(with: BlueZ.deviceInterface, under: adapter).compactMap { path, props -> PeripheralInfo? in
            guard path.parent == adapter, let address = DeviceProperties.address(props) else { return nil }
            guard seen[address] != nil || props["Connected"]?.bool == true || moving[address] != nil || kept[address] != nil else { return nil }
            return info(path, props, lastSeen: seen[address] ?? heard[address], transition: moving[address])
        }
        let present = Set(listed.map(\.id))
        listed += last.filter { !present.contains($0.key) }.map { stale($0.value) }
        return listed.sorted { $0.id < $1.id }
    }

    /// A device BlueZ no longer knows, as it was last seen.
    private func stale(_ snapshot: PeripheralInfo) -> PeripheralInfo {
        var info = snapshot
        info.state = .disconnected
        info.mtu = nil
        info.stale = true
        info.reconnect = reconnects.withLock { $0[info.id] }
        return info
    }

    /// BlueZ removed the device at `path` (RemoveDevice, or a temporary device dropped): its pairing,
    /// bond and trust went with it, and what is kept of it to be listed (stale) says so before the
    /// list's version moves on, so that no read after a bond's removal shows the bond.
    private func forgot(_ path: ObjectPath) {
        guard path.parent == index.adapterPath(), let id = BlueZ.address(pathElement: path.lastElement) else { return }
        scan.withLock { s in
            if let kept = s.last[id] { s.last[id] = DeviceProperties.forgotten(kept) }
            if let kept = s.watch?.last[id] { s.watch?.last[id] = DeviceProperties.forgotten(kept) }
        }
    }

    func peripheral(_ id: BluetoothAddress) throws(BLEError) -> PeripheralInfo {
        let path: ObjectPath
        do {
            path = try index.devicePath(id)
        } catch {
            if let snapshot = scan.withLock({ $0.last[id] ?? $0.watch?.last[id] }) { return stale(snapshot) }
            throw error
        }
        guard let props = tree.properties(at: path, BlueZ.deviceInterface),
              let info = info(path, props, lastSeen: scan.withLock({ $0.seen[id] ?? $0.watch?.heard[id] }), transition: moving.withLock({ $0[id] })) else {
            throw BLEError(.unknownDevice, "no device \(id) is known to the adapter; scan for it first")
        }
        return info
    }

    private func info(_ path: ObjectPath, _ props: [String: Value], lastSeen: Date?, transition: PeripheralState?) -> PeripheralInfo? {
        guard var info = DeviceProperties.peripheral(props, lastSeen: lastSeen) else { return nil }
        if let transition { info.state = transition }
        if info.state == .connected { info.mtu = index.mtu(path) }
        info.reconnect = reconnects.withLock { $0[info.id] }
        if info.state == .disconnected, let seen = lastSeen, -seen.timeIntervalSinceNow > staleAfter { info.stale = true }
        return info
    }
}
