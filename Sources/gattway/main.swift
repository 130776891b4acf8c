import DBus
import ESPHomeProxy
import GatewayCore
import Glibc
import Launch

let gattwayVersion = "0.1.0"

/// gattway from its options to a signal: the start, step by step, then the one teardown that
/// every exit takes (a signal, or a step that failed), stopping what started, last first.
func run(_ options: Options, _ termination: TerminationSignals) async -> Int32 {
    let systemd = ServiceManager.fromEnvironment()
    let loaded: Loaded
    do throws(StartFailure) {
        loaded = try Loaded.load(options)
    } catch {
        writeError("gattway: \(error.message)\n")  // FILE:LINE: what is wrong
        return error.status
    }
    let services = Services(log: log)
    var status: Int32 = 0
    do throws(StartFailure) {
        try await start(options, loaded, services, systemd: systemd)
        let signal = await termination.wait()
        log("signal \(signal): shutting down")
    } catch {
        log("gattway: \(error.message)", .error)
        status = error.status
    }
    await services.stopAll()
    return status
}

/// The start steps, in order; what each starts is in `services`, for the teardown.
func start(_ options: Options, _ loaded: Loaded, _ services: Services, systemd: ServiceManager) async throws(StartFailure) {
    let hangUp = await services.start("SIGHUP", { HangUp(options, loaded.access) }, stop: { $0.cancel() })
    // The bus: ours with the simulator on it, or the system's.
    var busAddress = Connection.systemBusAddress
    var simulation: Simulation?
    if let file = options.simulate {
        simulation = try await services.start("simulator", { () async throws(StartFailure) in try await startSimulation(file) },
                                              stop: { $0.stop() })
        busAddress = simulation!.bus.address
    }
    let state = stateDirectory(options)
    let central = await services.start("BlueZ", { [simulation] in
        await startCentral(options, busAddress: busAddress, simulation: simulation, stateDirectory: state)
    }, stop: stopCentral)
    // The core, then its doors.
    let gateway = await services.start("gateway", { makeGateway(options, loaded, central: central, stateDirectory: state) }, stop: disconnectOwned)
    hangUp.reload(keysOf: gateway)
    let serial = await services.start("serial ports", { makeSerialPorts(options, gateway: gateway) }, stop: { $0.stop() })
    let http = try await services.start("HTTP server", { () throws(StartFailure) in
        try HTTPDoor.start(options, loaded, gateway: gateway, serial: serial)
    }, stop: { $0.stop() })
    var esphome: ESPHomeProxy?
    if let port = options.esphomePort {
        esphome = try await services.start("ESPHome API", { () async throws(StartFailure) in
            try await startESPHome(options, port: port, gateway: gateway)
        }, stop: { await $0.stop() })
    }
    try openSerialPorts(serial, options)
    if let esphome {
        await services.start("mDNS", { Task { await announce(esphome, options: options) } }, stop: { await $0.value?.stop() })
    }
    Task {
        await gateway.restore()
        if options.watchAtStart { await gateway.watchAtStart() }
    }
    if let url = options.mqtt {
        try await services.start("MQTT bridge", { () throws(StartFailure) in
            try MQTTDoor.start(options, url: url, gateway: gateway, exposed: loaded.exposed)
        }, stop: { await $0.stop() })
    }
    await announceReady(options, services, systemd: systemd, http: http, central: central)
    #if DEBUG
    let stalls = Stalls(http: { http.server.stallForTesting() }, bus: { _ = central.onBusThread { while true { sleep(3600) } } })
    services.started("debug stalls") { withExtendedLifetime(stalls) {} }
    #endif
}

switch Options.parse(Array(CommandLine.arguments.dropFirst()), environment: { key in getenv(key).map { String(cString: $0) } },
                     readFile: readFile, version: gattwayVersion) {
case .exit(let code, let message):
    if code == 0 { print(message) } else { writeError(message + "\n") }
    exit(code)
case .run(let options):
    // Here, on the main thread before any other starts: `run` goes on in Swift's pool.
    let termination = TerminationSignals()
    exit(await run(options, termination))
}
