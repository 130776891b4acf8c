import BLE
import FoundationEssentials
import Glibc

/// What the simulator pretends to be: its adapters (hci0, and more with "adapters") and the
/// peripherals around them.
///
/// JSON (every key but `address` and `uuid` optional; unknown keys are refused; "adapter" is
/// short for a list of one, "adapters"):
/// ```
/// { "adapters": [ { "id": "hci0", "address": "00:1A:7D:DA:71:13", "name": "gattway-sim", "powered": true,
///                "maxConnections": 7, "temporaryTimeoutSec": 30, "disconnectDelayMs": 100, "connectTimeoutMs": 20000,
///                "pairingTimeoutMs": 30000, "attTimeoutMs": 30000, "experimental": false }, { "id": "hci1" } ],
///   "devices": [ {
///     "address": "F0:00:00:00:00:01", "addressType": "public", "name": "Sim Heart Rate", "nameInScanResponse": false,
///     "rssi": -55 (or per adapter, { "hci0": -55, "hci1": -80 }: unnamed adapters do not hear it), "rssiJitter": 3, "txPower": 4, "connectable": true, "advertisingIntervalMs": 1000,
///     "advertisingFlags": "06", "uuids": ["180D"], "manufacturerData": { "0xFFFF": "485200" },
///     "advertisingCounter": true, "serviceData": { "FEAA": "10..." },
///     "sensor": { see `Sensor` },
///     "mtu": 247, "connectDelayMs": 30, "responseDelayMs": 0,
///     "pairing": { see `Pairing` }, "uart": { see `UART` },
///     "services": [ { "uuid": "180D", "primary": true, "handle": 10, "characteristics": [ {
///         "uuid": "2A37", "flags": ["notify"], "value": "0648", "text": "…(UTF-8 instead of value)",
///         "generator": "heartRate", "notifyIntervalMs": 1000, "echo": false,
///         "accept": ["01"], "rejectCode": "0x80",
///         "descriptors": [ { "uuid": "2901", "text": "Heart rate", "flags": ["read"] } ] } ] } ],
///     "faults": { see `Faults` } } ] }
/// ```
/// A file replaces the built-in set (`builtIn`) entirely.
public struct SimulatorConfiguration: Codable, Sendable, Equatable {
    /// The local controllers, in the order bluetoothd lists them; never empty.
    public var adapters: [Adapter]
    public var devices: [Device]

    /// The first adapter (all that a one-adapter configuration has).
    public var adapter: Adapter {
        get { adapters[0] }
        set { adapters[0] = newValue }
    }

    public init(adapter: Adapter = Adapter(), devices: [Device]) {
        self.init(adapters: [adapter], devices: devices)
    }

    public init(adapters: [Adapter], devices: [Device]) {
        self.adapters = adapters
        self.devices = devices
    }

    enum CodingKeys: String, CodingKey, CaseIterable { case adapter, adapters, devices }

    public init(from decoder: any Decoder) throws {
        try decoder.rejectUnknownKeys(CodingKeys.self)
        let c = try decoder.container(keyedBy: CodingKeys.self)
        if let list = try c.decodeIfPresent([Adapter].self, forKey: .adapters) {
            guard !c.contains(.adapter) else {
                throw DecodingError.dataCorruptedError(forKey: .adapter, in: c, debugDescription: "give \"adapter\" or \"adapters\", not both")
            }
            guard !list.isEmpty else {
                throw DecodingError.dataCorruptedError(forKey: .adapters, in: c, debugDescription: "give at least one adapter")
            }
            adapters = list
        } else {
            adapters = [try c.decode(.adapter, default: Adapter())]
        }
        devices = try c.decode(.devices, default: [])
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        if adapters.count == 1 { try c.encode(adapter, forKey: .adapter) } else { try c.encode(adapters, forKey: .adapters) }
        try c.encode(devices, forKey: .devices)
    }

