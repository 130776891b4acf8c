import ESPHomeAPI

/// A 48-bit address in the two spellings the API uses.
struct MACAddress: Equatable, Sendable {
    let bytes: [UInt8]

    /// "AA:BB:CC:DD:EE:FF": device info's spelling (ESPHome's get_mac_address_pretty).
    var pretty: String { bytes.map { hex($0).uppercased() }.joined(separator: ":") }
    /// "aabbccddeeff": the Noise server hello's spelling (what aioesphomeapi compares with the MAC it expects).
    var compact: String { bytes.map(hex).joined() }

    private func hex(_ byte: UInt8) -> String {
        let text = String(byte, radix: 16)
        return byte < 16 ? "0" + text : text
    }
}

/// Who the proxy says it is: its hello and its device info, and the facts clients check in them.
struct ProxyIdentity: Sendable {
    /// The node name (the gateway id, or the host's name).
    let name: String
    /// gattway's version.
    let version: String
    /// Whether the API is served with a key.
    let encrypted: Bool

    /// The API version answered to hello. aioesphomeapi (46.23.0, connection.py) takes any 1.x;
    /// up to 1.14 it reads the proxy's features from device info (model.py,
    /// bluetooth_proxy_feature_flags_compat; bleak-esphome 4.1.0's connect.py does the same),
    /// from 1.15 it asks DeviceCapabilitiesRequest, which gattway does not answer.
    static let apiVersion = (major: UInt32(1), minor: UInt32(10))

    /// Home Assistant's ESPHome integration raises a "Bluetooth proxy firmware outdated" repair
    /// for a proxy whose esphome_version is below its STABLE_BLE_VERSION (2025.11.0 in
    /// homeassistant/components/esphome/const.py), unless project_name names a project it does
    /// not know, which gattway's does; bleak-esphome only logs the version.
    static let esphomeVersion = "2025.11.0"

    /// What this proxy does (aioesphomeapi's BluetoothProxyFeature): scanning, connections with
    /// services cached remotely, pairing, cache clearing, raw advertisements, scanner state and
    /// mode. 127; not connection parameters (1 << 7).
    static let features: BluetoothProxyFeature = [
        .passiveScan, .activeConnections, .remoteCaching, .pairing, .cacheClearing, .rawAdvertisements, .stateAndMode,
    ]

    func hello() -> HelloResponse {
        HelloResponse(apiVersionMajor: Self.apiVersion.major, apiVersionMinor: Self.apiVersion.minor,
                      serverInfo: "gattway \(version)", name: name)
    }

    /// The DNS-SD service type ESPHome nodes announce, which Home Assistant browses for.
    static let serviceType = "_esphomelib._tcp"

    /// The TXT records of the `_esphomelib._tcp` announcement, as an ESPHome node has them:
    /// what Home Assistant's discovery reads (mac, which must be device info's; friendly_name;
    /// api_encryption, which makes it ask for the key) and aioesphomeapi-discover shows (version,
    /// platform, board). `network` is "wifi" or "ethernet"; no `api_encryption_supported`: the
    /// key is set at start, never over the API.
    func announcement(adapter: MACAddress?, network: String) -> [String] {
        var txt = ["friendly_name=gattway \(name)", "version=\(Self.esphomeVersion)", "mac=\(adapter?.compact ?? "")",
                   "platform=Linux", "board=gattway", "network=\(network)"]
        if encrypted { txt.append("api_encryption=Noise_NNpsk0_25519_ChaChaPoly_SHA256") }
        txt += ["project_name=gattway.gattway", "project_version=\(version)"]
        return txt
    }

    /// With the adapter's address as the device's MAC too: Home Assistant keys the proxy by its
    /// MAC, and the radio's is the one address that is this proxy's own (empty while gattway has no adapter).
    func deviceInfo(adapter: MACAddress?) -> DeviceInfoResponse {
        var info = DeviceInfoResponse()
        info.name = name
        info.friendlyName = "gattway \(name)"
        info.macAddress = adapter?.pretty ?? ""
        info.bluetoothMacAddress = adapter?.pretty ?? ""
        info.esphomeVersion = Self.esphomeVersion
        info.model = "gattway"
        info.manufacturer = "gattway"
        info.projectName = "gattway.gattway"
        info.projectVersion = version
        info.bluetoothProxyFeatureFlags = Self.features.rawValue
        // Supported means "has a key" here: gattway's key is set at start, never over the API.
        info.apiEncryptionSupported = encrypted
        return info
    }
}
