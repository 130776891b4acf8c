import BLE
import Sockets
import Synchronization

/// The serial-port door: the TCP ports serving devices' UARTs, those of `--serial` and those
/// added over the API, and the serial links they share with the HTTP API's WebSocket route.
package final class SerialPorts: Sendable {
    package let links: SerialLinks
    private let ports = Mutex<[UInt16: SerialPort]>([:])
    private let log: @Sendable (String) -> Void
    /// Ports open at once (each has a thread).
    package static let maxPorts = 16

    /// Whether a port may listen beyond loopback (`--no-auth`): a raw TCP port has no tokens.
    private let allowRemote: Bool

    package init(links: SerialLinks, allowRemote: Bool = false, log: @escaping @Sendable (String) -> Void) {
        self.links = links
        self.allowRemote = allowRemote
        self.log = log
    }


    /// Opens a port (`invalidParameters` when it cannot listen: taken, or not an address here).
    @discardableResult
    package func open(_ configuration: SerialPort.Configuration) throws(BLEError) -> SerialPort {
        guard allowRemote || TCPListener.isLoopback(configuration.host) else {
            throw BLEError(att: .insufficientAuthorization, "a serial port on \(configuration.host) would let anyone who reaches it use"
                           + " \(configuration.device) (a raw TCP port has no tokens): serve it on 127.0.0.1, or start gattway with --no-auth")
        }
        guard ports.withLock({ $0.count }) < Self.maxPorts else {
            throw BLEError(.connectionLimitReached, "\(Self.maxPorts) serial ports are open, as many as gattway serves: close one first")
        }
        if configuration.port != 0, ports.withLock({ $0[configuration.port] }) != nil {
            throw BLEError(.invalidParameters, "port \(configuration.port) serves a device already")
        }
        let port: SerialPort
        do throws(SocketError) {
            port = try SerialPort(configuration, links: links, log: log)
        } catch {
            throw BLEError(.invalidParameters, "cannot listen on \(configuration.host):\(configuration.port): \(error.description)")
        }
        ports.withLock { $0[port.port] = port }
        log("serial port \(configuration.host):\(port.port) serves \(configuration.device)"
            + " (\(configuration.profile?.name ?? "the profile it has"), on link loss: \(configuration.onLinkLoss.rawValue))")
        return port
    }

    /// Opens the ports of `--serial`; the first that cannot listen is the error.
    package func open(_ configurations: [SerialPort.Configuration]) throws(BLEError) {
        for configuration in configurations { try open(configuration) }
    }

    /// Closes a port and its clients; false when no port has that number.
    package func close(_ number: UInt16) -> Bool {
        guard let port = ports.withLock({ $0.removeValue(forKey: number) }) else { return false }
        port.stop()
        log("serial port \(port.configuration.host):\(number) closed")
        return true
    }

    package var all: [SerialPort] { ports.withLock { $0.values.sorted { $0.port < $1.port } } }

    package func port(_ number: UInt16) -> SerialPort? { ports.withLock { $0[number] } }

    /// Closes every port (at exit).
    package func stop() {
        for port in ports.withLock({ p in defer { p = [:] }; return Array(p.values) }) { port.stop() }
    }
}

extension SerialPort.Configuration {
    /// `HOST:PORT=ADDRESS[,OPTION]...` (`--serial`): HOST an IPv4 literal, `[IPv6]` or
    /// `localhost`; options `hm10`, `nordic`, `microchip`, `service=UUID`, `rx=UUID`, `tx=UUID`
    /// (a custom profile), `hold` or `close` (on link loss), `mode=auto|response|command`,
    /// `rate=BYTES_PER_SECOND`.
    package init(parsing text: String) throws(BLEError) {
        func bad(_ why: String) -> BLEError {
            BLEError(.invalidParameters, "--serial \(text): \(why); expected HOST:PORT=ADDRESS[,hm10|nordic|microchip|service=UUID,rx=UUID,tx=UUID][,hold][,mode=auto|response|command][,rate=N]")
        }
        guard let equals = text.firstIndex(of: "=") else { throw bad("no =ADDRESS") }
        let endpoint = String(text[..<equals])
        var options = text[text.index(after: equals)...].split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        guard let colon = endpoint.lastIndex(of: ":"),
              let port = UInt16(endpoint[endpoint.index(after: colon)...]) else { throw bad("no :PORT") }
        var host = String(endpoint[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else { throw bad("no HOST") }
        guard let device = BluetoothAddress(options.removeFirst()) else { throw bad("not a Bluetooth address") }
        var settings: [String: String] = [:]
        for option in options {
            let parts = option.split(separator: "=", maxSplits: 1).map(String.init)
            settings[parts[0]] = parts.count > 1 ? parts[1] : ""
        }
        do throws(BLEError) {
            try self.init(host: host, port: port, device: device, settings: settings)
        } catch {
            throw bad(error.message)
        }
    }

    /// From named settings (a `--serial` option's, or an API request's): a profile name as a key
    /// with no value, `hold`/`close`, and `profile`, `service`, `rx`, `tx`, `mode`, `rate`.
    package init(host: String, port: UInt16, device: BluetoothAddress, settings: [String: String]) throws(BLEError) {
        self.init(host: host, port: port, device: device)
        var settings = settings
        var named: String? = settings.removeValue(forKey: "profile")
        for profile in SerialProfile.known where settings.removeValue(forKey: profile.name) != nil {
            guard named == nil else { throw BLEError(.invalidParameters, "one profile at a time") }
            named = profile.name
        }
        if settings.removeValue(forKey: "hold") != nil { onLinkLoss = .hold }
        if settings.removeValue(forKey: "close") != nil { onLinkLoss = .close }
        if let text = settings.removeValue(forKey: "onLinkLoss") {
            guard let loss = SerialLink.LinkLoss(rawValue: text) else { throw BLEError(.invalidParameters, "onLinkLoss is close or hold, not \"\(text)\"") }
            onLinkLoss = loss
        }
        writeOptions = try SerialLink.WriteOptions(mode: settings.removeValue(forKey: "mode"), rate: settings.removeValue(forKey: "rate"))
        profile = try SerialProfile.named(named, service: settings.removeValue(forKey: "service"),
                                          rx: settings.removeValue(forKey: "rx"), tx: settings.removeValue(forKey: "tx"))
        if let unknown = settings.keys.sorted().first { throw BLEError(.invalidParameters, "unknown option \"\(unknown)\"") }
    }
}
