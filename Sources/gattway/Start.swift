import Access
import BLE
import BlueZ
import DBus
import Dispatch
import ESPHomeAPI
import ESPHomeProxy
import GatewayCore
import Glibc
import HTTPAPI
import HTTPServer
import Launch
import MQTTBridge
import SerialBridge

// The start steps of `run`, in their order; each returns what it started.

/// `--simulate`: a private bus with the BlueZ simulator on it.
func startSimulation(_ file: String?) async throws(StartFailure) -> Simulation {
    do {
        let started = try await Simulation.start(configurationFile: file, log: log)
        log("simulating BlueZ (\(file ?? "built-in devices")) on DBUS_SYSTEM_BUS_ADDRESS=\(started.bus.address)")
        return started
    } catch {
        throw StartFailure("cannot start the simulator: \(error)", status: 1)
    }
}

/// BlueZ on `busAddress`, the simulator's or the system's; a bus that is away is tried again
/// with backoff meanwhile. Passive scanning's monitors are written down in the state directory.
func startCentral(_ options: Options, busAddress: String, simulation: Simulation?, stateDirectory: String?) async -> BlueZCentral {
    let pairing = PairingOptions(io: options.pairingIO, defaultAgent: options.pairingDefaultAgent,
                                 answerDeadline: .milliseconds(Int(options.pairingTimeoutSeconds * 1000)))
    let central = BlueZCentral(busAddress: busAddress, adapters: options.adapters.map { .named($0) } ?? .all,
                               staleAfter: .milliseconds(Int(options.staleAfterSeconds * 1000)),
                               forgetAfter: options.forgetAfter, pairing: pairing,
                               recovery: RecoveryOptions(resetAdapter: options.adapterReset),
                               advertisements: advertisementSource(options, simulation: simulation),
                               monitorLedger: stateDirectory.flatMap(monitorLedger), log: log)
    await central.start()
    let status = await central.status()
    log("Bluetooth state: \(status.state.name)" + (status.reason.map { " (\($0))" } ?? ""))
    if status.reason?.contains("D-Bus system bus") == true {
        log("gattway: is dbus running? In a container: is /run/dbus mounted, and does the host know the uid"
            + " (its dbus-daemon drops unknown uids; the image's 65534 is known everywhere)? Or try --simulate."
            + " Serving meanwhile; the bus is tried again with backoff.", .warning)
    }
    return central
}

/// Where advertisements are read: a socket named, D-Bus when asked, the simulator's own events
/// when simulating (never the kernel's: they are of other adapters), else the kernel's if it may.
func advertisementSource(_ options: Options, simulation: Simulation?) -> AdvertisementSource {
    if let path = options.managementSocket { return .socket(path) }
    if options.advertisements == .dbus { return .dbus }
    guard let simulation else { return .auto }
    return simulation.managementStream().map { .descriptor($0) } ?? .dbus
}

/// The advertisement monitors' ledger, `kernel-monitors` in the state directory (nil where this
/// boot's id cannot be read).
func monitorLedger(_ directory: String) -> MonitorLedger? {
    guard let boot = readFile("/proc/sys/kernel/random/boot_id")?.split(separator: "\n").first.map(String.init), !boot.isEmpty else {
        log("passive scanning: this boot's id cannot be read: advertisement monitors are not written down", .warning)
        return nil
    }
    let file = directory + "/kernel-monitors"
    return MonitorLedger(boot: boot, read: { readFile(file) }, write: { text in
        do throws(Restoration.FileError) {
            try Restoration.writeAtomically(Array(text.utf8), to: file)
            return nil
        } catch {
            return error.description
        }
    })
}

/// What gattway asked BlueZ for on its own ends with it.
func stopCentral(_ central: BlueZCentral) async {
    _ = try? await central.stopScan()
    _ = try? await central.stopWatch()
    central.close()
}

/// The core every door shares, with the state kept across restarts.
func makeGateway(_ options: Options, _ loaded: Loaded, central: BlueZCentral, stateDirectory: String?) -> Gateway {
    let blocklistSources = (options.defaultBlocklist ? ["the default list"] : []) + options.blocklistFiles
    log("GATT blocklist: \(loaded.blocklist.entries.count) UUIDs from \(blocklistSources.isEmpty ? "nowhere" : blocklistSources.joined(separator: ", "))")
    return Gateway(central: central, version: gattwayVersion,
                   keepAliveInterval: .milliseconds(Int(options.keepAliveSeconds * 1000)),
                   autoReconnect: options.autoReconnect, stateDirectory: stateDirectory,
                   blocklist: loaded.blocklist, idleDisconnect: .milliseconds(Int(options.idleDisconnectSeconds * 1000)),
                   sensorKeys: loaded.sensorKeys, pairingKeys: loaded.pairingKeys, peripheral: central.peripheral, log: log)
}

