import Access
import BLE
import BlueZ
import DBus
import Dispatch
import ESPHomeAPI
import ESPHomeProxy
import FoundationEssentials
import GatewayCore
import Glibc
import HTTPAPI
import HTTPServer
import MQTTBridge
import Sensors
import SerialBridge
import Synchronization

let gattwayVersion = "0.1.0"

/// SIGINT and SIGTERM, caught from the moment this is made (before anything starts, so that a
/// signal during start-up still stops gattway cleanly) until `wait` returns one.
final class TerminationSignals {
    private final class State: Sendable {
        let value = Mutex<(received: Int32?, waiting: CheckedContinuation<Int32, Never>?)>((nil, nil))
    }
    private let state = State()
    private let sources: [DispatchSourceSignal]

    init() {
        signal(SIGINT, SIG_IGN)
        signal(SIGTERM, SIG_IGN)
        let state = self.state
        sources = [SIGINT, SIGTERM].map { number in
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler {
                let waiting = state.value.withLock { s -> CheckedContinuation<Int32, Never>? in
                    if s.received == nil { s.received = number }
                    return s.waiting.take()
                }
                waiting?.resume(returning: number)
            }
            source.resume()
            return source
        }
    }

    /// The first signal received, waiting for one if none came yet.
    func wait() async -> Int32 {
        let received = await withCheckedContinuation { (continuation: CheckedContinuation<Int32, Never>) in
            let early = state.value.withLock { s -> Int32? in
                if let r = s.received { return r }
                s.waiting = continuation
                return nil
            }
            if let early { continuation.resume(returning: early) }
        }
        sources.forEach { $0.cancel() }
        return received
    }
}

/// `mkdir -p`: true when `path` is a directory this process can write to.
func makeDirectories(_ path: String) -> Bool {
    var prefix = path.hasPrefix("/") ? "" : "."
    for part in path.split(separator: "/") {
        prefix += "/" + part
        if mkdir(prefix, 0o750) != 0 && errno != EEXIST { return false }
    }
    return access(path, W_OK | X_OK) == 0
}

/// The tokens of `--tokens FILE` and `GATTWAY_TOKENS`, together.
func loadTokens(_ options: Options) throws -> TokenSet {
    var set = TokenSet()
    if let list = options.tokensList { set = try TokenSet.parse(list: list, source: "GATTWAY_TOKENS") }
    if let file = options.tokensFile {
        guard let text = readFile(file) else {
            throw TokenError(description: "\(file): cannot read it (\(String(cString: strerror(errno))))")
        }
        set = try set.merged(with: try TokenSet.parse(lines: text, source: file), source: file)
    }
    return set
}

/// A whole file as UTF-8 text, nil if it cannot be read.
func readFile(_ path: String) -> String? {
    guard let file = fopen(path, "r") else { return nil }
    defer { fclose(file) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 4096)
    while true {
        let count = fread(&chunk, 1, chunk.count, file)
        if count > 0 { bytes += chunk[..<count] }
        if count < chunk.count { break }
    }
    return ferror(file) == 0 ? String(decoding: bytes, as: UTF8.self) : nil
}

/// On SIGHUP, the token, sensor key and pairing key files are read again; a file that cannot be used leaves
/// what it gave as it was (and the log says why). The handler is set before anything is served;
/// `reload` is called once the gateway exists (a SIGHUP before then reloads the tokens only).
final class HangUp {
    private final class Slot: Sendable {
        let gateway = Mutex<Gateway?>(nil)
    }
    private let slot = Slot()
    private let source: DispatchSourceSignal

    init(_ options: Options, _ access: AccessControl) {
        signal(SIGHUP, SIG_IGN)
        source = DispatchSource.makeSignalSource(signal: SIGHUP, queue: .global())
        let slot = self.slot
        source.setEventHandler {
            reloadTokens(options, access)
            guard let gateway = slot.gateway.withLock({ $0 }) else { return }
            if options.sensorKeysFile != nil { reloadSensorKeys(options, gateway) }
            if options.pairingKeysFile != nil { reloadPairingKeys(options, gateway) }
        }
        source.resume()
    }

    /// From now on SIGHUP also gives `gateway` the keys of the sensor and pairing keys files.
    func reload(keysOf gateway: Gateway) { slot.gateway.withLock { $0 = gateway } }

    func cancel() { source.cancel() }
}

func reloadTokens(_ options: Options, _ access: AccessControl) {
    do {
        let set = try loadTokens(options)
        if set.isEmpty && access.requiresTokens {
            log("tokens: SIGHUP: the file now has no token; keeping the tokens in force (an empty file would open every route)", .warning)
            return
        }
        access.replaceTokens(set)
        log("tokens: SIGHUP: \(set.count) token(s) in force, \(set.readOnlyCount) read-only")
    } catch {
        log("tokens: SIGHUP: \(error); keeping the tokens in force", .warning)
    }
}

