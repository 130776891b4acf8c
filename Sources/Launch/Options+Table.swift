import Access
import BLE

/// A heading of `--help` and the options under it.
package struct OptionSection: Sendable {
    package let title: String
    package let options: [Option]
}

extension Options {
    /// Every option, once: the command line, the configuration file, the environment and
    /// `--help` are made from this table. The sections are the help's.
    package static let table: [OptionSection] = [http, bluetooth, limits, mqttSection, esphomeSection, serialSection, starting]

    static let http = OptionSection(title: "HTTP, and who may use it", options: [
        .value("--listen", "HOST:PORT", environment: "GATTWAY_LISTEN", """
            where to serve HTTP (default 127.0.0.1:8080; 0.0.0.0:8080 for all interfaces; port 0 picks a \
            free port, printed at start)
            """) { options, text, source throws(UsageError) in
            guard let (host, port) = Parse.hostAndPort(text) else {
                throw UsageError("\(source) takes HOST:PORT, e.g. 127.0.0.1:8080, not \"\(text)\"")
            }
            guard let host, !host.isEmpty else { throw UsageError("\(source) needs a host, e.g. 0.0.0.0:\(port)") }
            options.host = host
            options.port = port
        },
        .value("--tokens", "FILE", """
            bearer tokens, one a line: TOKEN, or ro:TOKEN for one that may only GET and open event streams \
            (16-512 characters of A-Z a-z 0-9 - . _ ~; `#` comments). With tokens every route but GET \
            /v1/state needs Authorization: Bearer TOKEN (?access_token= for event streams). SIGHUP reads \
            the file again
            """) { options, text, source throws(UsageError) in options.tokens.file = try Parse.nonEmpty(text, source, "a file") },
        .value(nil, "TOKENS", environment: "GATTWAY_TOKENS", """
            tokens (TOKEN or ro:TOKEN, separated by commas or spaces), in addition to --tokens FILE
            """) { options, text, _ in options.tokens.list = text },
        .flag("--no-auth", environment: "GATTWAY_NO_AUTH", """
            serve a non-loopback --listen address without tokens, a non-loopback --esphome-api without \
            --esphome-key, or a --serial port beyond loopback (anyone who can reach it may use every \
            device); gattway refuses to otherwise
            """) { $0.noAuth = true },
        .value("--allow-origin", "ORIGIN", repeatable: true, environment: "GATTWAY_ALLOW_ORIGINS", """
            a web origin (scheme://host[:port], or *) whose pages may use the API (CORS) and open \
            WebSockets; repeatable. Default: only pages the gateway's own origin serves. Requests without \
            Origin (curl, scripts) are not affected
            """) { options, text, _ in options.allowedOrigins.append(text) },
        .value("--tls-cert", "FILE", environment: "GATTWAY_TLS_CERT", """
            serve HTTPS only (WebSocket: wss), with this PEM certificate (chain, leaf first) and the key \
            of --tls-key; both or neither. Read once at start
            """) { options, text, _ in options.tlsCertificate = text },
        .value("--tls-key", "FILE", environment: "GATTWAY_TLS_KEY", """
            the PEM private key (not encrypted) of --tls-cert's certificate
            """) { options, text, _ in options.tlsKey = text },
    ])

