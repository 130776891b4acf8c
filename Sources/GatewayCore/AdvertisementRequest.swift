import BLE
import Sensors

/// An advertisement as clients ask for it (`POST /v1/peripheral/advertisements`, kept so in the
/// state file): the fields of BlueZ's `LEAdvertisement1`, or a beacon preset.
///
/// ```
/// {"localName": "gattway-demo", "serviceUUIDs": ["5a1e0001-…"], "connectable": true}
/// {"iBeacon": {"uuid": "e2c56db5-dffb-48d2-b060-d0f5a71096e0", "major": 1, "minor": 2, "measuredPower": -59}}
/// {"eddystone": {"url": "https://example.com/", "txPower": -20}}
/// ```
package struct AdvertisementRequest: StrictDecodable, Encodable, Sendable, Equatable {
    package var localName: String?
    package var serviceUUIDs: [String]?
    /// By company id (decimal, or 0x and hex), the bytes after it in hex.
    package var manufacturerData: [String: String]?
    /// By service UUID, the data in hex.
    package var serviceData: [String: String]?
    package var includeTxPower: Bool?
    package var connectable: Bool?
    /// The advertising interval, in milliseconds (BlueZ's MinInterval / MaxInterval).
    package var minInterval: Int?
    package var maxInterval: Int?
    package var appearance: Int?
    package var adapter: String?
    package var iBeacon: IBeaconPreset?
    package var eddystone: EddystonePreset?
    package enum CodingKeys: String, CodingKey, CaseIterable {
        case localName, serviceUUIDs, manufacturerData, serviceData, includeTxPower, connectable, minInterval, maxInterval, appearance,
             adapter, iBeacon, eddystone
    }
    package static var nested: [CodingKeys: any StrictDecodable.Type] { [.iBeacon: IBeaconPreset.self, .eddystone: EddystonePreset.self] }

    package struct IBeaconPreset: StrictDecodable, Encodable, Sendable, Equatable {
        package var uuid: String
        package var major: Int?
        package var minor: Int?
        /// RSSI at 1 m, dBm.
        package var measuredPower: Int?
        package enum CodingKeys: String, CodingKey, CaseIterable { case uuid, major, minor, measuredPower }
    }

    /// Eddystone-UID (`namespace` and `instance`) or Eddystone-URL (`url`).
    package struct EddystonePreset: StrictDecodable, Encodable, Sendable, Equatable {
        package var namespace: String?
        package var instance: String?
        package var url: String?
        /// TX power at 0 m, dBm.
        package var txPower: Int?
        package enum CodingKeys: String, CodingKey, CaseIterable { case namespace, instance, url, txPower }
    }

    static let apple: UInt16 = 0x004C
    static let eddystoneUUID = BluetoothUUID(uint16: 0xFEAA)

    package func definition() throws(BLEError) -> AdvertisementDefinition {
        // A beacon is not connectable unless the request says so.
        var d = AdvertisementDefinition(localName: localName, includeTxPower: includeTxPower ?? false,
                                        connectable: connectable ?? (iBeacon == nil && eddystone == nil), adapter: adapter)
        if let name = localName, name.isEmpty || name.utf8.count > 29 {
            throw BLEError(.invalidParameters, "localName: 1 to 29 bytes (an advertisement carries 31)")
        }
        d.serviceUUIDs = try (serviceUUIDs ?? []).enumerated().map { (i, t) throws(BLEError) in try Parse.uuid(t, field: "serviceUUIDs[\(i)]") }
        for (key, hex) in manufacturerData ?? [:] {
            guard let company = Self.company(key) else {
                throw BLEError(.invalidParameters, "manufacturerData: \"\(key)\" is not a company id (0 to 65535, decimal or 0x and hex)")
            }
            d.manufacturerData[company] = try Parse.hex(hex, field: "manufacturerData.\(key)")
        }
        for (key, hex) in serviceData ?? [:] {
            d.serviceData[try Parse.uuid(key, field: "serviceData")] = try Parse.hex(hex, field: "serviceData.\(key)")
        }
        if minInterval != nil || maxInterval != nil {
            // BlueZ's bounds: 20 ms to 10.24 s.
            let low = minInterval ?? maxInterval!, high = maxInterval ?? minInterval!
            guard (20...10_240).contains(low), (20...10_240).contains(high), low <= high else {
                throw BLEError(.invalidParameters, "minInterval and maxInterval: milliseconds from 20 to 10240, minInterval not above maxInterval")
            }
            d.intervalMs = UInt32(low)...UInt32(high)
        }
        if let appearance {
            guard let a = UInt16(exactly: appearance) else { throw BLEError(.invalidParameters, "appearance: 0 to 65535") }
            d.appearance = a
        }
        switch (iBeacon, eddystone) {
        case (let beacon?, nil): try beacon.apply(to: &d)
        case (nil, let eddystone?): try eddystone.apply(to: &d)
        case (nil, nil): break
        case (_?, _?): throw BLEError(.invalidParameters, "iBeacon and eddystone: one preset per advertisement")
        }
        return d
    }

    static func company(_ text: String) -> UInt16? {
        text.hasPrefix("0x") || text.hasPrefix("0X") ? UInt16(text.dropFirst(2), radix: 16) : UInt16(text)
    }
}

