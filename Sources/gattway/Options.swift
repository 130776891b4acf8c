import Glibc

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
    /// nil: the default (see `stateDirectory`); Some(nil): keep nothing; Some(path): there.
    var stateDir: String??
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

    Usage: gattway [--listen HOST:PORT] [--adapter hciN] [--simulate [FILE]]
                   [--tls-cert FILE --tls-key FILE]

    Options:
      --listen HOST:PORT   where to serve HTTP (default 127.0.0.1:8080; 0.0.0.0:8080 for all
                           interfaces; port 0 picks a free port, printed at start)
      --adapter hciN       the Bluetooth adapter to use (default: the first BlueZ lists);
                           other adapters are left alone
      --simulate [FILE]    no radio needed: start a private D-Bus daemon with gattway's BlueZ
                           simulator on it and use that. FILE is a simulator configuration
                           (JSON, see `gattway-sim --help`); without it, the built-in devices:
                           a heart-rate monitor, an HM-10 style serial module, a device that
                           needs pairing, an iBeacon and an Eddystone beacon.
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
      --stale-after SECONDS
                           a device the scan found and has not seen for this long is listed
                           with "stale": true (and stays listed, as last seen, when BlueZ
                           forgets it) (default 60)
      --state-dir DIR      where what clients asked for is kept across restarts: devices kept
                           connected, notification holds, a running scan (state.json, written
                           atomically; restored at start; GET /v1/restoration). Default:
                           $STATE_DIRECTORY, /var/lib/gattway if usable, else
                           ~/.local/state/gattway; with --simulate nothing unless given.
                           "none": keep nothing
      --tls-cert FILE      serve HTTPS only (WebSocket: wss), with this PEM certificate
                           (chain, leaf first) and the PEM private key of --tls-key (not
                           encrypted); both or neither. Read once at start
      --tls-key FILE
      --help               this text
      --version            the version

    Environment:
      DBUS_SYSTEM_BUS_ADDRESS   the system bus to find BlueZ on (default unix:path=/run/dbus/system_bus_socket)
      GATTWAY_LISTEN, GATTWAY_ADAPTER, GATTWAY_SIMULATE (a file, or "builtin"),
      GATTWAY_AUTO_RECONNECT (1 or true), GATTWAY_STATE_DIR, GATTWAY_TLS_CERT, GATTWAY_TLS_KEY
                                defaults for the options above; flags win

    API: /v1/state, /v1/adapters, /v1/scan, /v1/devices[/{id}[/connect|/disconnect|/gatt|
    /services|/characteristics/{char}[/value|/notifications]]], live events on /v1/events (SSE)
    and /v1/ws (WebSocket). Errors are JSON with CoreBluetooth codes. See README.md, openapi.yaml.
    """

    enum ParseResult {
        case run(Options)
        case exit(code: Int32, message: String)
    }

    static func parse(_ arguments: [String], environment: (String) -> String?) -> ParseResult {
        var options = Options()
        do {
            if let listen = environment("GATTWAY_LISTEN") { try options.setListen(listen) }
            if let adapter = environment("GATTWAY_ADAPTER"), !adapter.isEmpty { options.adapter = adapter }
            if let simulate = environment("GATTWAY_SIMULATE"), !simulate.isEmpty {
                options.simulate = .some(simulate == "builtin" ? nil : simulate)
            }
            if let auto = environment("GATTWAY_AUTO_RECONNECT") { options.autoReconnect = ["1", "true", "yes"].contains(auto.lowercased()) }
            if let dir = environment("GATTWAY_STATE_DIR"), !dir.isEmpty { options.stateDir = .some(dir == "none" ? nil : dir) }
            if let file = environment("GATTWAY_TLS_CERT"), !file.isEmpty { options.tlsCertificate = file }
            if let file = environment("GATTWAY_TLS_KEY"), !file.isEmpty { options.tlsKey = file }
            var rest = arguments[...]
            while let argument = rest.popFirst() {
                func value() throws -> String {
                    guard let v = rest.popFirst() else { throw UsageError("\(argument) needs a value") }
                    return v
                }
                switch argument {
                case "--help", "-h": return .exit(code: 0, message: usage)
                case "--version": return .exit(code: 0, message: "gattway \(gattwayVersion)")
                case "--listen": try options.setListen(try value())
                case "--adapter":
                    let adapter = try value()
                    guard adapter.hasPrefix("hci"), adapter.dropFirst(3).allSatisfy(\.isNumber), adapter.count > 3 else {
                        throw UsageError("--adapter takes an adapter name such as hci0, not \"\(adapter)\"")
                    }
                    options.adapter = adapter
                case "--simulate":
                    if let next = rest.first, !next.hasPrefix("--") {
                        rest.removeFirst()
                        options.simulate = .some(next)
                    } else {
                        options.simulate = .some(nil)
                    }
                case "--keepalive":
                    guard let n = Double(try value()), n > 0, n <= 3600 else { throw UsageError("--keepalive takes seconds, more than 0") }
                    options.keepAliveSeconds = n
                case "--max-connections":
                    guard let n = Int(try value()), n > 0, n <= 1_000_000 else {
                        throw UsageError("--max-connections takes a number from 1 to 1000000")
                    }
                    options.maxConnections = n
                case "--max-streams":
                    guard let n = Int(try value()), n >= 0, n <= 1_000_000 else {
                        throw UsageError("--max-streams takes a number from 0 to 1000000")
                    }
                    options.maxStreams = n
                case "--auto-reconnect": options.autoReconnect = true
                case "--stale-after":
                    guard let n = Double(try value()), n > 0, n <= 86_400 else { throw UsageError("--stale-after takes seconds, more than 0") }
                    options.staleAfterSeconds = n
                case "--state-dir":
                    let dir = try value()
                    guard !dir.isEmpty else { throw UsageError("--state-dir takes a directory, or none") }
                    options.stateDir = .some(dir == "none" ? nil : dir)
                case "--tls-cert": options.tlsCertificate = try value()
                case "--tls-key": options.tlsKey = try value()
                case "--max-body":
                    guard let n = Int(try value()), n > 0 else { throw UsageError("--max-body takes a positive number of bytes") }
                    options.maxBodyBytes = n
                default:
                    throw UsageError("unknown argument \"\(argument)\"")
                }
            }
            guard (options.tlsCertificate == nil) == (options.tlsKey == nil) else {
                throw UsageError("--tls-cert and --tls-key go together: give both or neither")
            }
        } catch let error as UsageError {
            return .exit(code: 2, message: "gattway: \(error.message)\nTry gattway --help.")
        } catch {
            return .exit(code: 2, message: "gattway: \(error)")
        }
        options.maxStreams = min(options.maxStreams, options.maxConnections)
        return .run(options)
    }

    private mutating func setListen(_ text: String) throws {
        guard let colon = text.lastIndex(of: ":"), let port = UInt16(text[text.index(after: colon)...]) else {
            throw UsageError("--listen takes HOST:PORT, e.g. 127.0.0.1:8080, not \"\(text)\"")
        }
        var host = String(text[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else { throw UsageError("--listen needs a host, e.g. 0.0.0.0:\(port)") }
        self.host = host
        self.port = port
    }
}

struct UsageError: Error {
    let message: String
    init(_ message: String) { self.message = message }
}
