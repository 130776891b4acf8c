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
    /// Bumped by every change that can change `peripherals()`.
    private let listVersion = Atomic<UInt64>(0)

    /// A device not seen for this long is listed as `stale`.
    let staleAfter: Double
    /// The watch forgets a device not heard for this long.
    let forgetAfter: Double

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

    /// BlueZ removed the device at `path` (RemoveDevice, or a temporary device dropped): its
    /// pairing, bond and trust went with it, and what is kept of it to be listed (stale) says so
    /// before the list's version moves on, so that no read after a bond's removal shows the bond.
    func forgot(_ path: ObjectPath) {
        guard path.parent == index.adapterPath(), let id = BlueZ.address(pathElement: path.lastElement) else { return }
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
        guard let adapter = index.adapterPath() else { return [] }
        let (seen, last, heard) = sightings.withLock { ($0.seen, $0.last, $0.watch?.heard ?? [:]) }
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

    /// The devices the watch follows, as BlueZ has them, or as last heard once BlueZ forgot them.
    func watched() -> [PeripheralInfo] {
        let adapter = index.adapterPath()
        let (heard, last) = sightings.withLock { s -> ([BluetoothAddress: Date], [BluetoothAddress: PeripheralInfo]) in
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

    func peripheral(_ id: BluetoothAddress) throws(BLEError) -> PeripheralInfo {
        let path: ObjectPath
        do {
            path = try index.devicePath(id)
        } catch {
            if let snapshot = sightings.withLock({ $0.last[id] ?? $0.watch?.last[id] }) { return stale(snapshot) }
            throw error
        }
        guard let props = tree.properties(at: path, BlueZ.deviceInterface),
              let info = info(path, props, lastSeen: sightings.withLock({ $0.seen[id] ?? $0.watch?.heard[id] }), transition: moving.withLock({ $0[id] })) else {
            throw BLEError(.unknownDevice, "no device \(id) is known to the adapter; scan for it first")
        }
        return info
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

    private func info(_ path: ObjectPath, _ props: [String: Value], lastSeen: Date?, transition: PeripheralState?) -> PeripheralInfo? {
        guard var info = DeviceProperties.peripheral(props, lastSeen: lastSeen) else { return nil }
        if let transition { info.state = transition }
        if info.state == .connected { info.mtu = index.mtu(path) }
        info.reconnect = reconnects.withLock { $0[info.id] }
        if info.state == .disconnected, let seen = lastSeen, -seen.timeIntervalSinceNow > staleAfter { info.stale = true }
        return info
    }
}