    static let bluetooth = OptionSection(title: "Bluetooth", options: [
        .value("--adapter", "LIST", environment: "GATTWAY_ADAPTER", """
            the Bluetooth adapters to use: names separated by commas (hci0,hci1), or all (the default: \
            every adapter BlueZ lists, also one plugged in later); others are left alone
            """) { options, text, source throws(UsageError) in
            if text == "all" {
                options.adapters = nil
                return
            }
            let names = text.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
            for name in names where !(name.hasPrefix("hci") && name.count > 3 && name.dropFirst(3).allSatisfy(\.isNumber)) {
                throw UsageError("\(source) takes adapter names such as hci0 (or hci0,hci1, or all), not \"\(name)\"")
            }
            options.adapters = names
        },
        .value("--advertisements", "auto|dbus", environment: "GATTWAY_ADVERTISEMENTS", """
            where advertisements are read: auto (the default) reads the kernel's Bluetooth management \
            socket when gattway may (root or CAP_NET_ADMIN, in the host's network namespace): each \
            advertisement's bytes as the controller reported them, at about half the cost; else, and \
            with dbus, BlueZ's D-Bus signals. GET /v1/adapters says which is used
            """) { options, text, source throws(UsageError) in
            switch text {
            case "auto": options.advertisements = .auto
            case "dbus": options.advertisements = .dbus
            default: throw UsageError("\(source) takes auto or dbus, not \"\(text)\"")
            }
        },
        .value("--management-socket", "PATH", environment: "GATTWAY_MANAGEMENT_SOCKET", """
            read the management events from this Unix socket (gattway-sim --management-socket: the \
            simulator's adapters' events) instead of the kernel's
            """) { options, text, _ in options.managementSocket = text },
        Option(["--simulate"], value: .optional("FILE", absent: "builtin"), environment: "GATTWAY_SIMULATE", """
            no radio needed: start a private D-Bus daemon with gattway's BlueZ simulator on it and use \
            that. FILE is a simulator configuration (JSON, see `gattway-sim --help`); without it, the \
            built-in devices: a heart-rate monitor, an HM-10 style serial module, a device that needs \
            pairing, an iBeacon, an Eddystone beacon and six sensors (BTHome, BTHome encrypted, ATC1441, \
            PVVX, MiBeacon, RuuviTag). Implies --watch unless --no-watch
            """, .set { options, file, _ in options.simulate = .some(file) }),
        .flag("--auto-reconnect", environment: "GATTWAY_AUTO_RECONNECT", """
            keep every connected device connected unless its connect says "autoReconnect": false: after \
            an unexpected disconnection, try again after 1-5 s, then with backoff up to 60 s (default: \
            only devices connected with "autoReconnect": true)
            """) { $0.autoReconnect = true },
        .flag("--no-adapter-reset", environment: "GATTWAY_NO_ADAPTER_RESET", """
            never power an adapter off and on to clear a stale link (by default, when two connects \
            in a row fail as a link the kernel still holds makes them fail, "Input/output error" or \
            "Operation already in progress", the adapter is reset, at most once in 5 minutes; every \
            link on it drops, bonds stay: see docs/running.md, Recovery)
            """) { $0.adapterReset = false },
        .flag("--watch", """
            watch for sensors from the start, for as long as gattway runs: a discovery of its own beside \
            any scan, resumed after anything that ends it, whose devices GET /v1/sensors lists (PUT \
            /v1/watch sets filters; a watch set there is restored at start instead)
            """) { $0.watch = true },
        .flag("--no-watch", "no watch at start (the default, but with --simulate)") { $0.watch = false },
        .value("--stale-after", "SECONDS", """
            a device the scan (or the watch) has not seen for this long is listed with "stale": true \
            (and stays listed, as last seen, when BlueZ forgets it) (default 60)
            """) { options, text, source throws(UsageError) in
            options.staleAfterSeconds = try Parse.number(text, source, { $0 > 0 && $0 <= 86_400 }, "takes seconds, more than 0")
        },
        .value("--forget-after", "SECONDS", """
            the watch forgets a device it has not heard for this long, and the MQTT bridge clears its \
            retained devices/ and sensors/ topics (default 3600)
            """) { options, text, source throws(UsageError) in
            options.forgetAfterSeconds = try Parse.number(text, source, (1...604_800.0).contains, "takes seconds, from 1 to 604800")
        },
        .value("--idle-disconnect", "SECONDS", """
            a device gattway connected by itself for a ?connect=auto read is disconnected after this long \
            without requests on it (and nothing holding its notifications); never one a client connected \
            (default 60)
            """) { options, text, source throws(UsageError) in
            options.idleDisconnectSeconds = try Parse.number(text, source, { $0 > 0 && $0 <= 86_400 },
                                                             "takes seconds, more than 0 and at most 86400")
        },
        .value("--pairing-io", "CAPABILITY", """
            the IO capabilities gattway's pairing agent declares (BlueZ's names: \(PairingIO.names)). \
            Default NoInputNoOutput: Just Works only, as a box without screen or keyboard honestly can. \
            KeyboardDisplay lets clients enter passkeys and confirm numbers (`pairing` events, POST \
            /v1/devices/{id}/pairing): what devices that need MITM protection need
            """) { options, name, source throws(UsageError) in
            guard let io = PairingIO(rawValue: name) else {
                throw UsageError("\(source) takes one of \(PairingIO.names), not \"\(name)\"")
            }
            options.pairingIO = io
        },
        .flag("--pairing-default-agent", """
            also be BlueZ's default agent (then gattway answers pairings that other programs or the \
            devices start, too)
            """) { $0.pairingDefaultAgent = true },
        .value("--pairing-timeout", "SECONDS", """
            how long a pairing question waits for a client's answer before it is declined (default 25; \
            the pairing itself gives up after 30)
            """) { options, text, source throws(UsageError) in
            options.pairingTimeoutSeconds = try Parse.number(text, source, (1...120.0).contains, "takes seconds, from 1 to 120")
        },
        .value("--pairing-keys", "FILE", """
            passkeys and PIN codes of devices, a device a line: "C4:7C:8D:6A:11:02 passkey 123456" or \
            "00:1A:7D:DA:71:13 pin 0000"; # comments. A read, write or subscription the device refuses \
            until it is paired then pairs with its key and is tried once more; its pairing questions are \
            answered with it. Read again on SIGHUP
            """) { options, text, _ in options.pairingKeysFile = text },
        .value("--blocklist", "FILE", repeatable: true, """
            GATT attributes clients may not use, in Web Bluetooth's blocklist format: a UUID a line, \
            alone (hidden from discovery, never read or written) or followed by exclude-reads (reads and \
            notifications) or exclude-writes; # comments. Added to the default list (HID, \
            firmware-update services, FIDO, ...; GET /v1/blocklist lists what is in force); may be given \
            more than once. Refused: 403 uuidNotAllowed
            """) { options, text, _ in options.blocklistFiles.append(text) },
        .flag("--no-default-blocklist", "leave out the default list: only the --blocklist files count") { $0.defaultBlocklist = false },
        .value("--sensor-keys", "FILE", """
            bind keys of sensors that encrypt their advertisements (BTHome v2, Xiaomi MiBeacon v4/v5): a \
            device a line, its address and its 16-byte AES key in hex, "54:48:E6:8F:80:A5 \
            231d39c1d7cc1ab1aee224cd096db932"; # comments. Without its key an encrypted reading shows \
            "missing-key" and no values (GET /v1/sensors). Read again on SIGHUP (a file that cannot be \
            used keeps the keys in force)
            """) { options, text, _ in options.sensorKeysFile = text },
        .value("--state-dir", "DIR", environment: "GATTWAY_STATE_DIR", """
            where what clients asked for is kept across restarts: devices kept connected, notification \
            holds, a running scan (state.json, written atomically; restored at start; GET \
            /v1/restoration). Default: $STATE_DIRECTORY, /var/lib/gattway if usable, else \
            ~/.local/state/gattway; with --simulate nothing unless given. "none": keep nothing
            """) { options, dir, source throws(UsageError) in
            options.stateDir = .some(try Parse.nonEmpty(dir, source, "a directory, or none") == "none" ? nil : dir)
        },
    ])

