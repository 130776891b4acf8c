/// What gattway has started, each with how it stops. Every exit, a signal or a step that failed,
/// goes through `stopAll`, which stops them in the reverse order of their start: the doors
/// before the gateway they use, the gateway before BlueZ, BlueZ before the simulator it runs on.
/// Used from one task (gattway's `run`).
package final class Services {
    private var running: [(name: String, stop: () async -> Void)] = []
    private let log: (String) -> Void

    package init(log: @escaping (String) -> Void) { self.log = log }

    /// What runs now, in the order it started.
    package var names: [String] { running.map(\.name) }

    /// Runs one start step; what it started is stopped with `stop` at the end. A step that throws
    /// has started nothing (it undoes what it did before it throws): the error is the caller's,
    /// which then stops what the steps before it started.
    @discardableResult
    package func start<Service, Failure: Error>(_ name: String, _ step: () async throws(Failure) -> Service,
                                                stop: @escaping (Service) async -> Void) async throws(Failure) -> Service {
        let service = try await step()
        running.append((name, { await stop(service) }))
        return service
    }

    /// Something started already, to be stopped with the others.
    package func started(_ name: String, stop: @escaping () async -> Void) {
        running.append((name, stop))
    }

    /// Stops everything started, last first; each once (a second call stops nothing).
    package func stopAll() async {
        let stopping = running.reversed()
        running = []
        guard !stopping.isEmpty else { return }
        log("stopping: " + stopping.map(\.name).joined(separator: ", "))
        for service in stopping { await service.stop() }
    }
}
