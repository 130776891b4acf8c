import BLE
import DBus
import FoundationEssentials
import Synchronization

/// The devices gattway lists: those the scan found (each as last seen, listed `stale` when not
/// seen for `staleAfter`, and kept as last seen when BlueZ forgets it), those the watch hears
/// (bounded, forgotten after `forgetAfter`), connected ones, ones in transition and kept ones.
/// Advertisement reports write the sightings; the connector says which devices move and which
/// it keeps; discovery says when the scan or the watch starts afresh.
final class DeviceList: Sendable {
    private let link: BusLink
    /// Devices being connected or disconnected right now (the connector says which).
    private let moving = Mutex<[BluetoothAddress: PeripheralState]>([:])
    /// Devices the connector keeps connected, and where each stands: listed even when unseen.
    private let reconnects = Mutex<[BluetoothAddress: ReconnectStatus]>([:])
    private let sightings = Mutex(Sightings())
    /// Per device, the adapters that heard it advertise, with the RSSI and when. Entries go with
    /// the device objects (one per adapter), all at a reload.
    private let heardBy = Mutex<[BluetoothAddress: [String: Heard]]>([:])
    /// Bumped by every change that can change `peripherals()`.
    private let listVersion = Atomic<UInt64>(0)

    /// A device not seen for this long is listed as `stale`.
    let staleAfter: Double
    /// The watch forgets a device not heard for this long.
    let forgetAfter: Double

    struct Heard: Sendable {
        var rssi: Int?
        var at: Date
    }

    /// With several adapters, the RSSI a device shows is the best one heard this recently.
    static let recent: TimeInterval = 10

    private struct Sightings {
        /// Devices that matched since the scan started, with when they were last seen.
        var seen: [BluetoothAddress: Date] = [:]
        /// What each of them looked like when last seen: listed (stale) after BlueZ forgot it.
        var last: [BluetoothAddress: PeripheralInfo] = [:]
        /// What the watch heard, while it runs.
        var watch: WatchSightings?
    }

    /// The devices the watch heard: bounded, and forgetting the ones not heard for `forgetAfter`
    /// seconds (phones change their random addresses every few minutes).
    private struct WatchSightings {
        var forgetAfter: Double
        var heard: [BluetoothAddress: Date] = [:]
        var last: [BluetoothAddress: PeripheralInfo] = [:]

        static let limit = 1024

        /// Notes a device heard now; whether it is new to the watch.
        mutating func hear(_ address: BluetoothAddress, _ snapshot: PeripheralInfo?, at now: Date) -> Bool {
            // One lookup a table for a device heard again (every advertisement of a stream).
            let known = heard.updateValue(now, forKey: address) != nil
            if let snapshot { last[address] = snapshot }
            guard !known else { return false }
            if heard.count > Self.limit { forget(before: now.addingTimeInterval(-forgetAfter)) }
            if heard.count > Self.limit,
               let oldest = heard.lazy.filter({ $0.key != address }).min(by: { $0.value < $1.value })?.key {
                heard[oldest] = nil
                last[oldest] = nil
            }
            return true
        }

        mutating func forget(before cutoff: Date) {
            for (address, at) in heard where at < cutoff {
                heard[address] = nil
                last[address] = nil
            }
        }
    }

    init(link: BusLink, staleAfter: Duration, forgetAfter: Duration) {
        self.link = link
        self.staleAfter = staleAfter.inSeconds
        self.forgetAfter = forgetAfter.inSeconds
    }

    private var tree: ObjectTree { link.tree }
    private var index: GATTIndex { link.index }

    // MARK: - Sightings

    /// A scan starts: only what matches it from now on is listed.
    func scanStarted() {
        sightings.withLock { s in
            s.seen.removeAll()
            s.last.removeAll()
        }
        listChanged()
    }

    /// Devices the scan found.
    var scanCount: Int { sightings.withLock { $0.seen.count } }

    /// Whether the scan found `address` already.
    func seenByScan(_ address: BluetoothAddress) -> Bool { sightings.withLock { $0.seen[address] != nil } }

    /// The scan saw `address` now, looking like `snapshot`.
    func seen(_ address: BluetoothAddress, _ snapshot: PeripheralInfo, at now: Date) {
        sightings.withLock { s in
            s.seen[address] = now
            s.last[address] = snapshot
        }
        listChanged()
    }

    /// The watch starts (afresh, with options replaced) or ends (false).
    func watching(_ on: Bool) {
        sightings.withLock { $0.watch = on ? WatchSightings(forgetAfter: forgetAfter) : nil }
        listChanged()
    }

    /// Devices the watch follows.
    var watchCount: Int { sightings.withLock { $0.watch?.heard.count ?? 0 } }

    /// Whether the watch follows `address` already.
    func heardByWatch(_ address: BluetoothAddress) -> Bool { sightings.withLock { $0.watch?.heard[address] != nil } }

    /// The watch heard `address` now; whether it is new to the watch.
    func heard(_ address: BluetoothAddress, _ snapshot: PeripheralInfo, at now: Date) -> Bool {
        let new = sightings.withLock { $0.watch?.hear(address, snapshot, at: now) == true }
        listChanged()
        return new
    }

