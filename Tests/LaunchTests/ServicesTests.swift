import Testing
@testable import Launch

/// The start's one teardown: what started is stopped, last first, whichever way the start ends.
@Suite struct ServicesTests {
    /// A fake door: records its start and stop in a shared journal.
    final class Journal {
        var entries: [String] = []
        var logged: [String] = []
    }

    struct Refused: Error, Equatable { let what: String }

    /// Starts `names` in order; the one named `failing` throws instead of starting.
    static func start(_ names: [String], failing: String?, _ services: Services, _ journal: Journal) async throws(Refused) {
        for name in names {
            try await services.start(name, { () async throws(Refused) -> String in
                if name == failing { throw Refused(what: name) }
                journal.entries.append("start \(name)")
                return name
            }, stop: { journal.entries.append("stop \($0)") })
        }
    }

    @Test func aFailingStartStopsEveryDoorStartedBeforeItLastFirst() async {
        let journal = Journal()
        let services = Services(log: { journal.logged.append($0) })
        do {
            try await Self.start(["simulator", "BlueZ", "HTTP server", "ESPHome API", "serial ports", "MQTT bridge", "watchdog"],
                                 failing: "MQTT bridge", services, journal)
            Issue.record("the MQTT bridge started")
        } catch {
            #expect(error == Refused(what: "MQTT bridge"))
        }
        #expect(services.names == ["simulator", "BlueZ", "HTTP server", "ESPHome API", "serial ports"])
        await services.stopAll()
        #expect(journal.entries == [
            "start simulator", "start BlueZ", "start HTTP server", "start ESPHome API", "start serial ports",
            "stop serial ports", "stop ESPHome API", "stop HTTP server", "stop BlueZ", "stop simulator",
        ])
        #expect(journal.logged == ["stopping: serial ports, ESPHome API, HTTP server, BlueZ, simulator"])
        #expect(services.names.isEmpty)
    }

    @Test func theTeardownStopsEachOnce() async throws {
        let journal = Journal()
        let services = Services(log: { journal.logged.append($0) })
        try await Self.start(["a", "b"], failing: nil, services, journal)
        services.started("c") { journal.entries.append("stop c") }
        await services.stopAll()
        await services.stopAll()
        #expect(journal.entries == ["start a", "start b", "stop c", "stop b", "stop a"])
        #expect(journal.logged == ["stopping: c, b, a"])
    }

    @Test func nothingStartedNothingToSay() async {
        let journal = Journal()
        let services = Services(log: { journal.logged.append($0) })
        await services.stopAll()
        #expect(journal.logged.isEmpty)
    }
}