    /// Reads and checks a JSON configuration file.
    public static func load(path: String) throws -> SimulatorConfiguration {
        guard let file = fopen(path, "rb") else {
            throw ConfigurationError("cannot read \(path): \(String(cString: strerror(errno)))")
        }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let n = fread(&buffer, 1, buffer.count, file)
            bytes += buffer[..<n]
            if n < buffer.count { break }
        }
        guard ferror(file) == 0 else { throw ConfigurationError("cannot read \(path): \(String(cString: strerror(errno)))") }
        do {
            return try decode(Data(bytes))
        } catch {
            throw ConfigurationError("\(path): \(error.message)")
        }
    }

    /// Decodes and checks a JSON document.
    public static func decode(_ data: Data) throws(ConfigurationError) -> SimulatorConfiguration {
        let configuration: SimulatorConfiguration = try decodeJSON(data)
        try configuration.validate()
        return configuration
    }

    /// Checks what single keys cannot: unique adapters and addresses, handles that fit in 16 bits,
    /// and sensor payloads that would not silently replace configured advertisement data.
    public func validate() throws(ConfigurationError) {
        try validateAdapters()
        var seen: Set<BluetoothAddress> = []
        for (i, device) in devices.enumerated() {
            guard seen.insert(device.address).inserted else {
                throw ConfigurationError("devices[\(i)].address: \(device.address) appears twice")
            }
            switch device.sensor?.format.slot {
            case .serviceData(let uuid) where device.serviceData[uuid] != nil:
                throw ConfigurationError("devices[\(i)].serviceData: \(uuid) is the sensor's; its payload would replace this one")
            case .manufacturerData(let company) where device.manufacturerData[company] != nil:
                throw ConfigurationError("devices[\(i)].manufacturerData: 0x\(hex16(company)) is the sensor's; its payload would replace this one")
            default:
                break
            }
            try Self.validate(device.services, at: "devices[\(i)].services")
            try device.uart?.validate(against: device.services.flatMap(\.characteristics), at: "devices[\(i)].uart.")
        }
    }

    /// Service handles in order, none overlapping the previous service, all within 16 bits;
    /// `place` names the list in messages ("devices[0].services").
    static func validate(_ services: [Service], at place: String) throws(ConfigurationError) {
        var next = AttributeTable.firstHandle
        for (j, service) in services.enumerated() {
            if let handle = service.handle {
                guard j == 0 || handle >= next else {
                    throw ConfigurationError("\(place)[\(j)].handle: \(handle) overlaps the previous service (next free handle is \(next))")
                }
                next = handle
            }
            next += 1 + service.characteristics.reduce(0) { $0 + AttributeTable.handleCount(of: $1) }
            guard next - 1 <= 0xFFFF else {
                throw ConfigurationError("\(place)[\(j)]: attribute handles run past 0xFFFF")
            }
        }
    }

    /// Parses and checks the services JSON given to `SetServices` (a device's "services").
    public static func parseServices(_ json: String) throws(ConfigurationError) -> [Service] {
        let services: [Service] = try decodeJSON(Data(json.utf8))
        try validate(services, at: "services")
        return services
    }
}

extension SimulatorConfiguration {
    /// One peripheral: what it advertises, its GATT table and its faults.
    public struct Device: Codable, Sendable, Equatable {
        public var address: BluetoothAddress
        /// "public" or "random".
        public var addressType: String
        /// The advertised local name; nil advertises none (BlueZ then shows the address as Alias).
        public var name: String?
        /// The name goes in the scan response, which only an active scan's scan request gets:
        /// a passive scan (the kernel's advertisement monitor) does not hear it.
        public var nameInScanResponse: Bool
        /// The RSSI at every adapter, unless `rssiByAdapter` is given.
        public var rssi: Int
        /// The RSSI at each adapter that hears the device, by adapter name ("hci1"); an adapter
        /// not listed is out of its range. JSON: "rssi" as an object.
        public var rssiByAdapter: [String: Int]?
        /// Each advertisement's RSSI is `rssi` ± up to this many dB.
        public var rssiJitter: Int
        public var txPower: Int?
        public var connectable: Bool
        public var advertisingIntervalMs: Int
        /// The AD flags byte(s) (0x06: LE General Discoverable, BR/EDR not supported).
        public var advertisingFlags: HexBytes
        public var uuids: [BluetoothUUID]
        /// Company id → data.
        public var manufacturerData: [UInt16: HexBytes]
        public var serviceData: [BluetoothUUID: HexBytes]
        /// Replaces the last byte of every manufacturer data entry with a counter that goes up by
        /// one per advertisement, so that scanners see the data change.
        public var advertisingCounter: Bool
        /// A random address that changes this often, as a phone's or a tracker's private address
        /// does: bluetoothd then hears a new device, and forgets the old address once its
        /// TemporaryTimeout ends. nil: the address is fixed.
        public var addressRotationMs: Int?
        /// Sensor readings in the advertisement, measured anew every interval.
        public var sensor: Sensor?
        /// The negotiated ATT MTU while connected.
        public var mtu: Int
        /// How long a successful Connect takes.
        public var connectDelayMs: Int
        /// How it pairs (default: Just Works).
        public var pairing: Pairing
        /// A serial port behind two of its characteristics (a BLE-UART module).
        public var uart: UART?
        public var services: [Service]
        public var faults: Faults