    /// An adapter heard `address` advertise. Whether its reports are the device's voice: two
    /// adapters hear each packet twice, and clients are to hear it once, as one radio hears it.
    /// The voice is the adapter that hears the device best (the strongest RSSI among those that
    /// heard it within `Self.voice`; the first name when equal), so that a stream's RSSI is
    /// steady and a device out of one adapter's reach is heard through the other.
    func sighted(_ address: BluetoothAddress, on adapter: Substring, rssi: Int?, at now: Date) -> Bool {
        let name = String(adapter)
        func isVoice(_ all: inout [String: Heard]) -> Bool {
            all[name] = Heard(rssi: rssi, at: now)
            guard all.count > 1 else { return true }
            let mine = rssi ?? -127
            return !all.contains { other, heard in
                guard other != name, now.timeIntervalSince(heard.at) < Self.voice else { return false }
                let theirs = heard.rssi ?? -127
                return theirs > mine || (theirs == mine && other < name)
            }
        }
        // In place: one lookup, no copy of the device's table.
        return heardBy.withLock { isVoice(&$0[address, default: [:]]) }
    }

    /// How long an adapter that hears a device better speaks for it after its last report.
    static let voice: TimeInterval = 2

    /// The RSSI each adapter heard the device with lately (adapter name → RSSI; -127 when it
    /// reported none).
    func strengths(_ id: BluetoothAddress) -> [String: Int] {
        let now = Date()
        return (heardBy.withLock { $0[id] } ?? [:]).filter { now.timeIntervalSince($0.value.at) < Self.recent }.mapValues { $0.rssi ?? -127 }
    }

    /// Every adapter's sightings are void (BlueZ's objects were read anew).
    func forgetSightings() { heardBy.withLock { $0.removeAll() } }

    /// BlueZ removed the device at `path` (RemoveDevice, or a temporary device dropped): its
    /// pairing, bond and trust went with it, and what is kept of it to be listed (stale) says so
    /// before the list's version moves on, so that no read after a bond's removal shows the bond.
    func forgot(_ path: ObjectPath) {
        guard let adapter = path.parent, let id = BlueZ.address(pathElement: path.lastElement) else { return }
        heardBy.withLock { h in
            h[id]?[String(adapter.lastElement)] = nil
            if h[id]?.isEmpty == true { h[id] = nil }
        }
        guard index.isInUse(adapter: adapter), index.devicePaths(id).isEmpty else { return }
        sightings.withLock { s in
            if let kept = s.last[id] { s.last[id] = DeviceProperties.forgotten(kept) }
            if let kept = s.watch?.last[id] { s.watch?.last[id] = DeviceProperties.forgotten(kept) }
        }
    }

    // MARK: - What the connector says

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

    /// Whether this side is connecting the device now (a link it makes, not a remote central's).
    func isConnecting(_ id: BluetoothAddress) -> Bool { moving.withLock { $0[id] == .connecting } }

    // MARK: - The list

    /// Changes with the list, and every second (staleness is a matter of time).
    var version: UInt64 {
        listVersion.load(ordering: .acquiring) &* 1_000_003 &+ UInt64(Date().timeIntervalSince1970)
    }

    func listChanged() { listVersion.add(1, ordering: .releasing) }

    /// Devices that matched the current (or last) scan, connected ones and those in transition.
    /// A matched device not seen for `staleAfter` is `stale`, and stays listed (as last seen)
    /// when BlueZ has forgotten it.
    func peripherals() -> [PeripheralInfo] {
        let adapters = index.adapterPaths()
        guard !adapters.isEmpty else { return [] }
        let (seen, last, heard) = sightings.withLock { ($0.seen, $0.last, $0.watch?.heard ?? [:]) }
        let moving = self.moving.withLock { $0 }
        let kept = reconnects.withLock { $0 }
        var objects: [BluetoothAddress: [(ObjectPath, [String: Value])]] = [:]
        var order: [BluetoothAddress] = []
        for adapter in adapters {
            for (path, props) in tree.objects(with: BlueZ.deviceInterface, under: adapter) where path.parent == adapter {
                guard let address = DeviceProperties.address(props) else { continue }
                if objects[address] == nil { order.append(address) }
                objects[address, default: []].append((path, props))
            }
        }
        var listed = order.compactMap { address -> PeripheralInfo? in
            guard let all = objects[address] else { return nil }
            guard seen[address] != nil || all.contains(where: { $0.1["Connected"]?.bool == true }) || moving[address] != nil
                    || kept[address] != nil else { return nil }
            return merged(address, all, lastSeen: seen[address] ?? heard[address], transition: moving[address])
        }
        let present = Set(listed.map(\.id))
        listed += last.filter { !present.contains($0.key) }.map { stale($0.value) }
        return listed.sorted { $0.id < $1.id }
    }

