/// What a peripheral advertised, under CoreBluetooth's advertisement-data key names.
///
/// The fields live in one shared box, copied only when a copy is changed: a device's
/// advertisement is handed on whole at every advertisement heard (the device list, the sensor
/// board, each door), and one reference is cheaper to pass than seven.
public struct AdvertisementData: Sendable, Hashable {
    private final class Fields: @unchecked Sendable {
        // Mutated only through `unique()`, when no other value shares the box.
        var localName: String?
        var serviceUUIDs: [BluetoothUUID]
        var manufacturerData: [UInt16: [UInt8]]
        var serviceData: [BluetoothUUID: [UInt8]]
        var txPowerLevel: Int?
        var isConnectable: Bool?
        var flags: UInt8?
        var otherStructures: [UInt8: [UInt8]]
        var raw: [UInt8]?

        init(localName: String?, serviceUUIDs: [BluetoothUUID], manufacturerData: [UInt16: [UInt8]], serviceData: [BluetoothUUID: [UInt8]],
             txPowerLevel: Int?, isConnectable: Bool?, flags: UInt8?, otherStructures: [UInt8: [UInt8]], raw: [UInt8]?) {
            self.localName = localName
            self.serviceUUIDs = serviceUUIDs
            self.manufacturerData = manufacturerData
            self.serviceData = serviceData
            self.txPowerLevel = txPowerLevel
            self.isConnectable = isConnectable
            self.flags = flags
            self.otherStructures = otherStructures
            self.raw = raw
        }

        func copy() -> Fields {
            Fields(localName: localName, serviceUUIDs: serviceUUIDs, manufacturerData: manufacturerData, serviceData: serviceData,
                   txPowerLevel: txPowerLevel, isConnectable: isConnectable, flags: flags, otherStructures: otherStructures, raw: raw)
        }
    }

    private var fields: Fields

    /// The box, copied first if another value shares it.
    private mutating func unique() -> Fields {
        if !isKnownUniquelyReferenced(&fields) { fields = fields.copy() }
        return fields
    }

    /// `CBAdvertisementDataLocalNameKey`.
    public var localName: String? {
        get { fields.localName }
        set { unique().localName = newValue }
    }
    /// `CBAdvertisementDataServiceUUIDsKey`.
    public var serviceUUIDs: [BluetoothUUID] {
        get { fields.serviceUUIDs }
        _modify { yield &unique().serviceUUIDs }
    }
    /// `CBAdvertisementDataManufacturerDataKey`, split: company identifier → the bytes after it.
    public var manufacturerData: [UInt16: [UInt8]] {
        get { fields.manufacturerData }
        _modify { yield &unique().manufacturerData }
    }
    /// `CBAdvertisementDataServiceDataKey`.
    public var serviceData: [BluetoothUUID: [UInt8]] {
        get { fields.serviceData }
        _modify { yield &unique().serviceData }
    }
    /// `CBAdvertisementDataTxPowerLevelKey`, dBm.
    public var txPowerLevel: Int? {
        get { fields.txPowerLevel }
        set { unique().txPowerLevel = newValue }
    }
    /// `CBAdvertisementDataIsConnectable`; nil when unknown.
    public var isConnectable: Bool? {
        get { fields.isConnectable }
        set { unique().isConnectable = newValue }
    }
    /// The Flags AD structure's byte (discoverable modes, BR/EDR support), when the stack reports it.
    public var flags: UInt8? {
        get { fields.flags }
        set { unique().flags = newValue }
    }
    /// Other AD structures as received, by AD type, when the stack passes them on (types the
    /// fields above carry are not among them).
    public var otherStructures: [UInt8: [UInt8]] {
        get { fields.otherStructures }
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
