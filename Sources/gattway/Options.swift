import BLE
import ESPHomeAPI
import GatewayCore
import HTTPAPI
import MQTTBridge
import Glibc
import MQTT
import SerialBridge
import Sockets

/// Command-line and environment configuration.
struct Options {
    var host = "127.0.0.1"
    var port: UInt16 = 8080
    var adapter: String?
    /// nil: use the system bus. Some(nil): simulate the built-in devices. Some(path): simulate a file.
    var simulate: String??
    var maxBodyBytes = 64 * 1024
    var keepAliveSeconds = 15.0
    /// Connections served at once (streams, WebSockets and requests); more get 503.
    var maxConnections = 12_000
    /// Event streams (SSE and WebSocket) open at once; more get 503.
    var maxStreams = 10_000
    /// Whether a connect that does not say keeps the device connected.
    var autoReconnect = false
    /// A scanned device not seen for this long is listed `stale`.
    var staleAfterSeconds = 60.0
    /// The watch (and the MQTT bridge) forget a device not heard for this long.
    var forgetAfterSeconds = 3600.0
    /// `forgetAfterSeconds`, for the watch and the bridge alike.
    var forgetAfter: Duration { .milliseconds(Int(forgetAfterSeconds * 1000)) }
    /// A device connected for `connect=auto` is disconnected after this long without requests.
    var idleDisconnectSeconds = 60.0
    /// How gattway pairs (`--pairing-io`, `--pairing-default-agent`, `--pairing-timeout`).
    var pairingIO = PairingIO.noInputNoOutput
    var pairingDefaultAgent = false
    var pairingTimeoutSeconds = 25.0
    /// nil: the default (see `stateDirectory`); Some(nil): keep nothing; Some(path): there.
    var stateDir: String??
    /// Access: a token file (`--tokens`), tokens from `GATTWAY_TOKENS`, listed browser origins,
    /// and whether serving beyond loopback without tokens was asked for (`--no-auth`).
    var tokensFile: String?
    var tokensList: String?
    var allowedOrigins: [String] = []
    var noAuth = false
    /// Requests per second per client address (0: no limit); each may burst to twice as many.
    var rateLimit = 100.0
    var maxClientConnections = 1_024
    var maxClientStreams = 512
    var maxWebSocketMessage = 64 * 1024
    /// Operator GATT blocklist files (`--blocklist`, repeatable), beside the default list unless
    /// `--no-default-blocklist`.
    var blocklistFiles: [String] = []
    var defaultBlocklist = true
    /// Bind keys of devices that encrypt their sensor advertisements (`--sensor-keys`).
    var sensorKeysFile: String?
    /// Passkeys and PIN codes of devices that pair with them (`--pairing-keys`).
    var pairingKeysFile: String?
    /// `--watch` / `--no-watch`; nil: watch when simulating (the demo shows its sensors at once).
    var watch: Bool?
    var watchAtStart: Bool { watch ?? (simulate != nil) }
    /// The MQTT bridge (`--mqtt`): the broker, TLS files, this gateway's id (nil: the host
    /// name) and the topic prefix.
    var mqtt: BrokerURL?
    var mqttCA: String?
    var mqttCertificate: String?
    var mqttKey: String?
    var gatewayID: String?
    var mqttPrefix = "gattway"
    /// Characteristics made Home Assistant sensors (`--mqtt-expose FILE`, a JSON array).
    var mqttExposeFile: String?
    /// Home Assistant's `expire_after` for the sensors' entities (`--mqtt-expire-after`, 0: none).
    var mqttExpireAfter = 600
    /// The ESPHome native API (`--esphome-api [HOST:]PORT`; no port: not served) and its Noise key
    /// (`--esphome-key`; nil: plaintext).
    var esphomeHost = "127.0.0.1"
    var esphomePort: UInt16?
    var esphomeKey: EncryptionKey?
    /// Devices' UARTs as TCP ports (`--serial HOST:PORT=ADDRESS[,OPTION]...`, repeatable).
    var serialPorts: [SerialPort.Configuration] = []
    /// Connection slots the ESPHome API's clients share (`--esphome-connections`).
    var esphomeConnections = 3
    var esphomeConnectionsGiven = false

    /// Whether `host` is a loopback address, reachable from this machine only.
    static func isLoopback(_ host: String) -> Bool { TCPListener.isLoopback(host) }
    /// PEM files; both or neither. With them gattway serves HTTPS only.
    var tlsCertificate: String?
    var tlsKey: String?

