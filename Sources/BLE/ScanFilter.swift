/// Matches advertisement data that starts with `dataPrefix`, compared under `mask` when one is given.
protocol DataPrefixFilter {
    var dataPrefix: [UInt8] { get }
    var mask: [UInt8]? { get }
}

/// The longest `dataPrefix` a filter takes, in bytes.
public let longestDataPrefix = 31

extension DataPrefixFilter {
    /// `data[i] & mask[i] == dataPrefix[i] & mask[i]` for every prefix byte (mask all ones when nil).
    /// A filter with a mask of the wrong length matches nothing.
    func matches(_ data: [UInt8]?) -> Bool {
        guard let data, data.count >= dataPrefix.count else { return false }
        let mask = mask ?? Array(repeating: 0xFF, count: dataPrefix.count)
        guard mask.count == dataPrefix.count else { return false }
        return zip(zip(data, dataPrefix), mask).allSatisfy { pair, m in pair.0 & m == pair.1 & m }
    }

    func validate(_ label: String) throws(BLEError) {
        // Longer could never match a legacy advertisement, and the bound lets openapi.yaml spell
        // out "as long as dataPrefix" for `mask`, length by length (JSON Schema cannot compare).
        if dataPrefix.count > longestDataPrefix {
            throw BLEError(.invalidParameters,
                "\(label): dataPrefix has \(dataPrefix.count) bytes; at most \(longestDataPrefix), a legacy advertisement's whole payload")
        }
        if let mask, mask.count != dataPrefix.count {
            throw BLEError(.invalidParameters,
                "\(label): mask has \(mask.count) bytes but dataPrefix has \(dataPrefix.count); they must be the same length")
        }
    }
}

/// Manufacturer-specific data: the company identifier and a prefix of the bytes after it.
public struct ManufacturerDataFilter: Sendable, Hashable, DataPrefixFilter {
    public var companyIdentifier: UInt16
    public var dataPrefix: [UInt8]
    /// Same length as `dataPrefix`; nil compares every bit.
    public var mask: [UInt8]?

    public init(companyIdentifier: UInt16, dataPrefix: [UInt8] = [], mask: [UInt8]? = nil) {
        self.companyIdentifier = companyIdentifier
        self.dataPrefix = dataPrefix
        self.mask = mask
    }
}

/// Service data: the service UUID and a prefix of its data.
public struct ServiceDataFilter: Sendable, Hashable, DataPrefixFilter {
    public var service: BluetoothUUID
    public var dataPrefix: [UInt8]
    /// Same length as `dataPrefix`; nil compares every bit.
    public var mask: [UInt8]?

    public init(service: BluetoothUUID, dataPrefix: [UInt8] = [], mask: [UInt8]? = nil) {
        self.service = service
        self.dataPrefix = dataPrefix
        self.mask = mask
    }
}

/// A scan request, after Web Bluetooth's `requestLEScan` options. Every criterion that is set must
/// hold for a device to match; with none set every device matches.
public struct ScanOptions: Sendable, Hashable {
    /// The device must advertise **at least one** of these service UUIDs. This is BlueZ's `UUIDs`
    /// discovery-filter semantics (and what is pushed down to BlueZ), not Web Bluetooth's, where one
    /// filter requires all of its services.
    public var services: [BluetoothUUID]
    /// Exact name.
    public var name: String?
    public var namePrefix: String?
    /// Every entry must match.
    public var manufacturerData: [ManufacturerDataFilter]
    /// Every entry must match.
    public var serviceData: [ServiceDataFilter]
    /// RSSI floor in dBm: a device matches when its RSSI is known and >= this.
    public var rssi: Int?
    /// Report every advertisement, not only the first one and changes.
    public var allowDuplicates: Bool
    /// Active scanning (scan requests) rather than passive listening.
    public var active: Bool
    /// Seconds after which the scan stops by itself; nil for no limit.
    public var timeout: Double?

    public init(
        services: [BluetoothUUID] = [],
        name: String? = nil,
        namePrefix: String? = nil,
        manufacturerData: [ManufacturerDataFilter] = [],
        serviceData: [ServiceDataFilter] = [],
        rssi: Int? = nil,
        allowDuplicates: Bool = false,
        active: Bool = true,
        timeout: Double? = nil
    ) {
        self.services = services
        self.name = name
        self.namePrefix = namePrefix
        self.manufacturerData = manufacturerData
        self.serviceData = serviceData
        self.rssi = rssi
        self.allowDuplicates = allowDuplicates
        self.active = active
        self.timeout = timeout
    }

    /// The accepted range of `rssi`, in dBm.
    public static let rssiRange = -127...20
    /// The longest accepted `timeout`, in seconds.
    public static let maximumTimeout: Double = 3600
    /// Web Bluetooth's limit for `name` and `namePrefix`, in UTF-8 bytes.
    public static let maximumNameLength = 248

    /// Whether a device passes every criterion that is set. `name` is the device's name as known
    /// (BlueZ `Name`); the name criteria hold when it or `advertisement.localName` satisfies them.
    public func matches(name deviceName: String?, rssi deviceRSSI: Int?, advertisement: AdvertisementData) -> Bool {
        if !services.isEmpty, !advertisement.serviceUUIDs.contains(where: services.contains) {
            return false
        }
        let names = [deviceName, advertisement.localName].compactMap { $0 }
        if let name, !names.contains(name) {
            return false
        }
        if let namePrefix, !names.contains(where: { $0.hasPrefix(namePrefix) }) {
            return false
        }
        if let rssi {
            guard let deviceRSSI, deviceRSSI >= rssi else { return false }
        }
        return manufacturerData.allSatisfy { $0.matches(advertisement.manufacturerData[$0.companyIdentifier]) }
            && serviceData.allSatisfy { $0.matches(advertisement.serviceData[$0.service]) }
    }

    /// Throws `invalidParameters` for a mask whose length differs from its prefix, an empty or
    /// over-long name or name prefix, a timeout outside (0, 3600] s, or an RSSI outside -127...20 dBm.
    public func validate() throws(BLEError) {
        for (label, value) in [("name", name), ("namePrefix", namePrefix)] {
            guard let value else { continue }
            if value.isEmpty {
                throw BLEError(.invalidParameters, "\(label) must not be empty")
            }
            if value.utf8.count > Self.maximumNameLength {
                throw BLEError(.invalidParameters,
                    "\(label) is \(value.utf8.count) UTF-8 bytes; at most \(Self.maximumNameLength) are allowed")
            }
        }
        if let timeout, !(timeout > 0 && timeout <= Self.maximumTimeout) {
            throw BLEError(.invalidParameters,
                "timeout \(timeout) is out of range; it must be more than 0 and at most \(Int(Self.maximumTimeout)) seconds")
        }
        if let rssi, !Self.rssiRange.contains(rssi) {
            throw BLEError(.invalidParameters,
                "rssi \(rssi) is out of range; it must be within \(Self.rssiRange.lowerBound)...\(Self.rssiRange.upperBound) dBm")
        }
        for (i, filter) in manufacturerData.enumerated() {
            let company = Hex.string(UInt64(filter.companyIdentifier), byteCount: 2, uppercase: true)
            try filter.validate("manufacturerData[\(i)] (company 0x\(company))")
        }
        for (i, filter) in serviceData.enumerated() {
            try filter.validate("serviceData[\(i)] (service \(filter.service))")
        }
    }
}
