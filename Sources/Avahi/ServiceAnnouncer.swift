import DBus
import Synchronization

/// A DNS-SD service announced on the local network by avahi-daemon, through its D-Bus API
/// (org.freedesktop.Avahi on the system bus): an entry group holding the service, committed.
///
/// It stays announced: under another name when the name collides on the network (Avahi's
/// alternative, "name #2"), again when avahi-daemon comes back after a restart or has taken
/// another host name, and with new TXT records when `update` gives them. It is withdrawn by
/// `stop`, or by Avahi itself when gattway's bus connection ends (a client's groups go with it).
/// Without avahi-daemon or a system bus: one log line, and the service is announced as soon
/// as avahi-daemon appears on the bus.
public final class ServiceAnnouncer: Sendable {
    /// What is announced.
    public struct Service: Sendable, Equatable {
        /// The instance name ("kitchen"), as browsers list it.
        public var name: String
        /// "_esphomelib._tcp".
        public var type: String
        public var port: UInt16
        /// "key=value" strings, in order.
        public var txt: [String]

        public init(name: String, type: String, port: UInt16, txt: [String]) {
            self.name = name
            self.type = type
            self.port = port
            self.txt = txt
        }
    }

    /// avahi-daemon's D-Bus names and codes (avahi-common/defs.h, the introspection files).
    enum Avahi {
        static let service = "org.freedesktop.Avahi"
        static let server = "org.freedesktop.Avahi.Server"
        static let entryGroup = "org.freedesktop.Avahi.EntryGroup"
        static let collisionError = "org.freedesktop.Avahi.CollisionError"
        /// AVAHI_IF_UNSPEC, AVAHI_PROTO_UNSPEC: every interface, IPv4 and IPv6.
        static let unspecified: Int32 = -1
        /// AvahiEntryGroupState.
        static let established: Int32 = 2, collision: Int32 = 3, failure: Int32 = 4
        /// AvahiServerState.
        static let running: Int32 = 2
    }

    private struct State {
        var connection: Connection?
        var service: Service
        /// The entry group, while one is made.
        var group: ObjectPath?
        /// A name of another's took the place of ours (Avahi's alternatives), kept for updates.
        var name: String
        /// What the log said last, so that a repeated condition is one line.
        var said: String?
        var stopped = false
    }

    private let state: Mutex<State>
    private let busAddress: String
    private let log: @Sendable (String) -> Void
    /// Publishing runs one at a time (signals start it from the bus thread).
    private let turns = Mutex<Task<Void, Never>?>(nil)
    /// How many alternative names are tried before giving up.
    static let collisionLimit = 12

    public init(busAddress: String, service: Service, log: @escaping @Sendable (String) -> Void) {
        self.busAddress = busAddress
        self.log = log
        state = Mutex(State(service: service, name: service.name))
    }

    /// Connects to the bus and announces the service (or says why not, once).
    public func start() async {
        let connection: Connection
        do {
            connection = try Connection(address: busAddress)
        } catch {
            return say("no D-Bus system bus (\(error)): \(state.withLock { $0.service.type }) not announced; the API works without it")
        }
        let owner = MatchRule(sender: "org.freedesktop.DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
                              arg0: Avahi.service)
        let serverState = MatchRule(sender: Avahi.service, interface: Avahi.server, member: "StateChanged")
        let groupState = MatchRule(sender: Avahi.service, interface: Avahi.entryGroup, member: "StateChanged")
        do {
            _ = try await connection.subscribe(owner) { [weak self] signal in
                let newOwner = signal.body.count > 2 ? signal.body[2].string ?? "" : ""
                self?.ownerChanged(newOwner)
            }
            // Running again (after registering a new host name): the group is added again, the
            // same group (a new one beside the old would collide with it).
            _ = try await connection.subscribe(serverState) { [weak self] signal in
                if signal.body.first?.integer == Int(Avahi.running) { self?.schedule(fresh: false) }
            }
            _ = try await connection.subscribe(groupState) { [weak self] signal in
                self?.groupChanged(signal)
            }
        } catch {
            connection.close()
            return say("cannot follow avahi-daemon on the system bus (\(error)): not announced; the API works without it")
        }
        connection.setDisconnectHandler { [weak self] in
            self?.state.withLock { $0.connection = nil; $0.group = nil }
            self?.say("the D-Bus system bus went away: no longer announced")
        }
        let stopped = state.withLock { s -> Bool in
            if !s.stopped { s.connection = connection }
            return s.stopped
        }
        if stopped { connection.close(); return }
        await publish(fresh: true)
    }

    /// Announces `service` instead (new TXT records), if it differs.
    public func update(_ service: Service) {
        let changed = state.withLock { s -> Bool in
            guard s.service != service else { return false }
            if s.service.name != service.name { s.name = service.name }
            s.service = service
            return true
        }
        if changed { schedule(fresh: false) }
    }

