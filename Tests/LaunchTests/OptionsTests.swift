import Access
import BLE
import Testing
@testable import Launch

/// Options from the command line, the environment and a configuration file, as gattway parses them.
@Suite struct OptionsTests {
    static let token = "rw-token-0123456789abcdef"
    static let key = "x0ZQ6KeBwF4/7rNBQHYlTjn9cDuhQcF8UqzZAXu9I7M="

    /// What `parse` made of `arguments`, with `environment` and the files of `files`.
    static func parse(_ arguments: [String], environment: [String: String] = [:], files: [String: String] = [:]) -> Options.ParseResult {
        Options.parse(arguments, environment: { environment[$0] }, readFile: { files[$0] }, version: "9.9")
    }

    /// The options, or a recorded issue with the message that stopped them.
    static func options(_ arguments: [String], environment: [String: String] = [:], files: [String: String] = [:],
                        sourceLocation: SourceLocation = #_sourceLocation) -> Options {
        switch parse(arguments, environment: environment, files: files) {
        case .run(let options): return options
        case .exit(let code, let message):
            Issue.record("exit \(code): \(message)", sourceLocation: sourceLocation)
            return Options()
        }
    }

    /// The message of an exit, nil (and an issue) when the options were taken.
    static func refusal(_ arguments: [String], environment: [String: String] = [:], files: [String: String] = [:]) -> String? {
        guard case .exit(let code, let message) = parse(arguments, environment: environment, files: files) else { return nil }
        #expect(code == 2)
        return message
    }

    @Test func defaults() {
        let o = Self.options([])
        #expect(o.host == "127.0.0.1" && o.port == 8080 && o.simulate == nil && o.adapters == nil)
        #expect(o.maxConnections == 12_000 && o.maxStreams == 10_000 && o.rateLimit == 100 && o.maxBodyBytes == 65_536)
        #expect(o.tokens == TokenSources() && !o.noAuth && o.defaultBlocklist && o.mqtt == nil && o.esphomePort == nil)
        #expect(!o.watchAtStart && o.pairingIO == .noInputNoOutput && o.mqttPrefix == "gattway" && o.esphomeConnections == 3)
    }

    @Test func flagsWithValues() throws {
        let o = Self.options(["--listen", "[::1]:9000", "--adapter", "hci1", "--keepalive", "2.5", "--max-connections", "50",
                              "--max-streams", "80", "--stale-after", "5", "--forget-after", "60", "--idle-disconnect", "9",
                              "--pairing-io", "KeyboardDisplay", "--pairing-timeout", "40", "--state-dir", "none",
                              "--rate-limit", "0", "--max-client-connections", "7", "--max-client-streams", "0",
                              "--max-ws-message", "125", "--max-body", "10", "--mqtt", "mqtts://broker.lan", "--mqtt-ca", "ca.pem",
                              "--mqtt-cert", "me.pem", "--mqtt-key", "me.key", "--gateway-id", "upstairs", "--mqtt-prefix", "home",
                              "--mqtt-expire-after", "0", "--esphome-api", "6054", "--esphome-key", Self.key,
                              "--esphome-connections", "16", "--serial", "127.0.0.1:7000=F0:00:00:00:00:02,nordic",
                              "--tokens", "/etc/gattway/tokens"])
        #expect(o.host == "::1" && o.port == 9000 && o.adapters == ["hci1"] && o.keepAliveSeconds == 2.5)
        #expect(o.maxConnections == 50 && o.maxStreams == 50)  // at most the connections
        #expect(o.staleAfterSeconds == 5 && o.forgetAfter == .seconds(60) && o.idleDisconnectSeconds == 9)
        #expect(o.pairingIO == .keyboardDisplay && o.pairingTimeoutSeconds == 40)
        #expect(o.stateDir == .some(nil))
        #expect(o.rateLimit == 0 && o.maxClientConnections == 7 && o.maxClientStreams == 0 && o.maxWebSocketMessage == 125)
        #expect(o.maxBodyBytes == 10)
        #expect(o.mqtt?.tls == true && o.mqtt?.port == 8883 && o.mqttCA == "ca.pem" && o.mqttCertificate == "me.pem" && o.mqttKey == "me.key")
        #expect(o.gatewayID == "upstairs" && o.mqttPrefix == "home" && o.mqttExpireAfter == 0)
        #expect(try o.bridgeTopics(hostName: "ignored").availability == "home/upstairs/availability")
        #expect(o.esphomeHost == "127.0.0.1" && o.esphomePort == 6054 && o.esphomeKey != nil && o.esphomeConnections == 16)
        #expect(o.serialPorts.map(\.port) == [7000] && o.serialPorts.first?.device.description == "F0:00:00:00:00:02")
        #expect(o.tokens == TokenSources(file: "/etc/gattway/tokens"))
    }