extension AdvertisementRequest.IBeaconPreset {
    func apply(to d: inout AdvertisementDefinition) throws(BLEError) {
        let proximity = try Parse.uuid(uuid, field: "iBeacon.uuid")
        guard let major = UInt16(exactly: major ?? 0), let minor = UInt16(exactly: minor ?? 0) else {
            throw BLEError(.invalidParameters, "iBeacon.major and iBeacon.minor: 0 to 65535")
        }
        guard let power = Int8(exactly: measuredPower ?? -59) else { throw BLEError(.invalidParameters, "iBeacon.measuredPower: dBm, -128 to 127") }
        guard d.manufacturerData[AdvertisementRequest.apple] == nil else {
            throw BLEError(.invalidParameters, "manufacturerData: Apple's (76) is the iBeacon's")
        }
        d.manufacturerData[AdvertisementRequest.apple] = BeaconFrames.iBeacon(uuid: proximity, major: major, minor: minor, measuredPower: power)
    }
}

extension AdvertisementRequest.EddystonePreset {
    func apply(to d: inout AdvertisementDefinition) throws(BLEError) {
        guard let power = Int8(exactly: txPower ?? -20) else { throw BLEError(.invalidParameters, "eddystone.txPower: dBm, -128 to 127") }
        let frame: [UInt8]
        switch (url, namespace, instance) {
        case (let url?, nil, nil):
            guard let f = BeaconFrames.eddystoneURL(url, txPower: power) else {
                throw BLEError(.invalidParameters, "eddystone.url: \"\(url)\" needs http:// or https://, printable ASCII, and at most 17 bytes"
                               + " once encoded (.com/, .org/ and the like count one)")
            }
            frame = f
        case (nil, let ns?, let inst?):
            let namespace = try Parse.hex(ns, field: "eddystone.namespace") ?? []
            let instance = try Parse.hex(inst, field: "eddystone.instance") ?? []
            guard let f = BeaconFrames.eddystoneUID(namespace: namespace, instance: instance, txPower: power) else {
                throw BLEError(.invalidParameters, "eddystone: namespace is 10 bytes (20 hex digits), instance 6 (12)")
            }
            frame = f
        default:
            throw BLEError(.invalidParameters, "eddystone: either url, or namespace and instance")
        }
        let uuid = AdvertisementRequest.eddystoneUUID
        if !d.serviceUUIDs.contains(uuid) { d.serviceUUIDs.append(uuid) }
        d.serviceData[uuid] = frame
    }
}