    /// Withdraws the service and leaves the bus.
    public func stop() {
        let (connection, group) = state.withLock { s in
            s.stopped = true
            defer { s.connection = nil; s.group = nil }
            return (s.connection, s.group)
        }
        turns.withLock { $0 }?.cancel()
        guard let connection else { return }
        if let group {
            // Best effort: the connection's end frees the group anyway.
            try? connection.send(.methodCall(destination: Avahi.service, path: group, interface: Avahi.entryGroup, member: "Free"))
        }
        connection.close()
    }

    // MARK: -

    private func ownerChanged(_ newOwner: String) {
        if newOwner.isEmpty {
            state.withLock { $0.group = nil }
            say("avahi-daemon left the bus: not announced until it is back")
        } else {
            schedule(fresh: true)
        }
    }

    private func groupChanged(_ signal: Message) {
        guard let path = signal.path, state.withLock({ $0.group == path }), let code = signal.body.first?.integer else { return }
        let (service, name) = state.withLock { ($0.service, $0.name) }
        switch Int32(code) {
        case Avahi.established:
            say("announced \"\(name)\" (\(service.type)) on port \(service.port)")
        case Avahi.collision:
            schedule(fresh: false, collided: true)
        case Avahi.failure:
            say("avahi-daemon could not announce \"\(name)\": \(signal.body.count > 1 ? signal.body[1].string ?? "" : "")")
        default:
            break
        }
    }

    /// Publishes again after what came before (signals come on the bus thread).
    private func schedule(fresh: Bool, collided: Bool = false) {
        turns.withLock { previous in
            let before = previous
            previous = Task { [weak self] in
                await before?.value
                guard let self else { return }
                if collided { await self.takeAlternativeName() }
                await self.publish(fresh: fresh)
            }
        }
    }

    /// Adds the service to the entry group (made anew when `fresh`: at the start, or when a new
    /// avahi-daemon took the bus name, the old one's groups gone with it) and commits it. A name
    /// taken already goes to Avahi's alternative.
    private func publish(fresh: Bool) async {
        guard let connection = state.withLock({ $0.stopped ? nil : $0.connection }) else { return }
        do throws(BusError) {
            var group = state.withLock { fresh ? nil : $0.group }
            if let group {
                _ = try await call(connection, group, Avahi.entryGroup, "Reset")
            } else {
                let made = try await call(connection, ObjectPath.root, Avahi.server, "EntryGroupNew")
                guard let path = made.body.first?.objectPath else {
                    throw BusError(name: "org.freedesktop.DBus.Error.InvalidSignature", message: "EntryGroupNew answered no object path")
                }
                group = path
                state.withLock { $0.group = path }
            }
            for attempt in 0...Self.collisionLimit {
                let (service, name) = state.withLock { ($0.service, $0.name) }
                do throws(BusError) {
                    _ = try await call(connection, group!, Avahi.entryGroup, "AddService", [
                        .int32(Avahi.unspecified), .int32(Avahi.unspecified), .uint32(0), .string(name), .string(service.type),
                        .string(""), .string(""), .uint16(service.port),
                        .array(element: Signature("ay")!, service.txt.map { .bytes(Array($0.utf8)) }),
                    ])
                    break
                } catch where error.name == Avahi.collisionError && attempt < Self.collisionLimit {
                    await takeAlternativeName()
                }
            }
            _ = try await call(connection, group!, Avahi.entryGroup, "Commit")
        } catch where error.name.hasSuffix(".ServiceUnknown") || error.name.hasSuffix(".NameHasNoOwner") {
            say("avahi-daemon is not running (no org.freedesktop.Avahi on the system bus): "
                + "\(state.withLock { $0.service.type }) not announced until it starts; the API works without it")
        } catch {
            say("avahi-daemon refused the announcement: \(error)")
        }
    }

    private func takeAlternativeName() async {
        guard let connection = state.withLock({ $0.connection }) else { return }
        let name = state.withLock { $0.name }
        if let answer = try? await call(connection, ObjectPath.root, Avahi.server, "GetAlternativeServiceName", [.string(name)]),
           let alternative = answer.body.first?.string {
            state.withLock { $0.name = alternative }
            say("\"\(name)\" is taken on the network: announced as \"\(alternative)\"")
        }
    }

    private func call(_ connection: Connection, _ path: ObjectPath, _ interface: String, _ member: String,
                      _ body: [Value] = []) async throws(BusError) -> Message {
        try await connection.call(.methodCall(destination: Avahi.service, path: path, interface: interface, member: member, body),
                                  timeout: .seconds(10))
    }

    /// One log line per condition: the same one again is not repeated.
    private func say(_ line: String) {
        let new = state.withLock { s -> Bool in
            defer { s.said = line }
            return s.said != line
        }
        if new { log(line) }
    }
}
