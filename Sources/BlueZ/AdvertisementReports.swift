import BLE
import DBus
import FoundationEssentials
import Management
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
    /// The same for advertisements the kernel reports, by controller and address: entries go
    /// when BlueZ's object of the device changes or goes (read again at the next one), all at
    /// a reload, and all past `kernelLimit` (devices BlueZ never made an object of).
    private let kernelSnapshots = Mutex<[KernelKey: PeripheralInfo]>([:])
    static let kernelLimit = 8192

    /// A device as one controller hears it.
    struct KernelKey: Hashable {
        let controller: UInt16
        let address: BluetoothAddress

        init(controller: UInt16, address: BluetoothAddress) {
            self.controller = controller
            self.address = address
        }

        /// The key of BlueZ's device object at `path` (/org/bluez/hciN/dev_…).
        init?(_ path: ObjectPath) {
            guard let adapter = path.parent, let controller = ControllerIndex(adapterName: String(adapter.lastElement)),
                  let address = BlueZ.address(pathElement: path.lastElement) else { return nil }
            self.init(controller: controller.rawValue, address: address)
        }
    }

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
            kernelSnapshots.withLock { $0.removeAll() }
            devices.forgetSightings()
        case .added(_, let interfaces) where interfaces[BlueZ.adapterInterface] != nil: snapshots.withLock { $0.removeAll() }
        case .removed(_, let names) where names.contains(BlueZ.adapterInterface): snapshots.withLock { $0.removeAll() }
        case .removed(let p, let names):
            snapshots.withLock { $0[p] = nil }
            if names.contains(BlueZ.deviceInterface) {
                devices.forgot(p)
                if let key = KernelKey(p) { kernelSnapshots.withLock { _ = $0.removeValue(forKey: key) } }
                link.signals.disengage(p)
            }
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
        // Advertisements come from the kernel: what BlueZ signals of a device changes its
        // snapshot there (a name, a pairing), never tells an advertisement.
        if link.advertisementPath == .kernel {
            if let key = KernelKey(path) { kernelSnapshots.withLock { _ = $0.removeValue(forKey: key) } }
            return
        }
        let now = Date()
        guard let snapshot = snapshot(path, props, change, at: now) else { return }
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
        report(snapshot, on: adapter.lastElement, advertised: advertised, dataChanged: dataChanged, at: now)
    }

    /// An advertisement the kernel reported (the management channel's thread): the device as its
    /// last snapshot (BlueZ's properties, once) says, with this advertisement's RSSI and data.
    func heard(_ found: DeviceFound) {
        let key = KernelKey(controller: found.controller.rawValue, address: found.address)
        let adapter = Self.adapterName(found.controller.rawValue)
        let now = Date()
        let raw = found.advertisingData.bytes
        let (snapshot, dataChanged) = kernelSnapshots.withLock { s -> (PeripheralInfo, Bool) in
            if s.count >= Self.kernelLimit, s[key] == nil { s.removeAll(keepingCapacity: true) }
            // Changed in place: one lookup, no copy of the snapshot in and out of the table.
            func update(_ info: inout PeripheralInfo) -> (PeripheralInfo, Bool) {
                let changed = info.advertisement.raw != raw
                if changed {
                    // A scan response carries the name, the advertisement often not: the last one holds.
                    info.advertisement = AdvertisementData(advertisingData: raw, connectable: !found.flags.contains(.notConnectable),
                                                           name: info.advertisement.localName)
                    if info.name == nil { info.name = info.advertisement.localName }
                }
                info.rssi = found.rssi
                info.lastSeen = now
                return (info, changed)
            }
            return update(&s[key, default: fresh(found, adapter: adapter)])
        }
        report(snapshot, on: adapter, advertised: true, dataChanged: dataChanged, at: now)
    }

    /// "hci0"… for the first controllers, made once (not at every advertisement).
    private static let adapterNames: [Substring] = (0..<16).map { Substring("hci\($0)") }

    static func adapterName(_ controller: UInt16) -> Substring {
        Int(controller) < adapterNames.count ? adapterNames[Int(controller)] : Substring("hci\(controller)")
    }

    /// A device heard by the kernel first: as BlueZ has it, if it does, else from the event alone.
    private func fresh(_ found: DeviceFound, adapter: Substring) -> PeripheralInfo {
        if let path = index.devicePath(found.address, onAdapter: adapter),
           let props = tree.properties(at: path, BlueZ.deviceInterface), var info = DeviceProperties.peripheral(props, lastSeen: nil) {
            info.advertisement = AdvertisementData(localName: info.advertisement.localName)
            return info
        }
        return PeripheralInfo(id: found.address, addressType: found.addressType == .leRandom ? "random" : "public", name: nil,
                              rssi: nil, lastSeen: nil, state: .disconnected, paired: false, advertisement: AdvertisementData())
    }

    /// What is told of an advertisement heard (`advertised`) or of a device's change: the device
    /// list, the devices listened for, the scan's and the watch's clients.
    private func report(_ snapshot: PeripheralInfo, on adapter: Substring, advertised: Bool, dataChanged: Bool, at now: Date) {
        let address = snapshot.id
        // An advertisement another adapter hears better is listed, not told again.
        var echo = false
        if advertised {
            hearing.heard(address)
            echo = !devices.sighted(address, on: adapter, rssi: snapshot.rssi, at: now)
        }
        let (scan, watch) = discovery.wanted()
        guard scan != nil || watch != nil else { return }
        var watched = false
        if let options = watch, devices.heardByWatch(address)
            || options.matches(address, name: snapshot.name, rssi: snapshot.rssi, advertisement: snapshot.advertisement) {
            // Every advertisement of a watched device, duplicates included: a Bluetooth
            // proxy's clients (Home Assistant) expect the steady stream a radio hears.
            watched = devices.heard(address, snapshot, at: now) || advertised
        }
        var report: Report?
        if let options = scan {
            let known = devices.seenByScan(address)
            if known || options.matches(name: snapshot.name, rssi: snapshot.rssi, advertisement: snapshot.advertisement) {
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