/// What gattway connected on its own would be disconnected when idle: by no one, after this.
func disconnectOwned(_ gateway: Gateway) async {
    let owned = await gateway.autoConnections.disconnectOwned()
    if owned > 0 { log("disconnected \(owned) device(s) connected for connect=auto or a serial port") }
}

/// The directory of state.json, made if it is not there; nil (logged) when it cannot be used.
func stateDirectory(_ options: Options) -> String? {
    let environment: (String) -> String? = { key in getenv(key).map { String(cString: $0) } }
    var directory = options.stateDirectory(environment: environment) { path in
        Glibc.access(path, W_OK | X_OK) == 0 || (mkdir(path, 0o750) == 0)
    }
    if let dir = directory, !makeDirectories(dir) {
        log("state: cannot use \(dir) (\(String(cString: strerror(errno)))); nothing is kept across restarts", .warning)
        directory = nil
    }
    log(directory.map { "state: kept in \($0)/state.json" } ?? "state: not kept (no --state-dir)")
    return directory
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

/// The serial-port door: `--serial`'s ports (opened later, once the HTTP API serves), and the
/// links the HTTP API's WebSocket route shares.
func makeSerialPorts(_ options: Options, gateway: Gateway) -> SerialPorts {
    SerialPorts(links: SerialLinks(gateway: gateway, log: { log("serial: \($0)") }), allowRemote: options.noAuth,
                log: { log("serial: \($0)") })
}

/// `--serial`'s ports; the first that cannot listen stops the start.
func openSerialPorts(_ serial: SerialPorts, _ options: Options) throws(StartFailure) {
    do throws(BLEError) {
        try serial.open(options.serialPorts)
    } catch {
        throw StartFailure("--serial: \(error.message)", status: 1)
    }
}

/// `--esphome-api`: the door, listening; its node name is the gateway id, else the host's name.
func startESPHome(_ options: Options, port: UInt16, gateway: Gateway) async throws(StartFailure) -> ESPHomeProxy {
    let name = options.gatewayID ?? BridgeTopics.gatewayID(fromHostName: hostName())
    let configuration = APIServer.Configuration(host: options.esphomeHost, port: port, key: options.esphomeKey)
    let proxy: ESPHomeProxy
    do throws(APIServerError) {
        proxy = try await ESPHomeProxy(configuration, name: name, version: gattwayVersion, gateway: gateway,
                                       connections: options.esphomeConnections, log: { log("esphome: \($0)") })
    } catch {
        throw StartFailure("--esphome-api: \(error)", status: 1)
    }
    log("esphome: listening on \(urlHost(options.esphomeHost)):\(proxy.port) (ESPHome native API, "
        + (options.esphomeKey == nil ? "plaintext" : "Noise-encrypted") + "), node \(name), \(options.esphomeConnections) connection slots")
    return proxy
}

/// The start's last steps: systemd hears READY=1 (STOPPING=1 at the end), and the watchdog
/// beats while the HTTP server and the D-Bus thread answer.
func announceReady(_ options: Options, _ services: Services, systemd: ServiceManager, http: HTTPDoor, central: BlueZCentral) async {
    let scheme = http.tls ? "https" : "http"
    let port = http.server.port
    log("gattway \(gattwayVersion) listening on \(scheme)://\(urlHost(options.host)):\(port)")
    // A wildcard address is no place to browse to; loopback is one of the addresses it covers.
    let browsable = ["0.0.0.0", "::"].contains(options.host) ? (options.host == "::" ? "::1" : "127.0.0.1") : options.host
    log("dashboard: open \(scheme)://\(urlHost(browsable)):\(port)/ in a browser")
    systemd.notify("READY=1\nSTATUS=listening on \(scheme)://\(urlHost(options.host)):\(port)")
    services.started("systemd") { systemd.notify("STOPPING=1") }
    guard let interval = systemd.watchdogInterval else { return }
    let watchdog = Watchdog(interval: interval, manager: systemd, checks: [
        .init(name: "the HTTP server") { timeout in http.answers(timeout: timeout) },
        .init(name: "the D-Bus thread") { timeout in
            let ran = DispatchSemaphore(value: 0)
            // No bus connection is no wedge: gattway serves meanwhile and connects again.
            guard central.onBusThread({ ran.signal() }) else { return true }
            return ran.wait(timeout: .now() + .nanoseconds(Int(timeout.inSeconds * 1e9))) == .success
        },
    ])
    await services.start("watchdog", { watchdog.start() }, stop: { watchdog.stop() })
    log("watchdog: WATCHDOG=1 every \(interval / 3) while HTTP and D-Bus answer")
}
