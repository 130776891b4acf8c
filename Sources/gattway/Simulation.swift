import DBus

/// `--simulate`: a private bus with the BlueZ simulator on it.
struct Simulation {
    let bus: PrivateBus

    static func start(configurationFile: String?) async throws -> Simulation {
        throw BusError(name: "org.freedesktop.DBus.Error.Failed", message: "the simulator is not built yet")
    }

    func stop() {
        bus.stop()
    }
}