        public init(address: BluetoothAddress, addressType: String = "public", name: String? = nil, rssi: Int = -60,
                    rssiByAdapter: [String: Int]? = nil, rssiJitter: Int = 3, txPower: Int? = nil, connectable: Bool = true, advertisingIntervalMs: Int = 1000,
                    advertisingFlags: HexBytes = [0x06], uuids: [BluetoothUUID] = [],
                    manufacturerData: [UInt16: HexBytes] = [:], serviceData: [BluetoothUUID: HexBytes] = [:],
                    advertisingCounter: Bool = false, addressRotationMs: Int? = nil, sensor: Sensor? = nil, mtu: Int = 247,
                    connectDelayMs: Int = 30, pairing: Pairing = Pairing(), uart: UART? = nil, services: [Service] = [],
                    faults: Faults = Faults(), nameInScanResponse: Bool = false) {
            self.address = address
            self.addressType = addressType
            self.name = name
            self.nameInScanResponse = nameInScanResponse
            self.rssi = rssi
            self.rssiByAdapter = rssiByAdapter
            self.rssiJitter = rssiJitter
            self.txPower = txPower
            self.connectable = connectable
            self.advertisingIntervalMs = advertisingIntervalMs
            self.advertisingFlags = advertisingFlags
            self.uuids = uuids
            self.manufacturerData = manufacturerData
            self.serviceData = serviceData
            self.advertisingCounter = advertisingCounter
            self.addressRotationMs = addressRotationMs
            self.sensor = sensor
            self.mtu = mtu
            self.connectDelayMs = connectDelayMs
            self.pairing = pairing
            self.uart = uart
            self.services = services
            self.faults = faults
        }

        enum CodingKeys: String, CodingKey, CaseIterable {
            case address, addressType, name, nameInScanResponse, rssi, rssiJitter, txPower, connectable, advertisingIntervalMs, advertisingFlags
            case uuids, manufacturerData, serviceData, advertisingCounter, addressRotationMs, sensor, mtu, connectDelayMs, pairing
            case uart, services, faults
        }