    /// Where state is kept: the option, else (not when simulating) systemd's STATE_DIRECTORY,
    /// /var/lib/gattway when it can be used, or ~/.local/state/gattway.
    func stateDirectory(environment: (String) -> String?, usable: (String) -> Bool) -> String? {
        if let chosen = stateDir { return chosen }
        guard simulate == nil else { return nil }
        if let systemd = environment("STATE_DIRECTORY"), !systemd.isEmpty {
            return String(systemd.split(separator: ":").first ?? Substring(systemd))
        }
        if usable("/var/lib/gattway") { return "/var/lib/gattway" }
        if let home = environment("HOME"), !home.isEmpty { return home + "/.local/state/gattway" }
        return nil
    }

    static let usage = """
    gattway \(gattwayVersion): Bluetooth Low Energy devices over HTTP, on BlueZ.

    Usage: gattway [--config FILE] [--listen HOST:PORT] [--adapter hciN] [--simulate [FILE]]
                   [--tokens FILE] [--tls-cert FILE --tls-key FILE]
                   [--mqtt URL [--gateway-id ID] [--mqtt-prefix P] [--mqtt-expose FILE]
                    [--mqtt-expire-after SECONDS]]
                   [--esphome-api [HOST:]PORT [--esphome-key BASE64] [--esphome-connections N]]
                   [--serial HOST:PORT=ADDRESS[,OPTION]...]...

    Options:
      --listen HOST:PORT   where to serve HTTP (default 127.0.0.1:8080; 0.0.0.0:8080 for all
                           interfaces; port 0 picks a free port, printed at start)
      --adapter hciN       the Bluetooth adapter to use (default: the first BlueZ lists);
                           other adapters are left alone
      --simulate [FILE]    no radio needed: start a private D-Bus daemon with gattway's BlueZ
                           simulator on it and use that. FILE is a simulator configuration
                           (JSON, see `gattway-sim --help`); without it, the built-in devices:
                           a heart-rate monitor, an HM-10 style serial module, a device that
                           needs pairing, an iBeacon, an Eddystone beacon and six sensors
                           (BTHome, BTHome encrypted, ATC1441, PVVX, MiBeacon, RuuviTag).
                           Implies --watch unless --no-watch
      --max-body BYTES     largest request body accepted (default 65536)
      --keepalive SECONDS  how often an idle event stream (SSE) gets a comment line, so that
                           proxies keep it open (default 15)
      --max-connections N  connections served at once (default 12000); past it a request gets
                           503 with Retry-After. `ulimit -n` is raised to fit, or the limit
                           lowered to what the system allows (logged)
      --max-streams N      event streams (SSE and WebSocket) open at once (default 10000), at
                           most --max-connections; past it a new stream gets 503 with
                           Retry-After while other requests are still served
      --auto-reconnect     keep every connected device connected unless its connect says
                           "autoReconnect": false: after an unexpected disconnection, try again
                           after 1-5 s, then with backoff up to 60 s (default: only devices
                           connected with "autoReconnect": true)
      --watch              watch for sensors from the start, for as long as gattway runs:
                           a discovery of its own beside any scan, resumed after anything
                           that ends it, whose devices GET /v1/sensors lists (PUT /v1/watch
                           sets filters; a watch set there is restored at start instead)
      --no-watch           no watch at start (the default, but with --simulate)
      --stale-after SECONDS
                           a device the scan (or the watch) has not seen for this long is listed
                           with "stale": true (and stays listed, as last seen, when BlueZ
                           forgets it) (default 60)
      --forget-after SECONDS
                           the watch forgets a device it has not heard for this long, and the
                           MQTT bridge clears its retained devices/ and sensors/ topics
                           (default 3600)
      --idle-disconnect SECONDS
                           a device gattway connected by itself for a ?connect=auto read is
                           disconnected after this long without requests on it (and nothing
                           holding its notifications); never one a client connected (default 60)
      --pairing-io CAPABILITY
                           the IO capabilities gattway's pairing agent declares (BlueZ's names:
                           DisplayOnly, DisplayYesNo, KeyboardOnly, NoInputNoOutput,
                           KeyboardDisplay). Default NoInputNoOutput: Just Works only, as a box
                           without screen or keyboard honestly can. KeyboardDisplay lets clients
                           enter passkeys and confirm numbers (`pairing` events, POST
                           /v1/devices/{id}/pairing): what devices that need MITM protection need
      --pairing-default-agent
                           also be BlueZ's default agent (then gattway answers pairings that other
                           programs or the devices start, too)
      --pairing-timeout SECONDS
                           how long a pairing question waits for a client's answer before it is
                           declined (default 25; the pairing itself gives up after 30)
      --pairing-keys FILE  passkeys and PIN codes of devices, a device a line:
                           "C4:7C:8D:6A:11:02 passkey 123456" or "00:1A:7D:DA:71:13 pin 0000";
                           # comments. A read, write or subscription the device refuses until
                           it is paired then pairs with its key and is tried once more; its
                           pairing questions are answered with it. Read again on SIGHUP
      --state-dir DIR      where what clients asked for is kept across restarts: devices kept
                           connected, notification holds, a running scan (state.json, written
                           atomically; restored at start; GET /v1/restoration). Default:
                           $STATE_DIRECTORY, /var/lib/gattway if usable, else
                           ~/.local/state/gattway; with --simulate nothing unless given.
                           "none": keep nothing
      --tokens FILE        bearer tokens, one a line: TOKEN, or ro:TOKEN for one that may only
                           GET and open event streams (16-512 characters of A-Z a-z 0-9 - . _ ~;
                           `#` comments). With tokens every route but GET /v1/state needs
                           Authorization: Bearer TOKEN (?access_token= for event streams).
                           SIGHUP reads the file again
      --no-auth            serve a non-loopback --listen address without tokens, or a
                           non-loopback --esphome-api without --esphome-key (anyone who can
                           reach it may use every device); gattway refuses to otherwise
      --allow-origin ORIGIN
                           a web origin (scheme://host[:port], or *) whose pages may use the
                           API (CORS) and open WebSockets; repeatable. Default: only pages the
                           gateway's own origin serves. Requests without Origin (curl, scripts)
                           are not affected
      --rate-limit N       requests per second per client address, bursts of 2N (default 100;
                           0: no limit); past it 429 with Retry-After
      --max-client-connections N
                           connections from one client address (default 1024); past it 429
      --max-client-streams N
                           event streams from one client address (default 512); past it 429
      --max-ws-message BYTES
                           the largest WebSocket message a client may send (default 65536);
                           a larger one closes the socket with 1009
      --blocklist FILE     GATT attributes clients may not use, in Web Bluetooth's blocklist
                           format: a UUID a line, alone (hidden from discovery, never read or
                           written) or followed by exclude-reads (reads and notifications) or
                           exclude-writes; # comments. Added to the default list (HID,
                           firmware-update services, FIDO, ...; GET /v1/blocklist lists what is
                           in force); may be given more than once. Refused: 403 uuidNotAllowed
      --no-default-blocklist
                           leave out the default list: only the --blocklist files count
      --sensor-keys FILE   bind keys of sensors that encrypt their advertisements (BTHome v2,
                           Xiaomi MiBeacon v4/v5): a device a line, its address and its 16-byte
                           AES key in hex, "54:48:E6:8F:80:A5 231d39c1d7cc1ab1aee224cd096db932";
                           # comments. Without its key an encrypted reading shows "missing-key"
                           and no values (GET /v1/sensors). Read again on SIGHUP (a file that
                           cannot be used keeps the keys in force)
      --tls-cert FILE      serve HTTPS only (WebSocket: wss), with this PEM certificate
                           (chain, leaf first) and the PEM private key of --tls-key (not
                           encrypted); both or neither. Read once at start
      --tls-key FILE
      --mqtt URL           also publish to an MQTT broker and take commands from it:
                           mqtt://[user:password@]host[:port] (default port 1883), or
                           mqtts://... (TLS, default port 8883). Availability (retained, with
                           a last will), sensors, devices, events, Home Assistant discovery;
                           commands on PREFIX/ID/command. MQTT 5, or 3.1.1 when the broker
                           has no 5. Reconnects with backoff (1-30 s); while away at most
                           1024 messages wait, the oldest dropped first. See docs/mqtt.md
      --mqtt-ca FILE       mqtts: the CA certificates (PEM) that sign the broker's (default:
                           the system's)
      --mqtt-cert FILE     mqtts: a client certificate (PEM), with the unencrypted key of
      --mqtt-key FILE      --mqtt-key; both or neither
      --gateway-id ID      this gateway's name in topics and in Home Assistant: 1-64 letters,
                           digits, -, _ or . (default: the host name)
      --mqtt-prefix P      the topic levels the gateway publishes under (default gattway):
                           P/ID/availability, P/ID/sensors/ADDRESS, ...
      --mqtt-expose FILE   GATT characteristics to publish as Home Assistant sensors, a JSON
                           array: [{"device": "F0:00:00:00:00:01", "service": "180d",
                           "characteristic": "2a37", "name": "Heart rate", "decode": "uint8",
                           "offset": 1, "unit": "bpm", "stateClass": "measurement",
                           "notify": true}, ...]. decode: uint8, sint8, uint16le/be,
                           sint16le/be, (u|s)int24le/be, (u|s)int32le/be, float32le/be,
                           float64le/be, medfloat16, medfloat32 (IEEE 11073 SFLOAT, FLOAT),
                           utf8; "scale": 0.01 multiplies; "mask": 6, "shift": 1 take bits
                           of an unsigned integer (before the scale); deviceClass as Home
                           Assistant names it. "notify": true keeps the device connected and
                           holds its notifications; "poll": SECONDS reads it that often,
                           connecting as connect=auto does. Values on
                           P/ID/values/ADDRESS/SERVICE/CHARACTERISTIC (retained). A bad file
                           stops gattway (exit 2). See docs/mqtt.md
      --mqtt-expire-after SECONDS
                           Home Assistant shows a sensor unavailable after this long without
                           a message (default 600, 0: never); a sensor still heard has its
                           unchanged reading published again after half of it. Polled
                           characteristics: at least 3 polls; notified ones: their own
                           "expireAfter" only
      --esphome-api [HOST:]PORT
                           also serve the ESPHome native API, as a Bluetooth proxy for Home
                           Assistant (its usual port is 6053; default host 127.0.0.1; port 0
                           picks a free port, printed at start): advertisements (the watch's,
                           which it starts if none runs), connections, GATT, notifications,
                           pairing, through the same core as the REST API. See
                           docs/esphome-proxy.md
      --esphome-key BASE64 the API's encryption key, as ESPHome's `api: encryption: key:`:
                           32 random bytes in base64 (head -c 32 /dev/urandom | base64).
                           Clients must then speak Noise with the same key; without it the API
                           is plaintext, and gattway refuses to serve it beyond loopback
                           unless --no-auth
      --esphome-connections N
                           devices the API's clients may have connected at once (default 3,
                           as an ESPHome proxy; 1 to 16): the free slots Home Assistant sees
      --serial HOST:PORT=ADDRESS[,OPTION]...
                           serve the device's UART (HM-10, Nordic UART, Microchip transparent
                           UART, or a custom pair) as a raw TCP port, as ser2net serves a
                           serial line: socat, nc and pyserial's socket://HOST:PORT open it.
                           The device is connected while a client is attached. OPTIONs:
                           hm10 | nordic | microchip (default: the first it has), or
                           service=UUID,rx=UUID,tx=UUID; hold (stay attached through a link
                           loss, connecting again) or close (the default: the client is
                           disconnected); mode=auto|response|command, rate=BYTES_PER_SECOND
                           (pacing of writes without response). Repeatable; more at runtime
                           with POST /v1/serial-ports. Beyond loopback, anyone who reaches
                           the port uses the device: gattway refuses that unless --no-auth
      --config FILE        options from a file, as if given before the command line's (so
                           the command line's win; repeatable ones add up): a line is an option
                           without its dashes and its value, "listen 0.0.0.0:8080",
                           "auto-reconnect"; # starts a comment line. Read once at start; the
                           Debian package's is /etc/gattway/gattway.conf
      --help               this text
      --version            the version

    Environment:
      DBUS_SYSTEM_BUS_ADDRESS   the system bus to find BlueZ on (default unix:path=/run/dbus/system_bus_socket)
      GATTWAY_LISTEN, GATTWAY_ADAPTER, GATTWAY_SIMULATE (a file, or "builtin"),
      GATTWAY_AUTO_RECONNECT (1 or true), GATTWAY_STATE_DIR, GATTWAY_NO_AUTH (1 or true),
      GATTWAY_ALLOW_ORIGINS (comma-separated), GATTWAY_TLS_CERT, GATTWAY_TLS_KEY,
      GATTWAY_MQTT, GATTWAY_GATEWAY_ID, GATTWAY_MQTT_EXPOSE, GATTWAY_ESPHOME_API,
      GATTWAY_ESPHOME_KEY, GATTWAY_ESPHOME_CONNECTIONS
                                defaults for the options above; flags (and --config) win
      GATTWAY_TOKENS            tokens (TOKEN or ro:TOKEN, separated by commas or spaces), in
                                addition to --tokens FILE
      JOURNAL_STREAM            set by systemd when stderr is the journal's stream: each line
                                then starts with its priority (<6>, <4>, <3>) instead of the time
      NOTIFY_SOCKET, WATCHDOG_USEC
                                set by systemd (Type=notify, WatchdogSec=): gattway says READY=1
                                once it serves, and WATCHDOG=1 every third of WATCHDOG_USEC while
                                its HTTP server and its D-Bus thread answer

    API: /v1/state, /v1/adapters, /v1/scan, /v1/devices[/{id}[/connect|/disconnect|/gatt|
    /services|/characteristics/{char}[/value|/notifications]]], /v1/sensors[/{id}], live events on /v1/events (SSE)
    and /v1/ws (WebSocket). Errors are JSON with CoreBluetooth codes. See docs/, openapi.yaml.
    """

