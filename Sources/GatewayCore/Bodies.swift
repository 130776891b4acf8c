import BLE
import FoundationEssentials
import Sensors

// JSON shapes every door shows its clients; names as in openapi.yaml's components.

package struct ManagerStateBody: Encodable {
    package var state: String
    package var code: Int
    package var adapter: String?
    package var reason: String?
    /// How many adapters in use are usable, when more than one is in use or none is usable.
    package var usableAdapters: Int?

    package init(_ status: ManagerStatus) {
        state = status.state.name
        code = status.state.rawValue
        adapter = status.adapter
        reason = status.reason
        usableAdapters = status.usableAdapters
    }
}

/// One Bluetooth controller, as `GET /v1/adapters` lists it.
package struct AdapterBody: Encodable {
    package var id: String
    package var address: String?
    package var name: String?
    package var alias: String?
    package var powered: Bool
    package var discovering: Bool
    package var selected: Bool
    /// LE links up on it, and the most it took when it refused another (unknown until then).
    package var connections: Int
    package var connectionLimit: Int?
    /// Where its advertisements come from: "kernel" (the management socket), "dbus", or "none"
    /// (not in use).
    package var advertisements: String

    package init(_ a: AdapterInfo) {
        id = a.id
        address = a.address?.description
        name = a.name
        alias = a.alias
        powered = a.powered
        discovering = a.discovering
        selected = a.selected
        connections = a.connections
        connectionLimit = a.connectionLimit
        advertisements = a.advertisements.rawValue
    }
}

/// CoreBluetooth's advertisement keys; byte values in hex, manufacturer data keyed by the
/// decimal company identifier (as Home Assistant and bleak key it).
package struct AdvertisementBody: Encodable {
    package var localName: String?
    package var serviceUUIDs: [String]
    package var manufacturerData: [String: String]
    package var serviceData: [String: String]
    package var txPowerLevel: Int?
    package var isConnectable: Bool?

    package init(_ a: AdvertisementData) {
        localName = a.localName
        serviceUUIDs = a.serviceUUIDs.map(\.uuidString)
        manufacturerData = Dictionary(uniqueKeysWithValues: a.manufacturerData.map { (String($0.key), ValueFormat.hex.encode($0.value)) })
        serviceData = Dictionary(uniqueKeysWithValues: a.serviceData.map { ($0.key.uuidString, ValueFormat.hex.encode($0.value)) })
        txPowerLevel = a.txPowerLevel
        isConnectable = a.isConnectable
    }
}

package struct DeviceBody: Encodable {
    package var id: String
    package var address: String
    package var addressType: String?
    package var name: String?
    package var rssi: Int?
    package var lastSeen: Date?
    package var state: String
    package var paired: Bool
    /// Paired with keys kept (BlueZ's `Bonded`), and allowed to connect without asking (`Trusted`).
    package var bonded: Bool
    package var trusted: Bool
    package var advertisement: AdvertisementBody
    /// While connected: the ATT MTU and `maximumWriteValueLength` for both write types.
    package var mtu: Int?
    package var maximumWriteValueLength: WriteLengths?
    /// While gattway keeps the device connected (`autoReconnect`).
    package var reconnect: ReconnectBody?
    /// Present (true) when the device has not been seen for `--stale-after` or BlueZ forgot it.
    package var stale: Bool?
    /// What its advertisement says, decoded, when a decoder knows its format (answers to requests only, not events).
    package var sensor: SensorReading?
    /// While connected, the adapter that holds its link; with several adapters in use, those that hear it.
    package var adapter: String?
    package var adapters: [AdapterSightingBody]?

    package init(_ p: PeripheralInfo, sensor: SensorReading? = nil) {
        self.sensor = sensor
        adapter = p.adapter
        adapters = p.adapters.isEmpty ? nil : p.adapters.map(AdapterSightingBody.init)
        stale = p.stale ? true : nil
        reconnect = p.reconnect.map(ReconnectBody.init)
        if p.state == .connected {
            mtu = p.mtu
            maximumWriteValueLength = WriteLengths(mtu: p.mtu)
        }
        id = p.id.description
        address = p.id.description
        addressType = p.addressType
        name = p.name
        rssi = p.rssi
        lastSeen = p.lastSeen
        state = p.state.name
        paired = p.paired
        bonded = p.bonded
        trusted = p.trusted
        advertisement = AdvertisementBody(p.advertisement)
    }
}

/// One adapter that hears a device (bonds are per adapter).
package struct AdapterSightingBody: Encodable {
    package var adapter: String
    package var rssi: Int?
    package var lastSeen: Date?
    package var bonded: Bool

    package init(_ s: AdapterSighting) {
        adapter = s.adapter
        rssi = s.rssi
        lastSeen = s.lastSeen
        bonded = s.bonded
    }
}

/// A kept device's reconnection: attempts since its link was last up, when the next starts,
/// and why the link went down or the last attempt failed.
package struct ReconnectBody: Encodable {
    package var autoReconnect = true
    package var attempt: Int
    package var nextAttempt: Date?
    /// The attempt is due and waits to hear the device advertise.
    package var listening: Bool?
    package var lastError: ErrorBody.Content?

    package init(_ status: ReconnectStatus) {
        attempt = status.attempt
        nextAttempt = status.nextAttempt
        listening = status.listening ? true : nil
        lastError = status.lastError.map { ErrorBody($0).error }
    }
}

// MARK: - GATT

/// Handles print as "0x0027", the form the API accepts back.
package func handleText(_ handle: UInt16) -> String { AttributeSelector.format(handle) }

package struct ValueBody: Encodable {
    /// Where an answered value came from: `read` now by this request; `notification` the
    /// device sent it by itself (a notification or indication) `age` ago; `cache` an earlier
    /// read (any client's) answered it `age` ago.
    package enum Source: String, Encodable { case read, notification, cache }

    package var handle: String
    package var uuid: String
    package var value: String
    package var format: String
    package var length: Int
    package var source: Source
    /// Seconds since the value was read or notified, to the millisecond.
    package var age: Double

    package init(_ read: AttributeValue, format: ValueFormat, source: Source, age: Duration) {
        handle = handleText(read.handle)
        uuid = read.uuid.uuidString
        value = format.encode(read.value)
        self.format = format.rawValue
        length = read.value.count
        self.source = source
        let ms = age.components.seconds * 1000 + age.components.attoseconds / 1_000_000_000_000_000
        self.age = Double(max(ms, 0)) / 1000
    }
}

/// `maximumWriteValueLength(for:)` for both write types.
package struct WriteLengths: Encodable {
    package var withResponse: Int
    package var withoutResponse: Int

    package init(mtu: Int?) {
        withResponse = WriteType.withResponse.maximumWriteValueLength(mtu: mtu)
        withoutResponse = WriteType.withoutResponse.maximumWriteValueLength(mtu: mtu)
    }
}
