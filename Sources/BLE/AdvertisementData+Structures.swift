/// Advertising data read from its AD structures (Core Supplement Part A; Assigned Numbers §2.3),
/// as the kernel reports them: the fields CoreBluetooth names, the rest kept by type.
extension AdvertisementData {
    /// The AD types read into fields; any other type goes to `otherStructures`.
    public enum ADType {
        public static let flags: UInt8 = 0x01
        public static let incompleteUUIDs16: UInt8 = 0x02
        public static let completeUUIDs16: UInt8 = 0x03
        public static let incompleteUUIDs32: UInt8 = 0x04
        public static let completeUUIDs32: UInt8 = 0x05
        public static let incompleteUUIDs128: UInt8 = 0x06
        public static let completeUUIDs128: UInt8 = 0x07
        public static let shortenedLocalName: UInt8 = 0x08
        public static let completeLocalName: UInt8 = 0x09
        public static let txPowerLevel: UInt8 = 0x0A
        public static let serviceData16: UInt8 = 0x16
        public static let serviceData32: UInt8 = 0x20
        public static let serviceData128: UInt8 = 0x21
        public static let manufacturerData: UInt8 = 0xFF
    }

    /// The data of the AD structures `raw` holds, one after the other (length, type, data; the
    /// advertisement, then the scan response). A structure too short for its type is left out, as
    /// BlueZ leaves it out, and so is one that runs past the end; a complete name wins over a
    /// shortened one; a later structure of a type adds to (lists) or replaces (values) an earlier
    /// one, as a scan response does after its advertisement. The name is read now, the rest at
    /// the first use (see the type); `name` is the local name when the bytes carry none.
    public init(advertisingData raw: [UInt8], connectable: Bool?, name: String? = nil) {
        self.init(unparsed: raw, localName: Self.localName(in: raw) ?? name, connectable: connectable)
    }

    /// The local name the AD structures in `raw` carry: the last complete one, else the last
    /// shortened one. Reads only the structures' headers but the name's.
    public static func localName(in raw: [UInt8]) -> String? {
        var complete: ArraySlice<UInt8>?
        var shortened: ArraySlice<UInt8>?
        var offset = 0
        while offset + 1 < raw.count, raw[offset] != 0 {
            let end = offset + 1 + Int(raw[offset])
            guard end <= raw.count else { break }
            switch raw[offset + 1] {
            case ADType.completeLocalName: complete = raw[offset + 2..<end]
            case ADType.shortenedLocalName: shortened = raw[offset + 2..<end]
            default: break
            }
            offset = end
        }
        return (complete ?? shortened).map { String(decoding: $0, as: UTF8.self) }
    }

    /// Every field read from `raw` now: not generic, and reading `raw` in place.
    init(parsing raw: [UInt8], connectable: Bool?) {
        self.init(localName: Self.localName(in: raw), isConnectable: connectable, raw: raw)
        var offset = 0
        while offset + 1 < raw.count, raw[offset] != 0 {
            let end = offset + 1 + Int(raw[offset])
            guard end <= raw.count else { break }
            let type = raw[offset + 1]
            let data = raw[offset + 2..<end]
            offset = end
            switch type {
            case ADType.flags:
                flags = data.first
            case ADType.incompleteUUIDs16, ADType.completeUUIDs16:
                appendUUIDs(data, width: 2)
            case ADType.incompleteUUIDs32, ADType.completeUUIDs32:
                appendUUIDs(data, width: 4)
            case ADType.incompleteUUIDs128, ADType.completeUUIDs128:
                appendUUIDs(data, width: 16)
            case ADType.shortenedLocalName, ADType.completeLocalName:
                continue  // `localName(in:)`
            case ADType.txPowerLevel:
                if let level = data.first { txPowerLevel = Int(Int8(bitPattern: level)) }
            case ADType.serviceData16, ADType.serviceData32, ADType.serviceData128:
                let width = type == ADType.serviceData16 ? 2 : type == ADType.serviceData32 ? 4 : 16
                guard data.count >= width, let uuid = Self.uuid(data.prefix(width)) else { continue }
                serviceData[uuid] = Array(data.dropFirst(width))
            case ADType.manufacturerData:
                guard data.count >= 2 else { continue }
                let company = UInt16(data[data.startIndex]) | UInt16(data[data.startIndex + 1]) << 8
                manufacturerData[company] = Array(data.dropFirst(2))
            default:
                otherStructures[type] = Array(data)
            }
        }
    }

    /// Little-endian UUIDs of `width` bytes each, those not listed yet; a trailing part shorter
    /// than a UUID is left out.
    private mutating func appendUUIDs(_ data: ArraySlice<UInt8>, width: Int) {
        var start = data.startIndex
        while start + width <= data.endIndex {
            if let uuid = Self.uuid(data[start..<start + width]), !serviceUUIDs.contains(uuid) { serviceUUIDs.append(uuid) }
            start += width
        }
    }

    /// A UUID from its little-endian bytes (2, 4 or 16 of them).
    private static func uuid(_ bytes: ArraySlice<UInt8>) -> BluetoothUUID? {
        switch bytes.count {
        case 2: BluetoothUUID(uint16: UInt16(bytes[bytes.startIndex]) | UInt16(bytes[bytes.startIndex + 1]) << 8)
        case 4: BluetoothUUID(uint32: bytes.reversed().reduce(0) { $0 << 8 | UInt32($1) })
        case 16: BluetoothUUID(bytes: Array(bytes.reversed()))
        default: nil
        }
    }
}

extension AdvertisementData {
    /// With the bytes on both sides, they decide (every field is read from them, but the name
    /// an earlier scan response gave and whether the advertisement was connectable): compared
    /// at every advertisement heard, and cheaper than the fields' dictionaries.
    public static func == (lhs: AdvertisementData, rhs: AdvertisementData) -> Bool {
        if let a = lhs.raw, let b = rhs.raw {
            return a == b && lhs.localName == rhs.localName && lhs.isConnectable == rhs.isConnectable
        }
        return lhs.localName == rhs.localName && lhs.serviceUUIDs == rhs.serviceUUIDs && lhs.manufacturerData == rhs.manufacturerData
            && lhs.serviceData == rhs.serviceData && lhs.txPowerLevel == rhs.txPowerLevel && lhs.isConnectable == rhs.isConnectable
            && lhs.flags == rhs.flags && lhs.otherStructures == rhs.otherStructures && lhs.raw == rhs.raw
    }

    /// What `==` compares.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(raw)
        hasher.combine(localName)
        hasher.combine(isConnectable)
        guard raw == nil else { return }
        hasher.combine(serviceUUIDs)
        hasher.combine(manufacturerData)
        hasher.combine(serviceData)
        hasher.combine(txPowerLevel)
        hasher.combine(flags)
        hasher.combine(otherStructures)
    }
}