    enum ParseResult {
        case run(Options)
        case exit(code: Int32, message: String)
    }

    static func parse(_ arguments: [String], environment: (String) -> String?,
                      readFile: (String) -> String?) -> ParseResult {
        var options = Options()
        do {
            if let listen = environment("GATTWAY_LISTEN") { try options.setListen(listen) }
            if let adapter = environment("GATTWAY_ADAPTER"), !adapter.isEmpty { options.adapter = adapter }
            if let simulate = environment("GATTWAY_SIMULATE"), !simulate.isEmpty {
                options.simulate = .some(simulate == "builtin" ? nil : simulate)
            }
            if let auto = environment("GATTWAY_AUTO_RECONNECT") { options.autoReconnect = ["1", "true", "yes"].contains(auto.lowercased()) }
            if let dir = environment("GATTWAY_STATE_DIR"), !dir.isEmpty { options.stateDir = .some(dir == "none" ? nil : dir) }
            if let tokens = environment("GATTWAY_TOKENS"), !tokens.isEmpty { options.tokensList = tokens }
            if let noAuth = environment("GATTWAY_NO_AUTH") { options.noAuth = ["1", "true", "yes"].contains(noAuth.lowercased()) }
            if let origins = environment("GATTWAY_ALLOW_ORIGINS") {
                options.allowedOrigins = origins.split(separator: ",").map { String($0.filter { !$0.isWhitespace }) }.filter { !$0.isEmpty }
            }
            if let file = environment("GATTWAY_TLS_CERT"), !file.isEmpty { options.tlsCertificate = file }
            if let file = environment("GATTWAY_TLS_KEY"), !file.isEmpty { options.tlsKey = file }
            if let url = environment("GATTWAY_MQTT"), !url.isEmpty { try options.setMQTT(url) }
            if let id = environment("GATTWAY_GATEWAY_ID"), !id.isEmpty { options.gatewayID = id }
            if let file = environment("GATTWAY_MQTT_EXPOSE"), !file.isEmpty { options.mqttExposeFile = file }
            if let api = environment("GATTWAY_ESPHOME_API"), !api.isEmpty { try options.setESPHomeAPI(api) }
            if let key = environment("GATTWAY_ESPHOME_KEY"), !key.isEmpty { try options.setESPHomeKey(key, source: "GATTWAY_ESPHOME_KEY") }
            if let slots = environment("GATTWAY_ESPHOME_CONNECTIONS"), !slots.isEmpty {
                try options.setESPHomeConnections(slots, source: "GATTWAY_ESPHOME_CONNECTIONS")
            }
            let (commandLine, configFile) = try Options.takeConfigFile(arguments)
            if let configFile { try options.apply(configFile: configFile, readFile: readFile) }
            var rest = commandLine[...]
            while let argument = rest.popFirst() {
                if let exit = try options.apply(argument, &rest) { return exit }
            }
            guard (options.tlsCertificate == nil) == (options.tlsKey == nil) else {
                throw UsageError("--tls-cert and --tls-key go together: give both or neither")
            }
            guard (options.mqttCertificate == nil) == (options.mqttKey == nil) else {
                throw UsageError("--mqtt-cert and --mqtt-key go together: give both or neither")
            }
            if options.mqtt?.tls != true && (options.mqttCA != nil || options.mqttCertificate != nil) {
                throw UsageError("--mqtt-ca, --mqtt-cert and --mqtt-key are for an mqtts:// broker")
            }
            if options.esphomeKey != nil && options.esphomePort == nil {
                throw UsageError("--esphome-key is the key of the ESPHome API: give --esphome-api [HOST:]PORT too")
            }
            if options.esphomeConnectionsGiven && options.esphomePort == nil {
                throw UsageError("--esphome-connections are the ESPHome API's: give --esphome-api [HOST:]PORT too")
            }
            if options.mqttExposeFile != nil && options.mqtt == nil {
                throw UsageError("--mqtt-expose publishes to the broker of --mqtt: give --mqtt URL too")
            }
            do {
                _ = try BridgeTopics(prefix: options.mqttPrefix, gatewayID: options.gatewayID ?? "gattway")
            } catch {
                throw UsageError(error.description)
            }
        } catch let error as UsageError {
            return .exit(code: 2, message: "gattway: \(error.message)\nTry gattway --help.")
        } catch {
            return .exit(code: 2, message: "gattway: \(error)")
        }
        options.maxStreams = min(options.maxStreams, options.maxConnections)
        if !options.noAuth && !isLoopback(options.host) && options.tokensFile == nil && options.tokensList == nil {
            return .exit(code: 2, message: """
                gattway: --listen \(options.host) without tokens would let anyone who reaches it use every device.
                Give --tokens FILE (or GATTWAY_TOKENS), or --no-auth to do it anyway.
                """)
        }
        if !options.noAuth, let open = options.serialPorts.first(where: { !isLoopback($0.host) }) {
            return .exit(code: 2, message: """
                gattway: --serial \(urlHost(open.host)):\(open.port) would let anyone who reaches it use \(open.device) (a raw TCP port has no tokens).
                Serve it on 127.0.0.1 (and tunnel it), or give --no-auth to do it anyway.
                """)
        }
        if !options.noAuth && options.esphomePort != nil && !isLoopback(options.esphomeHost) && options.esphomeKey == nil {
            return .exit(code: 2, message: """
                gattway: --esphome-api \(urlHost(options.esphomeHost)):\(options.esphomePort!) without a key would let anyone who reaches it use every device.
                Give --esphome-key BASE64 (or GATTWAY_ESPHOME_KEY), or --no-auth to do it anyway.
                """)
        }
        return .run(options)
    }

