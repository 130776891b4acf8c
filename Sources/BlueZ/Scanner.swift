import BLE
import DBus
import FoundationEssentials
import Synchronization
import Threading

/// Discovery: the scan and its filters (pushed down to BlueZ where it can take them, the rest
/// applied here), the devices it found, and the device list that `GET /v1/devices` shows. A
/// scan lasts until it is stopped (or its timeout): when BlueZ's discovery ends without that
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

        var status: ScanStatus {
            ScanStatus(scanning: scanning, options: options, startedAt: startedAt, stopsAt: stopsAt, discovered: seen.count)
        }

        mutating func end() {
            scanning = false
            stopsAt = nil
            generation += 1
        }
    }

    /// A device not seen for this long is listed as `stale`.
    let staleAfter: Double

    init(link: BusLink, events: HandlerSlot<CentralEvent>, staleAfter: Duration = .seconds(60), log: @escaping @Sendable (String) -> Void) {
        self.staleAfter = Double(staleAfter.components.seconds) + Double(staleAfter.components.attoseconds) / 1e18
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
        try await adapterCall(adapter, "SetDiscoveryFilter", [.stringVariantDictionary(Self.filter(options))])

        // Always asked: BlueZ ends every discovery when the adapter powers off, whatever this
        // side believes; InProgress means this connection still discovers.
        do {
            try await adapterCall(adapter, "StartDiscovery")
        } catch where error.detail?.contains("InProgress") == true {
        }
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
        let wasScanning = scan.withLock { s -> Bool in
            defer { s.end() }
            return s.scanning
        }
        if wasScanning, let adapter = index.adapterPath() {
            do {
                try await adapterCall(adapter, "StopDiscovery")
                try await adapterCall(adapter, "SetDiscoveryFilter", [.emptyDictionary(key: "s", value: "v")])
            } catch {
                // "No discovery started" or a powered-off adapter: the scan is over either way.
                log("stopping discovery: \(error)")
            }
            log("scan stopped")
        }
        return scan.withLock { $0.status }
    }

    /// Discoveries restarted after BlueZ ended them by itself.
    var restartCount: Int { restarts.withLock { $0.count } }

    /// BlueZ's discovery ended, or may have, without this side stopping the scan: start it again
    /// (soon, and with backoff while it fails).
    private func discoveryEnded(_ why: String) {
        guard scan.withLock({ $0.scanning }) else { return }
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
        guard let options = scan.withLock({ $0.scanning ? $0.options : nil }) else { return }
        do {
            try await calls.run(0, refused: Self.refusal) { () async throws(BLEError) in
                guard self.scan.withLock({ $0.scanning }) else { return }
                let adapter = try self.link.usableAdapter()
                guard self.tree.properties(at: adapter, BlueZ.adapterInterface)?["Discovering"]?.bool != true else { return }
                try await self.adapterCall(adapter, "SetDiscoveryFilter", [.stringVariantDictionary(Self.filter(options))])
                do throws(BLEError) {
                    try await self.adapterCall(adapter, "StartDiscovery")
                } catch where error.detail?.contains("InProgress") == true {
                }
                self.restarts.withLock { $0.count += 1; $0.failures = 0 }
                self.log("scan started again: \(Self.describe(options))")
            }
        } catch {
            // Not usable yet (powered off, no bluetoothd): a state change starts it; else try later.
            restarts.withLock { $0.failures += 1 }
            if link.status().state == .poweredOn { discoveryEnded("starting it again failed: \(error.message)") }
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

    /// What BlueZ's discovery filter can take of the options (the rest is applied here).
    static func filter(_ options: ScanOptions) -> [(String, Value)] {
        var filter: [(String, Value)] = [("Transport", .string("le")), ("DuplicateData", .bool(options.allowDuplicates))]
        if !options.services.isEmpty { filter.append(("UUIDs", .strings(options.services.map(\.uuidString)))) }
        if let rssi = options.rssi { filter.append(("RSSI", .int16(Int16(rssi)))) }
        return filter
    }

    static func describe(_ options: ScanOptions) -> String {
        var parts: [String] = []
        if !options.services.isEmpty { parts.append("services=" + options.services.map { $0.shortForm ?? $0.uuidString }.joined(separator: ",")) }
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
        guard start, !scan.withLock({ $0.scanning }), let adapter = index.adapterPath() else { return }
        log("discovery started to find devices to reconnect")
        do {
            try await calls.run(0, refused: Self.refusal) { () async throws(BLEError) in
                do throws(BLEError) {
                    try await self.adapterCall(adapter, "StartDiscovery")
                } catch where error.detail?.contains("InProgress") == true {
                }
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
        guard stop, !scan.withLock({ $0.scanning }), let adapter = index.adapterPath() else { return }
        try? await calls.run(0, refused: Self.refusal) { () async throws(BLEError) in
            guard !self.scan.withLock({ $0.scanning }) else { return }
            try await self.adapterCall(adapter, "StopDiscovery")
        }
    }

    // MARK: - What the tree says

    /// Called by the tree's observer: a device that advertised (or changed) during a scan joins
    /// its results if it matches; a powered-off adapter ends the scan.
    func observe(_ change: ObjectTree.Change) {
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
              let props = tree.properties(at: path, BlueZ.deviceInterface),
              let address = DeviceProperties.address(props) else { return }
        let now = Date()
        // Without DuplicateData, BlueZ signals ServiceData and ManufacturerData when they change,
        // each change once: every one is passed on, so that sensor payloads are all decoded.
        var dataChanged = false
        if case .properties(_, _, let changed, _) = change {
            dataChanged = changed["ServiceData"] != nil || changed["ManufacturerData"] != nil
        }
        let snapshot = DeviceProperties.peripheral(props, lastSeen: now)
        let report = scan.withLock { s -> Report? in
            guard s.scanning, let options = s.options else { return nil }
            let known = s.seen[address] != nil
            if known || options.matches(name: DeviceProperties.name(props), rssi: DeviceProperties.rssi(props),
                                        advertisement: DeviceProperties.advertisement(props)) {
                s.seen[address] = now
                s.last[address] = snapshot
                if !known || options.allowDuplicates { return .discovered }
                return dataChanged ? .dataChanged : nil
            }
            return nil
        }
        listChanged()  // `seen` moved on
        guard let report, let info = snapshot else { return }
        switch report {
        case .discovered: events(.advertisement(info))
        case .dataChanged: events(.advertisementChanged(info))
        }
    }

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
        let (seen, last) = scan.withLock { ($0.seen, $0.last) }
        let moving = self.moving.withLock { $0 }
        let kept = reconnects.withLock { $0 }
        var listed = tree.objects(with: BlueZ.deviceInterface, under: adapter).compactMap { path, props -> PeripheralInfo? in
            guard path.parent == adapter, let address = DeviceProperties.address(props) else { return nil }
            guard seen[address] != nil || props["Connected"]?.bool == true || moving[address] != nil || kept[address] != nil else { return nil }
            return info(path, props, lastSeen: seen[address], transition: moving[address])
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

    func peripheral(_ id: BluetoothAddress) throws(BLEError) -> PeripheralInfo {
        let path: ObjectPath
        do {
            path = try index.devicePath(id)
        } catch {
            if let snapshot = scan.withLock({ $0.last[id] }) { return stale(snapshot) }
            throw error
        }
        guard let props = tree.properties(at: path, BlueZ.deviceInterface),
              let info = info(path, props, lastSeen: scan.withLock({ $0.seen[id] }), transition: moving.withLock({ $0[id] })) else {
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