    /// The devices the watch follows, as BlueZ has them, or as last heard once BlueZ forgot them.
    func watched() -> [PeripheralInfo] {
        let adapter = index.adapterPath()
        let (heard, last) = sightings.withLock { s -> ([BluetoothAddress: Date], [BluetoothAddress: PeripheralInfo]) in
            s.watch?.forget(before: Date().addingTimeInterval(-forgetAfter))
            return (s.watch?.heard ?? [:], s.watch?.last ?? [:])
        }
        let moving = self.moving.withLock { $0 }
        return heard.compactMap { address, seen -> PeripheralInfo? in
            if adapter != nil, let info = merged(address, objects(of: address), lastSeen: seen, transition: moving[address]) {
                return info
            }
            return last[address].map(stale)
        }.sorted { $0.id < $1.id }
    }

    func peripheral(_ id: BluetoothAddress) throws(BLEError) -> PeripheralInfo {
        let all = objects(of: id)
        guard !all.isEmpty else {
            if let snapshot = sightings.withLock({ $0.last[id] ?? $0.watch?.last[id] }) { return stale(snapshot) }
            throw BLEError(.unknownDevice, "no device \(id) is known to the adapter; scan for it first")
        }
        guard let info = merged(id, all, lastSeen: sightings.withLock({ $0.seen[id] ?? $0.watch?.heard[id] }), transition: moving.withLock({ $0[id] })) else {
            throw BLEError(.unknownDevice, "no device \(id) is known to the adapter; scan for it first")
        }
        return info
    }

    /// The device's objects, one per adapter in use that knows it, in adapter order.
    private func objects(of id: BluetoothAddress) -> [(ObjectPath, [String: Value])] {
        index.devicePaths(id).compactMap { path in tree.properties(at: path, BlueZ.deviceInterface).map { (path, $0) } }
    }

    /// One device from its objects (one per adapter that knows it): as the one that holds its link
    /// says, else the one that heard it best lately; with the adapters that hear it, and the best
    /// recent RSSI.
    private func merged(_ id: BluetoothAddress, _ all: [(ObjectPath, [String: Value])], lastSeen: Date?,
                        transition: PeripheralState?) -> PeripheralInfo? {
        guard let first = all.first else { return nil }
        let heard = heardBy.withLock { $0[id] ?? [:] }
        let now = Date()
        func strength(_ object: (ObjectPath, [String: Value])) -> Int {
            guard let h = heard[String(object.0.parent?.lastElement ?? "")], now.timeIntervalSince(h.at) < Self.recent else { return Int.min }
            return h.rssi ?? -127
        }
        let linked = all.first { $0.1["Connected"]?.bool == true }
        let primary = linked ?? (all.count > 1 ? all.max { strength($0) < strength($1) } ?? first : first)
        guard var info = info(primary.0, primary.1, lastSeen: lastSeen, transition: transition) else { return nil }
        if linked != nil { info.adapter = primary.0.parent.map { String($0.lastElement) } }
        // With one adapter in use, which one hears the device goes without saying.
        guard index.adapterPaths().count > 1 else { return info }
        info.adapters = all.map { path, props in
            let name = String(path.parent?.lastElement ?? "")
            return AdapterSighting(adapter: name, rssi: heard[name]?.rssi ?? DeviceProperties.rssi(props), lastSeen: heard[name]?.at,
                                   bonded: props["Bonded"]?.bool == true)
        }
        if all.count > 1, let best = info.adapters.filter({ $0.lastSeen.map { now.timeIntervalSince($0) < Self.recent } ?? false })
            .compactMap(\.rssi).max() {
            info.rssi = best
        }
        return info
    }

    /// A device BlueZ does not know, as it was last seen: stale once BlueZ forgot it (until it is
    /// heard again) or not heard for `staleAfter`; one that only a passive scan heard, which
    /// BlueZ never knew, is fresh while heard.
    private func stale(_ snapshot: PeripheralInfo) -> PeripheralInfo {
        var info = snapshot
        info.state = .disconnected
        info.mtu = nil
        info.stale = snapshot.stale || info.lastSeen.map { -$0.timeIntervalSinceNow > staleAfter } ?? true
        info.reconnect = reconnects.withLock { $0[info.id] }
        return info
    }

    private func info(_ path: ObjectPath, _ props: [String: Value], lastSeen: Date?, transition: PeripheralState?) -> PeripheralInfo? {
        guard var info = DeviceProperties.peripheral(props, lastSeen: lastSeen) else { return nil }
        // Advertisements from the kernel: BlueZ's RSSI and data of a device not engaged are not
        // read any more, the last one heard is what it advertises.
        if info.state == .disconnected, link.advertisementPath == .kernel,
           let heard = sightings.withLock({ $0.last[info.id] ?? $0.watch?.last[info.id] }) {
            info.rssi = heard.rssi
            info.advertisement = heard.advertisement
            if info.name == nil { info.name = heard.name }
        }
        if let transition { info.state = transition }
        if info.state == .connected { info.mtu = index.mtu(path) }
        info.reconnect = reconnects.withLock { $0[info.id] }
        if info.state == .disconnected, let seen = lastSeen, -seen.timeIntervalSinceNow > staleAfter { info.stale = true }
        return info
    }
}
