import Access
import BLE
import ESPHomeAPI
import MQTT
import SerialBridge

/// gattway's configuration, from the command line, a configuration file and the environment;
/// each option is described once, in `Options.table`.
package struct Options: Sendable {
    package var host = "127.0.0.1"
    package var port: UInt16 = 8080
    /// The adapters to use by name; nil: all.
    package var adapters: [String]?
    /// Where advertisements are read (`--advertisements`).
    package var advertisements = AdvertisementChoice.auto
    /// `--management-socket`: the management events from this socket instead of the kernel's.
    package var managementSocket: String?

    /// `--advertisements`.
    package enum AdvertisementChoice: Sendable, Equatable {
        case auto
        case dbus
    }
    /// nil: use the system bus. Some(nil): simulate the built-in devices. Some(path): simulate a file.
    package var simulate: String??
    package var maxBodyBytes = 64 * 1024
    package var keepAliveSeconds = 15.0
    /// Connections served at once (streams, WebSockets and requests); more get 503.
    package var maxConnections = 12_000
    /// Event streams (SSE and WebSocket) open at once; more get 503.
    package var maxStreams = 10_000
    /// Whether a connect that does not say keeps the device connected.
    package var autoReconnect = false
    /// Whether an adapter on which connects keep failing as a stale link makes them may be reset.
    package var adapterReset = true
    /// A scanned device not seen for this long is listed `stale`.
    package var staleAfterSeconds = 60.0
    /// The watch (and the MQTT bridge) forget a device not heard for this long.
    package var forgetAfterSeconds = 3600.0
    /// A device connected for `connect=auto` is disconnected after this long without requests.
    package var idleDisconnectSeconds = 60.0
    /// How gattway pairs (`--pairing-io`, `--pairing-default-agent`, `--pairing-timeout`).
    package var pairingIO = PairingIO.noInputNoOutput
    package var pairingDefaultAgent = false
    package var pairingTimeoutSeconds = 25.0
    /// nil: the default (see `stateDirectory`); Some(nil): keep nothing; Some(path): there.
    package var stateDir: String??
    /// Access: the tokens (`--tokens FILE`, `GATTWAY_TOKENS`), listed browser origins, and
    /// whether serving beyond loopback without credentials was asked for (`--no-auth`).
    package var tokens = TokenSources()
    package var allowedOrigins: [String] = []
    package var noAuth = false
    /// Requests per second per client address (0: no limit); each may burst to twice as many.
    package var rateLimit = 100.0
    package var maxClientConnections = 1_024
    package var maxClientStreams = 512
    package var maxWebSocketMessage = 64 * 1024
    /// Operator GATT blocklist files (`--blocklist`, repeatable), beside the default list unless
    /// `--no-default-blocklist`.
    package var blocklistFiles: [String] = []
    package var defaultBlocklist = true
    /// Bind keys of devices that encrypt their sensor advertisements (`--sensor-keys`).
    package var sensorKeysFile: String?
    /// Passkeys and PIN codes of devices that pair with them (`--pairing-keys`).
    package var pairingKeysFile: String?
    /// `--watch` / `--no-watch`; nil: watch when simulating (the demo shows its sensors at once).
    package var watch: Bool?
    /// The MQTT bridge (`--mqtt`): the broker, TLS files, this gateway's id (nil: the host
    /// name) and the topic prefix.
    package var mqtt: BrokerURL?
    package var mqttCA: String?
    package var mqttCertificate: String?
    package var mqttKey: String?
    package var gatewayID: String?
    package var mqttPrefix = "gattway"
    /// Characteristics made Home Assistant sensors (`--mqtt-expose FILE`, a JSON array).
    package var mqttExposeFile: String?
    /// Home Assistant's `expire_after` for the sensors' entities (`--mqtt-expire-after`, 0: none).
    package var mqttExpireAfter = 600
    /// The ESPHome native API (`--esphome-api [HOST:]PORT`; no port: not served) and its Noise key
    /// (`--esphome-key`; nil: plaintext).
    package var esphomeHost = "127.0.0.1"
    package var esphomePort: UInt16?
    package var esphomeKey: EncryptionKey?
    /// Connection slots the ESPHome API's clients share (`--esphome-connections`).
    package var esphomeConnections = 3
    package var esphomeConnectionsGiven = false
    /// Devices' UARTs as TCP ports (`--serial HOST:PORT=ADDRESS[,OPTION]...`, repeatable).
    package var serialPorts: [SerialPort.Configuration] = []
    /// PEM files; both or neither. With them gattway serves HTTPS only.
    package var tlsCertificate: String?
    package var tlsKey: String?

    package init() {}

    package var watchAtStart: Bool { watch ?? (simulate != nil) }
    /// `forgetAfterSeconds`, for the watch and the bridge alike.
    package var forgetAfter: Duration { .milliseconds(Int(forgetAfterSeconds * 1000)) }

    /// Where state is kept: the option, else (not when simulating) systemd's STATE_DIRECTORY,
    /// /var/lib/gattway when it can be used, or ~/.local/state/gattway.
    package func stateDirectory(environment: (String) -> String?, usable: (String) -> Bool) -> String? {
        if let chosen = stateDir { return chosen }
        guard simulate == nil else { return nil }
        if let systemd = environment("STATE_DIRECTORY"), !systemd.isEmpty {
            return String(systemd.split(separator: ":").first ?? Substring(systemd))
        }
        if usable("/var/lib/gattway") { return "/var/lib/gattway" }
        if let home = environment("HOME"), !home.isEmpty { return home + "/.local/state/gattway" }
        return nil
    }

    /// Where gattway listens and what guards each, for the exposure policy.
    package var listeners: [Exposure.Listener] {
        [Exposure.Listener(host: host, port: port, door: .http(tokens: tokens.areGiven))]
            + serialPorts.map { Exposure.Listener(host: $0.host, port: $0.port, door: .serial(device: $0.device.description)) }
            + (esphomePort.map { [Exposure.Listener(host: esphomeHost, port: $0, door: .esphome(key: esphomeKey != nil))] } ?? [])
    }
}

/// A host as it stands in a URL: an IPv6 address in brackets.
package func urlHost(_ host: String) -> String { host.contains(":") ? "[\(host)]" : host }