    @Test func switchesAndRepeatables() {
        let o = Self.options(["--auto-reconnect", "--pairing-default-agent", "--no-default-blocklist", "--no-auth",
                              "--blocklist", "a", "--blocklist", "b", "--allow-origin", "https://x.example", "--allow-origin", "*",
                              "--sensor-keys", "s", "--pairing-keys", "p", "--tls-cert", "c.pem", "--tls-key", "k.pem"])
        #expect(o.autoReconnect && o.pairingDefaultAgent && !o.defaultBlocklist && o.noAuth)
        #expect(o.blocklistFiles == ["a", "b"] && o.allowedOrigins == ["https://x.example", "*"])
        #expect(o.sensorKeysFile == "s" && o.pairingKeysFile == "p" && o.tlsCertificate == "c.pem" && o.tlsKey == "k.pem")
    }

    @Test func simulateTakesAFileOnlyWhenOneFollows() {
        #expect(Self.options(["--simulate"]).simulate == .some(nil))
        #expect(Self.options(["--simulate", "house.json"]).simulate == .some("house.json"))
        let o = Self.options(["--simulate", "--no-watch"])
        #expect(o.simulate == .some(nil) && o.watch == false && !o.watchAtStart)
        #expect(Self.options(["--simulate"]).watchAtStart)
        #expect(Self.options(["--watch"]).watchAtStart)
    }

    @Test func theEnvironmentGivesDefaults() {
        let o = Self.options([], environment: [
            "GATTWAY_LISTEN": "127.0.0.1:0", "GATTWAY_ADAPTER": "hci2", "GATTWAY_SIMULATE": "builtin",
            "GATTWAY_AUTO_RECONNECT": "Yes", "GATTWAY_STATE_DIR": "/tmp/s", "GATTWAY_TOKENS": "\(Self.token)",
            "GATTWAY_NO_AUTH": "0", "GATTWAY_ALLOW_ORIGINS": " https://a.example ,, https://b.example",
            "GATTWAY_TLS_CERT": "c", "GATTWAY_TLS_KEY": "k", "GATTWAY_MQTT": "mqtt://h:1884", "GATTWAY_GATEWAY_ID": "den",
            "GATTWAY_MQTT_EXPOSE": "e.json", "GATTWAY_ESPHOME_API": "0.0.0.0:6053", "GATTWAY_ESPHOME_KEY": Self.key,
            "GATTWAY_ESPHOME_CONNECTIONS": "2",
        ])
        #expect(o.port == 0 && o.adapters == ["hci2"] && o.simulate == .some(nil) && o.autoReconnect && o.stateDir == .some("/tmp/s"))
        #expect(o.tokens == TokenSources(list: Self.token) && !o.noAuth)
        #expect(o.allowedOrigins == ["https://a.example", "https://b.example"])
        #expect(o.tlsCertificate == "c" && o.tlsKey == "k" && o.mqtt?.port == 1884 && o.gatewayID == "den" && o.mqttExposeFile == "e.json")
        #expect(o.esphomeHost == "0.0.0.0" && o.esphomePort == 6053 && o.esphomeKey != nil && o.esphomeConnections == 2)
        #expect(Self.options([], environment: ["GATTWAY_SIMULATE": "house.json"]).simulate == .some("house.json"))
        #expect(Self.options([], environment: ["GATTWAY_NO_AUTH": "true"]).noAuth)
    }

    @Test func anEmptyVariableIsNoVariable() {
        let o = Self.options([], environment: ["GATTWAY_LISTEN": "", "GATTWAY_SIMULATE": "", "GATTWAY_TOKENS": "", "GATTWAY_MQTT": ""])
        #expect(o.port == 8080 && o.simulate == nil && o.tokens == TokenSources() && o.mqtt == nil)
    }

    @Test func theCommandLineWinsOverTheFileWhichWinsOverTheEnvironment() {
        let files = ["g.conf": "listen 127.0.0.1:2000\nmax-body 100\nblocklist from-file\nallow-origin https://f.example\n"]
        let environment = ["GATTWAY_LISTEN": "127.0.0.1:1000", "GATTWAY_ALLOW_ORIGINS": "https://e.example"]
        let o = Self.options(["--listen", "127.0.0.1:3000", "--config", "g.conf", "--blocklist", "from-line"],
                             environment: environment, files: files)
        #expect(o.port == 3000 && o.maxBodyBytes == 100)
        #expect(o.blocklistFiles == ["from-file", "from-line"])
        #expect(o.allowedOrigins == ["https://e.example", "https://f.example"])
        #expect(Self.options(["--config", "g.conf"], environment: environment, files: files).port == 2000)
    }

