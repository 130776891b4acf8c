import Synchronization

/// What a peripheral advertised, under CoreBluetooth's advertisement-data key names.
///
/// The fields live in one shared box, copied only when a copy is changed: a device's
/// advertisement is handed on whole at every advertisement heard (the device list, the sensor
/// board, each door), and one reference is cheaper to pass than seven. Made from the bytes
/// (`init(advertisingData:connectable:)`), the box reads its lists and tables from them at the
/// first use: a stream of advertisements that are only passed on as bytes (a Bluetooth proxy)
/// never builds them.
public struct AdvertisementData: Sendable, Hashable {
    private final class Fields: @unchecked Sendable {
        // Changed only through `unique()`, when no other value shares the box; the lazily read
        // fields (`serviceUUIDs` … `otherStructures`) also once by `parsed()`, under `parsing`,
        // before `pending` turns false (read with acquiring ordering, so readers see them whole).
        var localName: String?
        var serviceUUIDs: [BluetoothUUID]
        var manufacturerData: [UInt16: [UInt8]]
        var serviceData: [BluetoothUUID: [UInt8]]
        var txPowerLevel: Int?
        var isConnectable: Bool?
        var flags: UInt8?
        var otherStructures: [UInt8: [UInt8]]
        var raw: [UInt8]?
        /// The lazily read fields are still to be read from `raw`.
        let pending: Atomic<Bool>
        let parsing = Mutex(())

        init(localName: String?, serviceUUIDs: [BluetoothUUID], manufacturerData: [UInt16: [UInt8]], serviceData: [BluetoothUUID: [UInt8]],
             txPowerLevel: Int?, isConnectable: Bool?, flags: UInt8?, otherStructures: [UInt8: [UInt8]], raw: [UInt8]?,
             pending: Bool = false) {
            self.localName = localName
            self.serviceUUIDs = serviceUUIDs
            self.manufacturerData = manufacturerData
            self.serviceData = serviceData
            self.txPowerLevel = txPowerLevel
            self.isConnectable = isConnectable
            self.flags = flags
            self.otherStructures = otherStructures
            self.raw = raw
            self.pending = Atomic(pending && raw != nil)
        }

        /// The box with every field read.
        func parsed() -> Fields {
            guard pending.load(ordering: .acquiring) else { return self }
            parsing.withLock { _ in
                guard pending.load(ordering: .relaxed), let raw else { return }
                let read = AdvertisementData(parsing: raw, connectable: isConnectable).fields
                serviceUUIDs = read.serviceUUIDs
                manufacturerData = read.manufacturerData
                serviceData = read.serviceData
                txPowerLevel = read.txPowerLevel
                flags = read.flags
                otherStructures = read.otherStructures
                pending.store(false, ordering: .releasing)
            }
            return self
        }

        func copy() -> Fields {
            let f = parsed()
            return Fields(localName: f.localName, serviceUUIDs: f.serviceUUIDs, manufacturerData: f.manufacturerData, serviceData: f.serviceData,
                          txPowerLevel: f.txPowerLevel, isConnectable: f.isConnectable, flags: f.flags, otherStructures: f.otherStructures,
                          raw: f.raw)
        }
    }

    private var fields: Fields

    /// The box, read whole, and copied first if another value shares it.
    private mutating func unique() -> Fields {
        if !isKnownUniquelyReferenced(&fields) { fields = fields.copy() }
        return fields.parsed()
    }

    /// The bytes' fields read at the first use (`localName` and `isConnectable` are given).
    init(unparsed raw: [UInt8], localName: String?, connectable: Bool?) {
        fields = Fields(localName: localName, serviceUUIDs: [], manufacturerData: [:], serviceData: [:], txPowerLevel: nil,
                        isConnectable: connectable, flags: nil, otherStructures: [:], raw: raw, pending: true)
    }

    /// `CBAdvertisementDataLocalNameKey`.
    public var localName: String? {
        get { fields.localName }
        set { unique().localName = newValue }
    }
    /// `CBAdvertisementDataServiceUUIDsKey`.
    public var serviceUUIDs: [BluetoothUUID] {
        get { fields.parsed().serviceUUIDs }
        _modify { yield &unique().serviceUUIDs }
    }
    /// `CBAdvertisementDataManufacturerDataKey`, split: company identifier → the bytes after it.
    public var manufacturerData: [UInt16: [UInt8]] {
        get { fields.parsed().manufacturerData }
        _modify { yield &unique().manufacturerData }
    }
    /// `CBAdvertisementDataServiceDataKey`.
    public var serviceData: [BluetoothUUID: [UInt8]] {
        get { fields.parsed().serviceData }
        _modify { yield &unique().serviceData }
    }
    /// `CBAdvertisementDataTxPowerLevelKey`, dBm.
    public var txPowerLevel: Int? {
        get { fields.parsed().txPowerLevel }
        set { unique().txPowerLevel = newValue }
    }
    /// `CBAdvertisementDataIsConnectable`; nil when unknown.
    public var isConnectable: Bool? {
        get { fields.isConnectable }
        set { unique().isConnectable = newValue }
    }
    /// The Flags AD structure's byte (discoverable modes, BR/EDR support), when the stack reports it.
    public var flags: UInt8? {
        get { fields.parsed().flags }
        set { unique().flags = newValue }
    }
    /// Other AD structures as received, by AD type, when the stack passes them on (types the
    /// fields above carry are not among them).
    public var otherStructures: [UInt8: [UInt8]] {
        get { fields.parsed().otherStructures }
        _modify { yield &unique().otherStructures }
    }
    /// The AD structures as the controller reported them (advertisement, then scan response),
    /// when the stack passed the bytes on (the kernel's management socket); nil when the fields
    /// above were all there was (BlueZ's D-Bus properties).
    public var raw: [UInt8]? {
        get { fields.raw }
        set { unique().raw = newValue }
    }

    public init(
        localName: String? = nil,
        serviceUUIDs: [BluetoothUUID] = [],
        manufacturerData: [UInt16: [UInt8]] = [:],
        serviceData: [BluetoothUUID: [UInt8]] = [:],
        txPowerLevel: Int? = nil,
        isConnectable: Bool? = nil,
        flags: UInt8? = nil,
        otherStructures: [UInt8: [UInt8]] = [:],
        raw: [UInt8]? = nil
    ) {
        fields = Fields(localName: localName, serviceUUIDs: serviceUUIDs, manufacturerData: manufacturerData, serviceData: serviceData,
                        txPowerLevel: txPowerLevel, isConnectable: isConnectable, flags: flags, otherStructures: otherStructures, raw: raw)
    }
}
