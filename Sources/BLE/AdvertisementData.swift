/// What a peripheral advertised, under CoreBluetooth's advertisement-data key names.
public struct AdvertisementData: Sendable, Hashable {
    /// `CBAdvertisementDataLocalNameKey`.
    public var localName: String?
    /// `CBAdvertisementDataServiceUUIDsKey`.
    public var serviceUUIDs: [BluetoothUUID]
    /// `CBAdvertisementDataManufacturerDataKey`, split: company identifier → the bytes after it.
    public var manufacturerData: [UInt16: [UInt8]]
    /// `CBAdvertisementDataServiceDataKey`.
    public var serviceData: [BluetoothUUID: [UInt8]]
    /// `CBAdvertisementDataTxPowerLevelKey`, dBm.
    public var txPowerLevel: Int?
    /// `CBAdvertisementDataIsConnectable`; nil when unknown.
    public var isConnectable: Bool?
    /// The Flags AD structure's byte (discoverable modes, BR/EDR support), when the stack reports it.
    public var flags: UInt8?
    /// Other AD structures as received, by AD type, when the stack passes them on (types the
    /// fields above carry are not among them).
    public var otherStructures: [UInt8: [UInt8]]
    /// The AD structures as the controller reported them (advertisement, then scan response),
    /// when the stack passed the bytes on (the kernel's management socket); nil when the fields
    /// above were all there was (BlueZ's D-Bus properties).
    public var raw: [UInt8]?

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
}