    @Test func aConfigFileLine() {
        let files = ["g.conf": "# comment\n\n  simulate  \r\nno-watch\nmqtt-prefix home  gw\t\nstate-dir /var/lib/my state\r\n"]
        let o = Self.options(["--config", "g.conf"], files: files)
        #expect(o.simulate == .some(nil) && o.watch == false)
        #expect(o.mqttPrefix == "home  gw" && o.stateDir == .some("/var/lib/my state"))  // the rest of the line
        #expect(Self.options(["--config", "s.conf"], files: ["s.conf": "simulate house.json"]).simulate == .some("house.json"))
    }

    @Test(arguments: [
        (["--bogus"], "unknown argument \"--bogus\""),
        (["--listen"], "--listen needs a value"),
        (["--listen", "nowhere"], "--listen takes HOST:PORT, e.g. 127.0.0.1:8080, not \"nowhere\""),
        (["--listen", ":8080"], "--listen needs a host, e.g. 0.0.0.0:8080"),
        (["--listen", "127.0.0.1:70000"], "--listen takes HOST:PORT, e.g. 127.0.0.1:8080, not \"127.0.0.1:70000\""),
        (["--adapter", "hci"], "--adapter takes adapter names such as hci0 (or hci0,hci1, or all), not \"hci\""),
        (["--keepalive", "0"], "--keepalive takes seconds, more than 0"),
        (["--keepalive", "nan"], "--keepalive takes seconds, more than 0"),
        (["--max-connections", "0"], "--max-connections takes a number from 1 to 1000000"),
        (["--forget-after", "0.5"], "--forget-after takes seconds, from 1 to 604800"),
        (["--idle-disconnect", "86401"], "--idle-disconnect takes seconds, more than 0 and at most 86400"),
        (["--pairing-io", "Telepathy"], "--pairing-io takes one of \(PairingIO.names), not \"Telepathy\""),
        (["--pairing-timeout", "121"], "--pairing-timeout takes seconds, from 1 to 120"),
        (["--state-dir", ""], "--state-dir takes a directory, or none"),
        (["--tokens", ""], "--tokens takes a file"),
        (["--rate-limit", "-1"], "--rate-limit takes requests per second, 0 for no limit"),
        (["--max-ws-message", "124"], "--max-ws-message takes a number from 125 to 67108864"),
        (["--max-body", "0"], "--max-body takes a positive number of bytes"),
        (["--mqtt-expire-after", "1.5"], "--mqtt-expire-after takes whole seconds, from 0 (never) to 604800"),
        (["--esphome-api", "[]:6053"], "--esphome-api takes [HOST:]PORT, e.g. 6053 or 0.0.0.0:6053, not \"[]:6053\""),
        (["--esphome-api", "6053", "--esphome-key", "c2hvcnQ="],
         "--esphome-key takes 32 bytes in base64, as ESPHome's api: encryption: key: (head -c 32 /dev/urandom | base64)"),
        (["--esphome-api", "6053", "--esphome-connections", "17"], "--esphome-connections takes a number of connection slots from 1 to 16, not \"17\""),
        (["--tls-cert", "c.pem"], "--tls-cert and --tls-key go together: give both or neither"),
        (["--mqtt", "mqtts://h", "--mqtt-key", "k"], "--mqtt-cert and --mqtt-key go together: give both or neither"),
        (["--mqtt", "mqtt://h", "--mqtt-ca", "ca.pem"], "--mqtt-ca, --mqtt-cert and --mqtt-key are for an mqtts:// broker"),
        (["--esphome-key", OptionsTests.key], "--esphome-key is the key of the ESPHome API: give --esphome-api [HOST:]PORT too"),
        (["--esphome-connections", "2"], "--esphome-connections are the ESPHome API's: give --esphome-api [HOST:]PORT too"),
        (["--mqtt-expose", "e.json"], "--mqtt-expose publishes to the broker of --mqtt: give --mqtt URL too"),
        (["--config", "a", "--config", "b"], "--config may be given once"),
        (["--config"], "--config needs a file"),
    ])
    func mistakesOnTheCommandLine(arguments: [String], message: String) {
        #expect(Self.refusal(arguments) == "gattway: \(message)\nTry gattway --help.")
    }