func reloadSensorKeys(_ options: Options, _ gateway: Gateway) {
    reloadKeys("sensors", "bind key(s)", options.sensorKeysFile, read: options.sensorKeys, count: \.count,
               inForce: gateway.sensorKeyCount, replace: gateway.replaceSensorKeys)
}

func reloadPairingKeys(_ options: Options, _ gateway: Gateway) {
    reloadKeys("pairing", "key(s)", options.pairingKeysFile, read: options.pairingKeys, count: \.count,
               inForce: gateway.pairingKeyCount, replace: gateway.replacePairingKeys)
}

/// A keys file read again on SIGHUP: put in force, or, when it cannot be used, the keys in force
/// kept (the log says why).
private func reloadKeys<Keys>(_ topic: String, _ noun: String, _ file: String?, read: () throws(UsageError) -> Keys,
                              count: (Keys) -> Int, inForce: Int, replace: (Keys) -> Void) {
    do {
        let keys = try read()
        replace(keys)
        log("\(topic): SIGHUP: \(count(keys)) \(noun) from \(file ?? "")")
    } catch {
        log("\(topic): SIGHUP: \(error.message); keeping the \(inForce) \(noun) in force", .warning)
    }
}

/// `--esphome-api`: the door, listening; its node name is the gateway id, else the host's name.
func startESPHome(_ options: Options, port: UInt16, gateway: Gateway) async throws(APIServerError) -> ESPHomeProxy {
    let name = options.gatewayID ?? BridgeTopics.gatewayID(fromHostName: hostName())
    let configuration = APIServer.Configuration(host: options.esphomeHost, port: port, key: options.esphomeKey)
    let proxy = try await ESPHomeProxy(configuration, name: name, version: gattwayVersion, gateway: gateway,
                                       connections: options.esphomeConnections, log: { log("esphome: \($0)") })
    log("esphome: listening on \(urlHost(options.esphomeHost)):\(proxy.port) (ESPHome native API, "
        + (options.esphomeKey == nil ? "plaintext" : "Noise-encrypted") + "), node \(name), \(options.esphomeConnections) connection slots")
    return proxy
}

/// A host as it stands in a URL: an IPv6 address in brackets.
func urlHost(_ host: String) -> String { host.contains(":") ? "[\(host)]" : host }