    /// Takes `--config FILE` out of the command line: the file and the arguments left.
    private static func takeConfigFile(_ arguments: [String]) throws -> (arguments: [String], file: String?) {
        var left: [String] = []
        var file: String?
        var rest = arguments[...]
        while let argument = rest.popFirst() {
            guard argument == "--config" else { left.append(argument); continue }
            guard file == nil else { throw UsageError("--config may be given once") }
            guard let path = rest.popFirst(), !path.isEmpty else { throw UsageError("--config needs a file") }
            file = path
        }
        return (left, file)
    }

    /// The options of a configuration file, as if given before the command line's (so a flag
    /// given both ways takes the command line's value; repeatable ones add up): a line is an
    /// option without its dashes, a space, and its value, if it takes one ("listen
    /// 0.0.0.0:8080", "auto-reconnect"); lines that start with # and empty lines are skipped.
    /// The value is the rest of the line (spaces inside kept). A mistake stops gattway with
    /// FILE:LINE and what is wrong.
    private mutating func apply(configFile file: String, readFile: (String) -> String?) throws {
        guard let text = readFile(file) else {
            throw UsageError("--config: cannot read \(file) (\(String(cString: strerror(errno))))")
        }
        for (number, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = rawLine.drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" || $0 == "\r" }.reversed()
            guard let first = line.first, first != "#" else { continue }
            let name = String(line.prefix { $0 != " " && $0 != "\t" })
            let value = String(line.dropFirst(name.count).drop { $0 == " " || $0 == "\t" })
            let place = "\(file):\(number + 1)"
            guard !name.hasPrefix("-") else {
                throw UsageError("\(place): write the option without its dashes: \(name.drop { $0 == "-" })")
            }
            guard !["help", "version", "config"].contains(name) else {
                throw UsageError("\(place): \(name) has no place in a configuration file")
            }
            var values = (value.isEmpty ? [] : [value])[...]
            do {
                _ = try apply("--" + name, &values)
            } catch let error as UsageError {
                throw UsageError("\(place): \(error.message)")
            }
            guard values.isEmpty else { throw UsageError("\(place): \(name) takes no value") }
        }
    }

