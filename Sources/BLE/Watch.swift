import FoundationEssentials

/// What a watch follows: a discovery that lasts as long as the gateway runs (until it is
/// stopped), for what devices say in their advertisements (sensor readings), beside any scan.
/// Every criterion that is set must hold; with none set every device is followed.
public struct WatchOptions: Sendable, Hashable {
    /// Only these devices.
    public var devices: [BluetoothAddress]
    /// Devices that advertise one of these services, as a service UUID or as service data
    /// under it (BTHome, ATC1441 and PVVX sensors send only service data).
    public var services: [BluetoothUUID]
    /// The device's name (or its advertised local name) starts with this.
    public var namePrefix: String?
    /// RSSI floor in dBm: a device is followed when its RSSI is known and >= this.
    public var rssi: Int?
    /// Active scanning (scan requests) rather than passive listening, where the stack can
    /// listen passively (not a filter: what matches is the same).
    public var active: Bool

    public init(devices: [BluetoothAddress] = [], services: [BluetoothUUID] = [], namePrefix: String? = nil, rssi: Int? = nil,
                active: Bool = true) {
        self.devices = devices
        self.services = services
        self.namePrefix = namePrefix
        self.rssi = rssi
        self.active = active
    }

    /// Whether any filter is set (the mode is none).
    public var hasFilters: Bool { !devices.isEmpty || !services.isEmpty || namePrefix != nil || rssi != nil }

    /// The most entries `devices` and `services` take each.
    public static let maximumEntries = 256

    public func matches(_ address: BluetoothAddress, name: String?, rssi deviceRSSI: Int?, advertisement: AdvertisementData) -> Bool {
        if !devices.isEmpty, !devices.contains(address) { return false }
        if !services.isEmpty,
           !services.contains(where: { advertisement.serviceUUIDs.contains($0) || advertisement.serviceData[$0] != nil }) {
            return false
        }
        if let namePrefix, ![name, advertisement.localName].contains(where: { $0?.hasPrefix(namePrefix) == true }) {
            return false
        }
        if let rssi {
            guard let deviceRSSI, deviceRSSI >= rssi else { return false }
        }
        return true
    }

    /// Throws `invalidParameters` for an empty or over-long name prefix, an RSSI outside
    /// -127...20 dBm, or more than `maximumEntries` devices or services.
    public func validate() throws(BLEError) {
        if let namePrefix {
            if namePrefix.isEmpty { throw BLEError(.invalidParameters, "namePrefix must not be empty") }
            if namePrefix.utf8.count > ScanOptions.maximumNameLength {
                throw BLEError(.invalidParameters,
                    "namePrefix is \(namePrefix.utf8.count) UTF-8 bytes; at most \(ScanOptions.maximumNameLength) are allowed")
            }
        }
        if let rssi, !ScanOptions.rssiRange.contains(rssi) {
            throw BLEError(.invalidParameters,
                "rssi \(rssi) is out of range; it must be within \(ScanOptions.rssiRange.lowerBound)...\(ScanOptions.rssiRange.upperBound) dBm")
        }
        for (label, count) in [("devices", devices.count), ("services", services.count)] where count > Self.maximumEntries {
            throw BLEError(.invalidParameters, "\(label) has \(count) entries; at most \(Self.maximumEntries) are allowed")
        }
    }
}

/// The watch as it stands.
public struct WatchStatus: Sendable, Equatable {
    public var watching: Bool
    /// The options of the running watch.
    public var options: WatchOptions?
    /// When the running watch started.
    public var since: Date?
    /// Whether the stack is discovering for it now (false while the adapter is off or the stack
    /// is away: the watch resumes by itself when they are back).
    public var discovering: Bool
    /// Devices the watch follows now (heard since it started, and not yet forgotten).
    public var devices: Int
    /// How the controller scans for the watch now; nil when there is no watch.
    public var mode: ScanMode?

    public init(watching: Bool, options: WatchOptions?, since: Date?, discovering: Bool, devices: Int, mode: ScanMode? = nil) {
        self.watching = watching
        self.options = options
        self.since = since
        self.discovering = discovering
        self.devices = devices
        self.mode = mode
    }

    public static let off = WatchStatus(watching: false, options: nil, since: nil, discovering: false, devices: 0)
}