func run(_ options: Options) async -> Int32 {
    let termination = TerminationSignals()
    let service = ServiceManager.fromEnvironment()
    let access: AccessControl
    do {
        let tokens = try loadTokens(options)
        access = AccessControl(.init(tokens: tokens, origins: try OriginPolicy(allowing: options.allowedOrigins),
                                     requestsPerSecond: options.rateLimit, requestBurst: 2 * options.rateLimit,
                                     openPaths: API.openPaths), log: log)
        if tokens.isEmpty {
            log("access: no tokens: whoever can reach \(options.host) may use every route"
                + (Options.isLoopback(options.host) ? " (loopback: this machine only)" : " (--no-auth)"))
        } else {
            log("access: \(tokens.count) token(s), \(tokens.readOnlyCount) read-only; every route but GET /v1/state needs one")
        }
        if !options.allowedOrigins.isEmpty { log("access: pages from \(options.allowedOrigins.joined(separator: ", ")) may use the API") }
    } catch {
        writeError("gattway: \(error)\n")
        return 2
    }
    let hangUp = HangUp(options, access)
    defer { hangUp.cancel() }
    let blocklist: Blocklist
    do {
        blocklist = try options.blocklist()
    } catch {
        writeError("gattway: \(error.message)\n")
        return 2
    }
    let sensorKeys: SensorKeys
    do {
        sensorKeys = try options.sensorKeys()
    } catch {
        writeError("gattway: \(error.message)\n")  // FILE:LINE: what is wrong
        return 2
    }
    if let file = options.sensorKeysFile { log("sensors: \(sensorKeys.count) bind key(s) from \(file)") }
    let pairingKeys: PairingKeys
    do {
        pairingKeys = try options.pairingKeys()
    } catch {
        writeError("gattway: \(error.message)\n")
        return 2
    }
    if let file = options.pairingKeysFile { log("pairing: \(pairingKeys.count) key(s) from \(file)") }
    let exposed: [ExposedCharacteristic]
    do {
        exposed = try exposedCharacteristics(options)
    } catch {
        writeError("gattway: \(error.message)\n")  // FILE: [i]: what is wrong
        return 2
    }
    var tls: TLSCredentials?
    if let certificate = options.tlsCertificate, let key = options.tlsKey {
        do {
            tls = try TLSCredentials(certificateFile: certificate, keyFile: key)
        } catch {
            log("gattway: TLS: \(error)", .error)
            return 2
        }
    }
    // The bus: ours with the simulator on it, or the system's.
    var simulation: Simulation?
    let address: String
    if let simulate = options.simulate {
        do {
            let started = try await Simulation.start(configurationFile: simulate, log: log)
            simulation = started
            address = started.bus.address
            log("simulating BlueZ (\(simulate ?? "built-in devices")) on DBUS_SYSTEM_BUS_ADDRESS=\(started.bus.address)")
        } catch {
            log("gattway: cannot start the simulator: \(error)", .error)
            return 1
        }
    } else {
        address = Connection.systemBusAddress
    }

    let pairing = PairingOptions(io: options.pairingIO, defaultAgent: options.pairingDefaultAgent,
                                 answerDeadline: .milliseconds(Int(options.pairingTimeoutSeconds * 1000)))
    let central = BlueZCentral(busAddress: address, adapter: options.adapter,
                               staleAfter: .milliseconds(Int(options.staleAfterSeconds * 1000)),
                               forgetAfter: options.forgetAfter, pairing: pairing, log: log)
    await central.start()
    let status = await central.status()
    log("Bluetooth state: \(status.state.name)" + (status.reason.map { " (\($0))" } ?? ""))
    if status.reason?.contains("D-Bus system bus") == true {
        log("gattway: is dbus running? In a container: is /run/dbus mounted, and does the host know the uid"
            + " (its dbus-daemon drops unknown uids; the image's 65534 is known everywhere)? Or try --simulate."
            + " Serving meanwhile; the bus is tried again with backoff.", .warning)
    }

    // One descriptor per connection, and some for the bus, the log and the server's own.
    let spare = 64
    let descriptors = Server.raiseDescriptorLimit(to: options.maxConnections + Server.defaultConnectionReserve + spare)
    var maxConnections = options.maxConnections
    if descriptors < maxConnections + Server.defaultConnectionReserve + spare {
        maxConnections = max(1, descriptors - Server.defaultConnectionReserve - spare)
        log("gattway: only \(descriptors) file descriptors are allowed (ulimit -n); serving at most \(maxConnections) connections"
            + " instead of \(options.maxConnections)", .warning)
    }
    let maxStreams = min(options.maxStreams, maxConnections)
    let environment: (String) -> String? = { key in getenv(key).map { String(cString: $0) } }
    var stateDirectory = options.stateDirectory(environment: environment) { path in
        Glibc.access(path, W_OK | X_OK) == 0 || (mkdir(path, 0o750) == 0)
    }
    if let dir = stateDirectory, !makeDirectories(dir) {
        log("state: cannot use \(dir) (\(String(cString: strerror(errno)))); nothing is kept across restarts", .warning)
        stateDirectory = nil
    }
    log(stateDirectory.map { "state: kept in \($0)/state.json" } ?? "state: not kept (no --state-dir)")
    let limits = Limits(streams: maxStreams, clientStreams: options.maxClientStreams,
                        webSocketMessageBytes: options.maxWebSocketMessage)
    // The core, then its doors: the HTTP API, and the MQTT bridge below.
    let gateway = Gateway(central: central, version: gattwayVersion,
                          keepAliveInterval: .milliseconds(Int(options.keepAliveSeconds * 1000)),
                          autoReconnect: options.autoReconnect, stateDirectory: stateDirectory,
                          blocklist: blocklist, idleDisconnect: .milliseconds(Int(options.idleDisconnectSeconds * 1000)),
                          sensorKeys: sensorKeys, pairingKeys: pairingKeys, log: log)
    hangUp.reload(keysOf: gateway)
    // The serial-port door: --serial's ports, and the links the HTTP API's WebSocket route shares.
    let serial = SerialPorts(links: SerialLinks(gateway: gateway, log: { log("serial: \($0)") }), allowRemote: options.noAuth,
                             log: { log("serial: \($0)") })
    let serve = API(gateway: gateway, limits: limits, access: access, serial: serial, log: log).handler()
    // Marks the watchdog's own requests, which are not logged (one every few seconds).
    let watchdogMark = String(UInt64.random(in: 1...UInt64.max), radix: 16)
    let blocklistSources = (options.defaultBlocklist ? ["the default list"] : []) + options.blocklistFiles
    log("GATT blocklist: \(blocklist.entries.count) UUIDs from \(blocklistSources.isEmpty ? "nowhere" : blocklistSources.joined(separator: ", "))")
    let server: Server
    do {
        server = try Server(host: options.host, port: options.port, tls: tls, maxBodyBytes: options.maxBodyBytes,
                            connectionLimit: maxConnections, connectionsPerClient: options.maxClientConnections,
                            log: { log("http: \($0)") }, errorResponder: API.errorResponder,
                            onRefusal: { error, client in
                                access.refusals.refused(error.name, client: client, "answered \(error.status)")
                            }) { request in
            let start = ContinuousClock.now
            let response = await serve(request)
            let elapsed = ContinuousClock.now - start
            let tenths = elapsed.components.seconds * 10_000 + elapsed.components.attoseconds / 100_000_000_000_000
            if request.headers["x-gattway-watchdog"] != watchdogMark {
                log("\(request.method) \(request.path) \(response.status) \(tenths / 10).\(tenths % 10) ms")
            }
            return response
        }
    } catch {
        log("gattway: \(error)", .error)
        return 1
    }
    let esphome: ESPHomeProxy?
    if let port = options.esphomePort {
        do {
            esphome = try await startESPHome(options, port: port, gateway: gateway)
        } catch {
            log("gattway: --esphome-api: \(error)")
            server.stop(); central.close(); simulation?.stop()
            return 1
        }
    } else {
        esphome = nil
    }
    do throws(BLEError) {
        try serial.open(options.serialPorts)
    } catch {
        log("gattway: --serial: \(error.message)", .error)
        await esphome?.stop(); serial.stop(); server.stop(); central.close(); simulation?.stop()
        return 1
    }
    let announcer = esphome.map { proxy in Task { await announce(proxy, options: options) } }
    Task {
        await gateway.restore()
        if options.watchAtStart { await gateway.watchAtStart() }
    }
    let mqtt = startBridge(options, gateway: gateway, exposed: exposed)
    if options.mqtt != nil && mqtt == nil { server.stop(); central.close(); simulation?.stop(); return 2 }
    let scheme = tls == nil ? "http" : "https"
    log("gattway \(gattwayVersion) listening on \(scheme)://\(urlHost(options.host)):\(server.port)")
    // A wildcard address is no place to browse to; loopback is one of the addresses it covers.
    let browsable = ["0.0.0.0", "::"].contains(options.host) ? (options.host == "::" ? "::1" : "127.0.0.1") : options.host
    log("dashboard: open \(scheme)://\(urlHost(browsable)):\(server.port)/ in a browser")
    service.notify("READY=1\nSTATUS=listening on \(scheme)://\(urlHost(options.host)):\(server.port)")
    let watchdog = service.watchdogInterval.map { interval in
        Watchdog(interval: interval, manager: service, checks: [
            .init(name: "the HTTP server") { timeout in
                server.selfCheck("/v1/state", headers: ["X-Gattway-Watchdog": watchdogMark], timeout: timeout) != nil
            },
            .init(name: "the D-Bus thread") { timeout in
                let ran = DispatchSemaphore(value: 0)
                // No bus connection is no wedge: gattway serves meanwhile and connects again.
                guard central.onBusThread({ ran.signal() }) else { return true }
                return ran.wait(timeout: .now() + .nanoseconds(Int(timeout.inSeconds * 1e9))) == .success
            },
        ])
    }
    watchdog?.start()
    if let interval = service.watchdogInterval { log("watchdog: WATCHDOG=1 every \(interval / 3) while HTTP and D-Bus answer") }
    #if DEBUG
    let stalls = Stalls(http: { server.stallForTesting() }, bus: { _ = central.onBusThread { while true { sleep(3600) } } })
    defer { withExtendedLifetime(stalls) {} }
    #endif

    let signal = await termination.wait()
    log("signal \(signal): shutting down")
    service.notify("STOPPING=1")
    watchdog?.stop()
    await announcer?.value?.stop()
    await esphome?.stop()
    serial.stop()
    if let mqtt {
        // Offline by choice: said before leaving, so the last will is not needed.
        await mqtt.exposer?.stop()
        await mqtt.bridge.stop()
        mqtt.client.stop(after: (mqtt.bridge.topics.availability, BridgeTopics.offline, true))
    }
    server.stop()
    // What gattway connected on its own would be disconnected when idle: by no one, after this.
    let owned = await gateway.autoConnections.disconnectOwned()
    if owned > 0 { log("disconnected \(owned) device(s) connected for connect=auto or a serial port") }
    _ = try? await central.stopScan()
    _ = try? await central.stopWatch()
    central.close()
    simulation?.stop()
    return 0
}

switch Options.parse(Array(CommandLine.arguments.dropFirst()), environment: { key in getenv(key).map { String(cString: $0) } },
                    readFile: readFile) {
case .exit(let code, let message):
    if code == 0 { print(message) } else { writeError(message + "\n") }
    exit(code)
case .run(let options):
    exit(await run(options))
}
