import BLE
import DBus
import FoundationEssentials
import Synchronization
import Threading

/// What BlueZ's signals about devices mean: an advertisement heard (a device listened for is
/// heard), a device the scan found or heard again, one the watch follows; the device list is told,
/// and clients get `advertisement` events. The scan's and the watch's options are applied here
/// (BlueZ merges every client's discovery filters, so what it signals may match neither).
final class AdvertisementReports: Sendable {
    private let link: BusLink
    private let events: HandlerSlot<CentralEvent>
    private let discovery: Discovery
    private let devices: DeviceList
    private let hearing: Hearing
    /// What `observe` last made of each device BlueZ has (path → snapshot): an advertisement
    /// changes a few properties, and only those are read again. Entries go with their objects
    /// (InterfacesRemoved) and all at a reload, so it holds no more than the mirror does.
    private let snapshots = Mutex<[ObjectPath: PeripheralInfo]>([:])

    init(link: BusLink, events: HandlerSlot<CentralEvent>, discovery: Discovery, devices: DeviceList, hearing: Hearing) {
        self.link = link
        self.events = events
        self.discovery = discovery
        self.devices = devices
        self.hearing = hearing
    }

    private var tree: ObjectTree { link.tree }
    private var index: GATTIndex { link.index }

    /// Called by the tree's observer, for every change.
    func observe(_ change: ObjectTree.Change) {
        switch change {
        case .reloaded:
            snapshots.withLock { $0.removeAll() }
            devices.forgetSightings()
        case .added(_, let interfaces) where interfaces[BlueZ.adapterInterface] != nil: snapshots.withLock { $0.removeAll() }
        case .removed(_, let names) where names.contains(BlueZ.adapterInterface): snapshots.withLock { $0.removeAll() }
        case .removed(let p, let names):
            snapshots.withLock { $0[p] = nil }
            if names.contains(BlueZ.deviceInterface) { devices.forgot(p) }
        default: break
        }
        switch change {
        case .properties(_, let interface, let changed, let invalidated):
            let onlyAValue = interface == BlueZ.gattCharacteristicInterface && invalidated.isEmpty
                && changed.keys.allSatisfy { $0 == "Value" }
            if !onlyAValue { devices.listChanged() }
        case .reloaded, .added, .removed:
            devices.listChanged()
        }
        let path: ObjectPath
        switch change {
        case .added(let p, let interfaces) where interfaces[BlueZ.deviceInterface] != nil: path = p
        case .properties(let p, let interface, _, _) where interface == BlueZ.deviceInterface: path = p
        default: return
        }
        guard let adapter = path.parent, index.isInUse(adapter: adapter),
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
        // An advertisement another adapter hears better is listed, not told again.
        var echo = false
        if advertised {
            hearing.heard(address)
            echo = !devices.sighted(address, on: adapter.lastElement, rssi: snapshot.rssi, at: now)
        }
        let (scan, watch) = discovery.wanted()
        guard scan != nil || watch != nil else { return }
        // Parsed only for a device the scan or the watch does not follow yet, once.
        var parsed: (name: String?, rssi: Int?, advertisement: AdvertisementData)?
        func fields() -> (name: String?, rssi: Int?, advertisement: AdvertisementData) {
            if let parsed { return parsed }
            let f = (DeviceProperties.name(props), DeviceProperties.rssi(props), DeviceProperties.advertisement(props))
            parsed = f
            return f
        }
        var watched = false
        if let options = watch, devices.heardByWatch(address)
            || options.matches(address, name: fields().name, rssi: fields().rssi, advertisement: fields().advertisement) {
            // Every advertisement of a watched device, duplicates included: a Bluetooth
            // proxy's clients (Home Assistant) expect the steady stream a radio hears.
            watched = devices.heard(address, snapshot, at: now) || advertised
        }
        var report: Report?
        if let options = scan {
            let known = devices.seenByScan(address)
            if known || options.matches(name: fields().name, rssi: fields().rssi, advertisement: fields().advertisement) {
                devices.seen(address, snapshot, at: now)
                report = !known ? .discovered : echo ? nil : options.allowDuplicates ? .discovered : dataChanged ? .dataChanged : nil
            }
        }
        switch report {
        case .discovered: events(.advertisement(snapshot))
        case .dataChanged: events(.advertisementChanged(snapshot))
        case nil: if watched && !echo { events(.advertisementChanged(snapshot)) }
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
}