    /// One option of the command line (or of a configuration file), with its value from `rest`
    /// where it takes one; the exit for --help and --version.
    private mutating func apply(_ argument: String, _ rest: inout ArraySlice<String>) throws -> ParseResult? {
        func value() throws -> String {
            guard let v = rest.popFirst() else { throw UsageError("\(argument) needs a value") }
            return v
        }
        switch argument {
        case "--help", "-h": return .exit(code: 0, message: Options.usage)
        case "--version": return .exit(code: 0, message: "gattway \(gattwayVersion)")
        case "--listen": try setListen(try value())
        case "--adapter":
            let name = try value()
            guard name.hasPrefix("hci"), name.dropFirst(3).allSatisfy(\.isNumber), name.count > 3 else {
                throw UsageError("--adapter takes an adapter name such as hci0, not \"\(name)\"")
            }
            adapter = name
        case "--simulate":
            if let next = rest.first, !next.hasPrefix("--") {
                rest.removeFirst()
                simulate = .some(next)
            } else {
                simulate = .some(nil)
            }
        case "--keepalive":
            guard let n = Double(try value()), n > 0, n <= 3600 else { throw UsageError("--keepalive takes seconds, more than 0") }
            keepAliveSeconds = n
        case "--max-connections":
            guard let n = Int(try value()), n > 0, n <= 1_000_000 else {
                throw UsageError("--max-connections takes a number from 1 to 1000000")
            }
            maxConnections = n
        case "--max-streams":
            guard let n = Int(try value()), n >= 0, n <= 1_000_000 else {
                throw UsageError("--max-streams takes a number from 0 to 1000000")
            }
            maxStreams = n
        case "--auto-reconnect": autoReconnect = true
        case "--watch": watch = true
        case "--no-watch": watch = false
        case "--stale-after":
            guard let n = Double(try value()), n > 0, n <= 86_400 else { throw UsageError("--stale-after takes seconds, more than 0") }
            staleAfterSeconds = n
        case "--forget-after":
            guard let n = Double(try value()), n >= 1, n <= 604_800 else {
                throw UsageError("--forget-after takes seconds, from 1 to 604800")
            }
            forgetAfterSeconds = n
        case "--idle-disconnect":
            guard let n = Double(try value()), n > 0, n <= 86_400 else {
                throw UsageError("--idle-disconnect takes seconds, more than 0 and at most 86400")
            }
            idleDisconnectSeconds = n
        case "--pairing-io":
            let name = try value()
            guard let io = PairingIO(rawValue: name) else {
                throw UsageError("--pairing-io takes one of \(PairingIO.names), not \"\(name)\"")
            }
            pairingIO = io
        case "--pairing-default-agent": pairingDefaultAgent = true
        case "--pairing-timeout":
            guard let n = Double(try value()), n >= 1, n <= 120 else {
                throw UsageError("--pairing-timeout takes seconds, from 1 to 120")
            }
            pairingTimeoutSeconds = n
        case "--state-dir":
            let dir = try value()
            guard !dir.isEmpty else { throw UsageError("--state-dir takes a directory, or none") }
            stateDir = .some(dir == "none" ? nil : dir)
        case "--tokens":
            let file = try value()
            guard !file.isEmpty else { throw UsageError("--tokens takes a file") }
            tokensFile = file
        case "--no-auth": noAuth = true
        case "--allow-origin": allowedOrigins.append(try value())
        case "--rate-limit":
            guard let n = Double(try value()), n >= 0, n <= 1_000_000 else {
                throw UsageError("--rate-limit takes requests per second, 0 for no limit")
            }
            rateLimit = n
        case "--max-client-connections":
            maxClientConnections = try Options.count(try value(), "--max-client-connections", 1...1_000_000)
        case "--max-client-streams":
            maxClientStreams = try Options.count(try value(), "--max-client-streams", 0...1_000_000)
        case "--max-ws-message":
            maxWebSocketMessage = try Options.count(try value(), "--max-ws-message", 125...(64 << 20))
        case "--blocklist": blocklistFiles.append(try value())
        case "--no-default-blocklist": defaultBlocklist = false
        case "--sensor-keys": sensorKeysFile = try value()
        case "--pairing-keys": pairingKeysFile = try value()
        case "--tls-cert": tlsCertificate = try value()
        case "--tls-key": tlsKey = try value()
        case "--mqtt": try setMQTT(try value())
        case "--mqtt-ca": mqttCA = try value()
        case "--mqtt-cert": mqttCertificate = try value()
        case "--mqtt-key": mqttKey = try value()
        case "--gateway-id": gatewayID = try value()
        case "--mqtt-prefix": mqttPrefix = try value()
        case "--mqtt-expose": mqttExposeFile = try value()
        case "--esphome-api": try setESPHomeAPI(try value())
        case "--esphome-key": try setESPHomeKey(try value(), source: "--esphome-key")
        case "--serial":
            let text = try value()
            do throws(BLEError) {
                serialPorts.append(try SerialPort.Configuration(parsing: text))
            } catch {
                throw UsageError(error.message)
            }
        case "--esphome-connections": try setESPHomeConnections(try value(), source: "--esphome-connections")
        case "--mqtt-expire-after":
            guard let n = Int(try value()), (0...604_800).contains(n) else {
                throw UsageError("--mqtt-expire-after takes whole seconds, from 0 (never) to 604800")
            }
            mqttExpireAfter = n
        case "--max-body":
            guard let n = Int(try value()), n > 0 else { throw UsageError("--max-body takes a positive number of bytes") }
            maxBodyBytes = n
        default:
            throw UsageError("unknown argument \"\(argument)\"")
        }
        return nil
    }