    static let limits = OptionSection(title: "Limits", options: [
        .value("--max-body", "BYTES", "largest request body accepted (default 65536)") { options, text, source throws(UsageError) in
            options.maxBodyBytes = try Parse.number(text, source, { $0 > 0 }, "takes a positive number of bytes")
        },
        .value("--keepalive", "SECONDS", """
            how often an idle event stream (SSE) gets a comment line, so that proxies keep it open \
            (default 15)
            """) { options, text, source throws(UsageError) in
            options.keepAliveSeconds = try Parse.number(text, source, { $0 > 0 && $0 <= 3600 }, "takes seconds, more than 0")
        },
        .value("--max-connections", "N", """
            connections served at once (default 12000); past it a request gets 503 with Retry-After. \
            `ulimit -n` is raised to fit, or the limit lowered to what the system allows (logged)
            """) { options, text, source throws(UsageError) in options.maxConnections = try Parse.count(text, source, 1...1_000_000) },
        .value("--max-streams", "N", """
            event streams (SSE and WebSocket) open at once (default 10000), at most --max-connections; \
            past it a new stream gets 503 with Retry-After while other requests are still served
            """) { options, text, source throws(UsageError) in options.maxStreams = try Parse.count(text, source, 0...1_000_000) },
        .value("--rate-limit", "N", """
            requests per second per client address, bursts of 2N (default 100; 0: no limit); past it 429 \
            with Retry-After
            """) { options, text, source throws(UsageError) in
            options.rateLimit = try Parse.number(text, source, (0...1_000_000.0).contains, "takes requests per second, 0 for no limit")
        },
        .value("--max-client-connections", "N", "connections from one client address (default 1024); past it 429") {
            options, text, source throws(UsageError) in options.maxClientConnections = try Parse.count(text, source, 1...1_000_000)
        },
        .value("--max-client-streams", "N", "event streams from one client address (default 512); past it 429") {
            options, text, source throws(UsageError) in options.maxClientStreams = try Parse.count(text, source, 0...1_000_000)
        },
        .value("--max-ws-message", "BYTES", """
            the largest WebSocket message a client may send (default 65536); a larger one closes the \
            socket with 1009
            """) { options, text, source throws(UsageError) in
            options.maxWebSocketMessage = try Parse.count(text, source, 125...(64 << 20))
        },
    ])

    static let starting = OptionSection(title: "Starting", options: [
        Option(["--config"], value: .required("FILE"), """
            options from a file, as if given before the command line's (so the command line's win; \
            repeatable ones add up): a line is an option without its dashes and its value, "listen \
            0.0.0.0:8080", "auto-reconnect"; # starts a comment line. Read once at start; the Debian \
            package's is /etc/gattway/gattway.conf
            """, .config),
        Option(["--help", "-h"], "this text", .help),
        Option(["--version"], "the version", .version),
    ])
}
