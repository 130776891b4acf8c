import DBus
import Sockets
import Simulator

/// `--simulate`: a private bus with the BlueZ simulator on it.
struct Simulation {
    let bus: PrivateBus
    let simulator: BlueZSimulator

    static func start(configurationFile: String?, log: @escaping @Sendable (String) -> Void) async throws -> Simulation {
        let configuration = try configurationFile.map { try SimulatorConfiguration.load(path: $0) } ?? .builtIn
        let bus = try PrivateBus()
        do {
            let simulator = BlueZSimulator(connection: try Connection(address: bus.address), configuration: configuration,
                                           log: { log("simulator: \($0)") })
            try await simulator.start()
            return Simulation(bus: bus, simulator: simulator)
        } catch {
            bus.stop()
            throw error
        }
    }

    /// A descriptor the simulator's management events (the kernel's frames for its adapters) come
    /// on; nil while the simulator serves none.
    func managementStream() -> Int32? {
        do throws(SocketError) {
            return try simulator.managementStream()
        } catch {
            return nil
        }
    }

    func stop() {
        simulator.stop()
        // Bounded: a daemon stuck past its SIGKILL is left, not waited for.
        if !bus.stop() { log("simulator: the private dbus-daemon had not ended 5 s after its SIGKILL; left (\(bus.directory))", .warning) }
    }
}