    private static func count(_ text: String, _ flag: String, _ range: ClosedRange<Int>) throws -> Int {
        guard let n = Int(text), range.contains(n) else {
            throw UsageError("\(flag) takes a number from \(range.lowerBound) to \(range.upperBound)")
        }
        return n
    }

    private mutating func setMQTT(_ text: String) throws {
        do {
            mqtt = try BrokerURL(parsing: text)
        } catch {
            throw UsageError("--mqtt: \(error.description)")
        }
    }

    /// The bridge's topics: `--gateway-id`, else the host name made into an id.
    func bridgeTopics(hostName: String) throws -> BridgeTopics {
        try BridgeTopics(prefix: mqttPrefix, gatewayID: gatewayID ?? BridgeTopics.gatewayID(fromHostName: hostName))
    }

    private mutating func setListen(_ text: String) throws {
        guard let (host, port) = Self.hostAndPort(text) else {
            throw UsageError("--listen takes HOST:PORT, e.g. 127.0.0.1:8080, not \"\(text)\"")
        }
        guard let host, !host.isEmpty else { throw UsageError("--listen needs a host, e.g. 0.0.0.0:\(port)") }
        self.host = host
        self.port = port
    }

    private mutating func setESPHomeAPI(_ text: String) throws {
        guard let (host, port) = Self.hostAndPort(text), host?.isEmpty != true else {
            throw UsageError("--esphome-api takes [HOST:]PORT, e.g. 6053 or 0.0.0.0:6053, not \"\(text)\"")
        }
        if let host { esphomeHost = host }
        esphomePort = port
    }

    private mutating func setESPHomeConnections(_ text: String, source: String) throws {
        guard let n = Int(text), (1...16).contains(n) else {
            throw UsageError("\(source) takes a number of connection slots from 1 to 16, not \"\(text)\"")
        }
        esphomeConnections = n
        esphomeConnectionsGiven = true
    }

    private mutating func setESPHomeKey(_ text: String, source: String) throws {
        guard let key = EncryptionKey(base64: text) else {
            throw UsageError("\(source) takes 32 bytes in base64, as ESPHome's api: encryption: key: (head -c 32 /dev/urandom | base64)")
        }
        esphomeKey = key
    }

    /// "HOST:PORT" or, with `host` nil, "PORT"; an IPv6 host in brackets ("[::1]:6053").
    private static func hostAndPort(_ text: String) -> (host: String?, port: UInt16)? {
        guard let colon = text.lastIndex(of: ":") else { return UInt16(text).map { (nil, $0) } }
        guard let port = UInt16(text[text.index(after: colon)...]) else { return nil }
        var host = String(text[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return (host, port)
    }
}

struct UsageError: Error {
    let message: String
    init(_ message: String) { self.message = message }
}
