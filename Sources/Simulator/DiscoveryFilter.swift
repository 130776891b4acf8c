import BLE
import DBus

/// One client's SetDiscoveryFilter, parsed as bluetoothd 5.66 does (src/adapter.c).
struct DiscoveryFilter: Equatable, Sendable {
    enum Transport: String, Sendable { case auto, bredr, le }

    var uuids: [BluetoothUUID] = []
    var rssi: Int?
    var pathloss: Int?
    var transport: Transport = .auto
    var duplicateData = false
    var discoverable = false
    var pattern: String?

    static let keys = ["UUIDs", "RSSI", "Pathloss", "Transport", "DuplicateData", "Discoverable", "Pattern"]

    /// nil for an empty dictionary (no filter); throws InvalidArguments on an unknown key, a
    /// wrong type, an out-of-range value, or RSSI together with Pathloss.
    static func parse(_ value: Value) throws(BusError) -> DiscoveryFilter? {
        guard let entries = value.dictionaryEntries else { throw BlueZError.invalidArguments() }
        if entries.isEmpty { return nil }
        var filter = DiscoveryFilter()
        for entry in entries {
            guard let key = entry.key.string, case .variant(let inner) = entry.value else { throw BlueZError.invalidArguments() }
            switch (key, inner) {
            case ("UUIDs", .array(let element, let items)) where element.rawValue == "s":
                for item in items {
                    guard let text = item.string, let uuid = BluetoothUUID(text) else { throw BlueZError.invalidArguments() }
                    filter.uuids.append(uuid)
                }
            case ("RSSI", .int16(let n)) where (-127...20).contains(n):
                filter.rssi = Int(n)
            case ("Pathloss", .uint16(let n)) where n <= 137:
                filter.pathloss = Int(n)
            case ("Transport", .string(let s)):
                guard let t = Transport(rawValue: s) else { throw BlueZError.invalidArguments() }
                filter.transport = t
            case ("DuplicateData", .bool(let b)):
                filter.duplicateData = b
            case ("Discoverable", .bool(let b)):
                filter.discoverable = b
            case ("Pattern", .string(let s)):
                filter.pattern = s
            default:
                throw BlueZError.invalidArguments()
            }
        }
        if filter.rssi != nil && filter.pathloss != nil { throw BlueZError.invalidArguments() }
        return filter
    }
}

/// A client that called StartDiscovery, or SetDiscoveryFilter ahead of it.
struct DiscoveryClient: Sendable {
    var filter: DiscoveryFilter?
    var discovering = false
}

/// What one advertisement carries.
struct Advertisement: Sendable {
    var name: String?
    var uuids: [BluetoothUUID]
    var manufacturerData: [UInt16: [UInt8]]
    var serviceData: [BluetoothUUID: [UInt8]]
    var txPower: Int?
    var flags: [UInt8]
    var rssi: Int
}

/// The filters of all discovering clients together, as bluetoothd merges them for the kernel
/// and then re-checks each report (merge_discovery_filters, is_filter_match, device_is_discoverable).
struct MergedDiscovery: Sendable {
    let clients: [DiscoveryClient]

    init(_ clients: some Sequence<DiscoveryClient>) {
        self.clients = clients.filter(\.discovering)
    }

    /// Some client set a filter: every RSSI change is reported (else only changes of 8 dB or more).
    var isFiltered: Bool { clients.contains { $0.filter != nil } }

    /// Some client asked for DuplicateData: bluetoothd then replaces the advertisement data at
    /// every report and signals it each time.
    var duplicateData: Bool { clients.contains { $0.filter?.duplicateData == true } }

    /// The kernel reports the advertisement to the management socket: it scans LE, and the
    /// filter bluetoothd gave it (Start Service Discovery: the lowest RSSI asked for, the UUIDs
    /// of all clients unless one asked for none) keeps it.
    func kernelReports(_ ad: Advertisement) -> Bool {
        guard !clients.isEmpty, scansLE else { return false }
        if let threshold = kernelRSSI, ad.rssi < threshold { return false }
        return clients.contains { client in
            guard let filter = client.filter, !filter.uuids.isEmpty else { return true }
            return filter.uuids.contains { ad.uuids.contains($0) }
        }
    }

    /// A regular discovery (no filter) or any filter with transport auto or le scans LE.
    private var scansLE: Bool {
        clients.contains { $0.filter == nil || $0.filter!.transport != .bredr }
    }

    /// The kernel filters on the lowest RSSI asked for, and not at all if any client asked none
    /// (or asked Pathloss, which only bluetoothd could compute; 5.66 then never applies it).
    private var kernelRSSI: Int? {
        var lowest: Int?
        for client in clients {
            guard let rssi = client.filter?.rssi else { return nil }
            lowest = min(lowest ?? rssi, rssi)
        }
        return lowest
    }

    /// bluetoothd then reports what the kernel reported if it is discoverable (or any with a
    /// filter set), or matches a client's pattern.
    func isDiscoverable(_ ad: Advertisement, address: BluetoothAddress) -> Bool {
        var discoverable = isFiltered || (ad.flags.first ?? 0) & 0x03 != 0
        for client in clients {
            guard let pattern = client.filter?.pattern else { continue }
            discoverable = false
            if pattern.isEmpty || address.description.hasPrefix(pattern) || (ad.name?.hasPrefix(pattern) ?? false) { return true }
        }
        return discoverable
    }
}
