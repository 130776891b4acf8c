import BLE
import FoundationEssentials

extension SimulatorConfiguration {
    /// One local controller (a USB dongle, a built-in chip): `/org/bluez/<id>`.
    public struct Adapter: Codable, Sendable, Equatable {
        /// The kernel's name for it, hci0, hci1, …: its object path's last element.
        public var id: String
        public var address: BluetoothAddress
        /// Adapter1.Name (the host's name; two dongles on one host have the same).
        public var name: String
        public var powered: Bool
        /// How many LE links the controller holds at once; the next Connect is refused
        /// (`le-connection-concurrent-connection-limit`). Common controllers hold 5 to 10.
        public var maxConnections: Int
        /// BlueZ's TemporaryTimeout: a discovered device nobody connected to or paired with is
        /// removed this long after it appeared (0 = never).
        public var temporaryTimeoutSec: Int
        /// How long Disconnect takes. Real bluetoothd waits 2 s (DISCONNECT_TIMER) before it drops
        /// the link; the default is shorter to keep tests fast.
        public var disconnectDelayMs: Int
        /// How long a Connect to a device that does not answer hangs before it fails (the
        /// kernel's LE connection timeout).
        public var connectTimeoutMs: Int
        /// How long pairing waits for the user (the agent's answer) before it gives up: the
        /// Security Manager's timeout (30 s in Linux's smp.c), which drops the link; it comes
        /// before bluetoothd's own 60 s for an agent request.
        public var pairingTimeoutMs: Int
        /// How long the central waits for an ATT response before it gives the link up (ATT's
        /// transaction timeout, 30 s; a UART peripheral holding a write's response can reach it).
        public var attTimeoutMs: Int
        /// Properties bluetoothd exports only with `--experimental` (Device1.AdvertisingFlags).
        public var experimental: Bool
        /// How many advertisements it sends at once (LEAdvertisingManager1's SupportedInstances
        /// with none registered); 5 is the kernel's number for controllers that rotate legacy
        /// advertisements (HCI_MAX_ADV_INSTANCES), as the lab's btvirt does.
        public var advertisingInstances: Int

        public init(id: String = "hci0", address: BluetoothAddress = Adapter.defaultAddress(0), name: String = "gattway-sim",
                    powered: Bool = true, maxConnections: Int = 7, temporaryTimeoutSec: Int = 30, disconnectDelayMs: Int = 100,
                    connectTimeoutMs: Int = 20_000, pairingTimeoutMs: Int = 30_000, attTimeoutMs: Int = 30_000,
                    experimental: Bool = false, advertisingInstances: Int = 5) {
            self.id = id
            self.address = address
            self.name = name
            self.powered = powered
            self.maxConnections = maxConnections
            self.temporaryTimeoutSec = temporaryTimeoutSec
            self.disconnectDelayMs = disconnectDelayMs
            self.connectTimeoutMs = connectTimeoutMs
            self.pairingTimeoutMs = pairingTimeoutMs
            self.attTimeoutMs = attTimeoutMs
            self.experimental = experimental
            self.advertisingInstances = advertisingInstances
        }

        /// The defaults of the adapter at `index` in the list: hci<index>, 00:1A:7D:DA:71:13 counted up.
        public static func numbered(_ index: Int) -> Adapter {
            Adapter(id: "hci\(index)", address: defaultAddress(index))
        }

        public static func defaultAddress(_ index: Int) -> BluetoothAddress {
            BluetoothAddress(bytes: [0x00, 0x1A, 0x7D, 0xDA, 0x71, UInt8(truncatingIfNeeded: 0x13 + index)])!
        }

        enum CodingKeys: String, CodingKey, CaseIterable {
            case id, address, name, powered, maxConnections, temporaryTimeoutSec, disconnectDelayMs, connectTimeoutMs
            case pairingTimeoutMs, attTimeoutMs, experimental, advertisingInstances
        }

        public init(from decoder: any Decoder) throws {
            try decoder.rejectUnknownKeys(CodingKeys.self)
            let c = try decoder.container(keyedBy: CodingKeys.self)
            // In "adapters" the position gives the defaults; "adapter" is hci0.
            let d = Adapter.numbered(decoder.codingPath.last?.intValue ?? 0)
            id = try c.decode(.id, default: d.id)
            guard id.hasPrefix("hci"), let n = Int(id.dropFirst(3)), n >= 0, "hci\(n)" == id else {
                throw DecodingError.dataCorruptedError(forKey: .id, in: c, debugDescription: "\"\(id)\" is not an adapter name like hci0")
            }
            address = try c.decode(.address, default: d.address)
            name = try c.decode(.name, default: d.name)
            powered = try c.decode(.powered, default: d.powered)
            maxConnections = try c.decodeInt(.maxConnections, default: d.maxConnections, in: 1...64)!
            temporaryTimeoutSec = try c.decodeInt(.temporaryTimeoutSec, default: d.temporaryTimeoutSec, in: 0...86_400)!
            disconnectDelayMs = try c.decodeInt(.disconnectDelayMs, default: d.disconnectDelayMs, in: 0...60_000)!
            connectTimeoutMs = try c.decodeInt(.connectTimeoutMs, default: d.connectTimeoutMs, in: 1...600_000)!
            pairingTimeoutMs = try c.decodeInt(.pairingTimeoutMs, default: d.pairingTimeoutMs, in: 1...600_000)!
            attTimeoutMs = try c.decodeInt(.attTimeoutMs, default: d.attTimeoutMs, in: 1...600_000)!
            experimental = try c.decode(.experimental, default: d.experimental)
            advertisingInstances = try c.decodeInt(.advertisingInstances, default: d.advertisingInstances, in: 0...255)!
        }
    }

    /// The same devices heard by `count` adapters: the configured ones first, then copies of
    /// the first as hci<n> with its own address (`gattway-sim --adapters N`).
    public func withAdapters(_ count: Int) -> SimulatorConfiguration {
        var copy = self
        copy.adapters = (0..<max(count, 1)).map { i in
            if i < adapters.count { return adapters[i] }
            var adapter = adapters[0]
            adapter.id = "hci\(i)"
            adapter.address = Adapter.defaultAddress(i)
            return adapter
        }
        return copy
    }

    /// Adapter names unique, addresses unique and no device's, every adapter a device's RSSI
    /// names configured.
    func validateAdapters() throws(ConfigurationError) {
        guard !adapters.isEmpty else { throw ConfigurationError("adapters: give at least one") }
        for (i, adapter) in adapters.enumerated() {
            if adapters[..<i].contains(where: { $0.id == adapter.id }) {
                throw ConfigurationError("adapters[\(i)].id: \(adapter.id) appears twice")
            }
            if adapters[..<i].contains(where: { $0.address == adapter.address }) {
                throw ConfigurationError("adapters[\(i)].address: \(adapter.address) appears twice")
            }
        }
        let ids = adapters.map(\.id)
        for (i, device) in devices.enumerated() {
            if adapters.contains(where: { $0.address == device.address }) {
                throw ConfigurationError("devices[\(i)].address: \(device.address) is an adapter's own address")
            }
            for id in (device.rssiByAdapter ?? [:]).keys.sorted() where !ids.contains(id) {
                throw ConfigurationError("devices[\(i)].rssi: no adapter \(id) (adapters: \(ids.joined(separator: ", ")))")
            }
        }
    }
}