        public init(from decoder: any Decoder) throws {
            try decoder.rejectUnknownKeys(CodingKeys.self)
            let c = try decoder.container(keyedBy: CodingKeys.self)
            address = try c.decode(BluetoothAddress.self, forKey: .address)
            let d = Device(address: address)
            addressType = try c.decode(.addressType, default: d.addressType)
            guard ["public", "random"].contains(addressType) else {
                throw DecodingError.dataCorruptedError(forKey: .addressType, in: c, debugDescription: "expected \"public\" or \"random\"")
            }
            name = try c.decodeIfPresent(String.self, forKey: .name)
            nameInScanResponse = try c.decode(.nameInScanResponse, default: false)
            if let byAdapter = try? c.decode([String: Int].self, forKey: .rssi) {
                guard byAdapter.values.allSatisfy({ (-127...20).contains($0) }) else {
                    throw DecodingError.dataCorruptedError(forKey: .rssi, in: c, debugDescription: "an RSSI is -127...20")
                }
                rssiByAdapter = byAdapter
                rssi = byAdapter.values.max() ?? d.rssi
            } else {
                rssi = try c.decodeInt(.rssi, default: d.rssi, in: -127...20)!
                rssiByAdapter = nil
            }
            rssiJitter = try c.decodeInt(.rssiJitter, default: d.rssiJitter, in: 0...30)!
            txPower = try c.decodeInt(.txPower, default: nil, in: -127...20)
            connectable = try c.decode(.connectable, default: d.connectable)
            advertisingIntervalMs = try c.decodeInt(.advertisingIntervalMs, default: d.advertisingIntervalMs, in: 20...60_000)!
            advertisingFlags = try c.decode(.advertisingFlags, default: d.advertisingFlags)
            uuids = try c.decode(.uuids, default: [])
            advertisingCounter = try c.decode(.advertisingCounter, default: false)
            addressRotationMs = try c.decodeInt(.addressRotationMs, default: nil, in: 100...86_400_000)
            sensor = try c.decodeIfPresent(Sensor.self, forKey: .sensor)
            mtu = try c.decodeInt(.mtu, default: d.mtu, in: 23...517)!
            connectDelayMs = try c.decodeInt(.connectDelayMs, default: d.connectDelayMs, in: 0...600_000)!
            pairing = try c.decode(.pairing, default: Pairing())
            uart = try c.decodeIfPresent(UART.self, forKey: .uart)
            services = try c.decode(.services, default: [])
            faults = try c.decode(.faults, default: Faults())

            manufacturerData = [:]
            for (key, value) in try c.decode(.manufacturerData, default: [String: HexBytes]()) {
                guard let id = parseFlexibleInt(key), let company = UInt16(exactly: id) else {
                    throw DecodingError.dataCorruptedError(forKey: .manufacturerData, in: c,
                        debugDescription: "company id \"\(key)\" is not a 16-bit number (decimal or 0x hex)")
                }
                manufacturerData[company] = value
            }
            serviceData = [:]
            for (key, value) in try c.decode(.serviceData, default: [String: HexBytes]()) {
                guard let uuid = BluetoothUUID(key) else {
                    throw DecodingError.dataCorruptedError(forKey: .serviceData, in: c, debugDescription: "\"\(key)\" is not a UUID")
                }
                serviceData[uuid] = value
            }
        }

        /// The RSSI at adapter `id`; nil: that adapter does not hear the device.
        public func rssi(at id: String) -> Int? {
            guard let rssiByAdapter else { return rssi }
            return rssiByAdapter[id]
        }

        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(address, forKey: .address)
            try c.encode(addressType, forKey: .addressType)
            try c.encodeIfPresent(name, forKey: .name)
            if nameInScanResponse { try c.encode(nameInScanResponse, forKey: .nameInScanResponse) }
            if let rssiByAdapter { try c.encode(rssiByAdapter, forKey: .rssi) } else { try c.encode(rssi, forKey: .rssi) }
            try c.encode(rssiJitter, forKey: .rssiJitter)
            try c.encodeIfPresent(txPower, forKey: .txPower)
            try c.encode(connectable, forKey: .connectable)
            try c.encode(advertisingIntervalMs, forKey: .advertisingIntervalMs)
            try c.encode(advertisingFlags, forKey: .advertisingFlags)
            try c.encode(uuids, forKey: .uuids)
            try c.encode(Dictionary(uniqueKeysWithValues: manufacturerData.map { ("0x" + hex16($0.key), $0.value) }),
                         forKey: .manufacturerData)
            try c.encode(Dictionary(uniqueKeysWithValues: serviceData.map { ($0.key.uuidString, $0.value) }), forKey: .serviceData)
            try c.encode(advertisingCounter, forKey: .advertisingCounter)
            try c.encodeIfPresent(addressRotationMs, forKey: .addressRotationMs)
            try c.encodeIfPresent(sensor, forKey: .sensor)
            try c.encode(mtu, forKey: .mtu)
            try c.encode(connectDelayMs, forKey: .connectDelayMs)
            try c.encode(pairing, forKey: .pairing)
            try c.encodeIfPresent(uart, forKey: .uart)
            try c.encode(services, forKey: .services)
            try c.encode(faults, forKey: .faults)
        }
    }
}

func hex16(_ n: UInt16) -> String {
    let digits = Array("0123456789ABCDEF")
    return String((0..<4).reversed().map { digits[Int(n >> (UInt16($0) * 4)) & 0xF] })
}