    @Test func mistakesInTheEnvironmentNameTheVariable() {
        #expect(Self.refusal([], environment: ["GATTWAY_LISTEN": "nowhere"])?.hasPrefix(
            "gattway: GATTWAY_LISTEN takes HOST:PORT, e.g. 127.0.0.1:8080, not \"nowhere\"") == true)
        #expect(Self.refusal([], environment: ["GATTWAY_ESPHOME_API": "6053", "GATTWAY_ESPHOME_KEY": "nope"])?.hasPrefix(
            "gattway: GATTWAY_ESPHOME_KEY takes 32 bytes in base64") == true)
        #expect(Self.refusal([], environment: ["GATTWAY_ESPHOME_CONNECTIONS": "2"])?.contains(
            "--esphome-connections are the ESPHome API's") == true)
        #expect(Self.refusal([], environment: ["GATTWAY_MQTT": "http://broker"])?.hasPrefix("gattway: GATTWAY_MQTT: ") == true)
    }

    @Test(arguments: [
        ("listen 127.0.0.1:0\n\nbogus 1\n", ":3: unknown argument \"--bogus\""),
        ("no-auth yes\n", ":1: no-auth takes no value"),
        ("--listen 127.0.0.1:0\n", ":1: write the option without its dashes: listen"),
        ("# ok\nmax-body many\n", ":2: --max-body takes a positive number of bytes"),
        ("max-body\n", ":1: --max-body needs a value"),
        ("config /etc/gattway/other.conf\n", ":1: config has no place in a configuration file"),
        ("help\n", ":1: help has no place in a configuration file"),
    ])
    func mistakesInAConfigFileSayTheLine(text: String, said: String) {
        #expect(Self.refusal(["--config", "g.conf"], files: ["g.conf": text]) == "gattway: g.conf\(said)\nTry gattway --help.")
    }

    @Test func aConfigFileThatCannotBeRead() {
        #expect(Self.refusal(["--config", "missing.conf"])?.hasPrefix("gattway: --config: cannot read missing.conf (") == true)
    }

    @Test func helpAndVersionEndAtOnce() {
        guard case .exit(0, let help) = Self.parse(["--max-body", "7", "-h", "--bogus"]) else {
            Issue.record("no help")
            return
        }
        #expect(help == Options.usage(version: "9.9"))
        guard case .exit(0, let version) = Self.parse(["--version"]) else {
            Issue.record("no version")
            return
        }
        #expect(version == "gattway 9.9")
        // A mistake before --help is still one.
        #expect(Self.refusal(["--bogus", "--help"]) != nil)
    }

    @Test func theExposurePolicyHasTheLastWord() {
        #expect(Self.refusal(["--listen", "0.0.0.0:8080"]) == """
            gattway: --listen 0.0.0.0 without tokens would let anyone who reaches it use every device.
            Give --tokens FILE (or GATTWAY_TOKENS), or --no-auth to do it anyway.
            """)
        #expect(Self.options(["--listen", "0.0.0.0:8080", "--tokens", "t"]).host == "0.0.0.0")
        #expect(Self.options(["--listen", "0.0.0.0:8080"], environment: ["GATTWAY_TOKENS": Self.token]).host == "0.0.0.0")
        #expect(Self.options(["--listen", "0.0.0.0:8080", "--no-auth"]).noAuth)
        #expect(Self.refusal(["--esphome-api", "0.0.0.0:6053"])?.hasPrefix("gattway: --esphome-api 0.0.0.0:6053 without a key") == true)
        #expect(Self.options(["--esphome-api", "0.0.0.0:6053", "--esphome-key", Self.key]).esphomePort == 6053)
        #expect(Self.refusal(["--serial", "0.0.0.0:7000=F0:00:00:00:00:02"])?.hasPrefix(
            "gattway: --serial 0.0.0.0:7000 would let anyone who reaches it use F0:00:00:00:00:02") == true)
    }

    @Test func theListenersTheExposurePolicyJudges() {
        let o = Self.options(["--tokens", "t", "--esphome-api", "[::1]:6053", "--serial", "127.0.0.1:7000=F0:00:00:00:00:02"])
        #expect(o.listeners == [
            Exposure.Listener(host: "127.0.0.1", port: 8080, door: .http(tokens: true)),
            Exposure.Listener(host: "127.0.0.1", port: 7000, door: .serial(device: "F0:00:00:00:00:02")),
            Exposure.Listener(host: "::1", port: 6053, door: .esphome(key: false)),
        ])
    }
}
