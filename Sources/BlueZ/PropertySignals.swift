import DBus
import Synchronization

/// Which of bluetoothd's PropertiesChanged signals gattway reads.
///
/// While advertisements come from BlueZ's signals, all of them (one rule over /org/bluez). While
/// they come from the kernel's management socket, bluetoothd still signals each advertisement of
/// every device it hears (its RSSI with a discovery filter set, its data whenever it changes):
/// gattway would pay for each advertisement twice. Then it reads every interface's signals but
/// Device1's, and Device1's only for the devices it has to do with — engaged: one it connects,
/// pairs or changes, one whose link the kernel reports up, one BlueZ lists as connected. An
/// engaged device stays so until its object goes (or the bus connection does).
final class PropertySignals: Sendable {
    enum Scope: Sendable, Equatable {
        /// Every object's signals.
        case everything
        /// Device1's for engaged devices only.
        case engagedDevices
    }

    /// The interfaces whose signals are read whatever the scope (Device1's are the scope's matter).
    static let otherInterfaces = ["org.bluez.Adapter1", "org.bluez.LEAdvertisingManager1", "org.bluez.GattService1",
                                  "org.bluez.GattCharacteristic1", "org.bluez.GattDescriptor1", "org.bluez.Battery1",
                                  "org.bluez.AdvertisementMonitorManager1"]

    private struct State {
        var scope = Scope.everything
        var connection: Connection?
        /// The scope's own rules, with their subscriptions.
        var rules: [(MatchRule, SubscriptionID)] = []
        /// Engaged devices: the subscription once the bus took its rule (nil while it is asked).
        var engaged: [ObjectPath: SubscriptionID?] = [:]
    }

    private let state = Mutex(State())
    private let apply: @Sendable (Message) -> Void
    /// PropertiesChanged signals read: Device1's, and the others'.
    private let counts = Counts()

    private final class Counts: Sendable {
        let devices = Atomic<Int>(0)
        let others = Atomic<Int>(0)
    }

    /// `apply` takes every signal read (the mirror's).
    init(apply: @escaping @Sendable (Message) -> Void) {
        self.apply = { [counts] message in
            if message.body.first?.string == BlueZ.deviceInterface {
                counts.devices.add(1, ordering: .relaxed)
            } else {
                counts.others.add(1, ordering: .relaxed)
            }
            apply(message)
        }
    }

    /// Signals read so far, Device1's and the others'.
    var signalsRead: (devices: Int, others: Int) {
        (counts.devices.load(ordering: .relaxed), counts.others.load(ordering: .relaxed))
    }

    var scope: Scope { state.withLock { $0.scope } }

    /// A new bus connection: the scope's rules on it (nothing is engaged on it yet).
    func subscribe(on connection: Connection) async throws(BusError) {
        let scope = state.withLock { s in
            s.connection = connection
            s.rules = []
            s.engaged = [:]
            return s.scope
        }
        try await subscribe(scope, on: connection)
    }

    /// Changes the scope on the current connection. Going back to `everything`, the mirror's
    /// devices may have missed signals: the caller reads them again.
    func setScope(_ scope: Scope) async {
        let (connection, old, engaged) = state.withLock { s -> (Connection?, [(MatchRule, SubscriptionID)], [ObjectPath: SubscriptionID?]) in
            guard scope != s.scope else { return (nil, [], [:]) }
            defer {
                s.scope = scope
                s.rules = []
                s.engaged = [:]
            }
            return (s.connection, s.rules, s.engaged)
        }
        guard let connection else { return }
        // The new rules first, so that nothing falls between.
        try? await subscribe(scope, on: connection)
        for (rule, id) in old { connection.unsubscribe(id, rule: rule) }
        for (path, id) in engaged { if let id { connection.unsubscribe(id, rule: Self.deviceRule(path)) } }
    }

    private func subscribe(_ scope: Scope, on connection: Connection) async throws(BusError) {
        let rules = switch scope {
        case .everything:
            [MatchRule(sender: BlueZ.service, pathNamespace: BlueZ.root, interface: Connection.propertiesInterface, member: "PropertiesChanged")]
        case .engagedDevices:
            Self.otherInterfaces.map {
                MatchRule(sender: BlueZ.service, pathNamespace: BlueZ.root, interface: Connection.propertiesInterface,
                          member: "PropertiesChanged", arg0: $0)
            }
        }
        for rule in rules {
            let id = try await connection.subscribe(rule, apply)
            let kept = state.withLock { s -> Bool in
                guard s.connection === connection, s.scope == scope else { return false }
                s.rules.append((rule, id))
                return true
            }
            if !kept { connection.unsubscribe(id, rule: rule) }
        }
    }

    /// Reads the device's Device1 signals from now on; true when it was not engaged before (the
    /// caller then reads its properties, which may have changed unseen). False at once while
    /// every signal is read.
    func engage(_ path: ObjectPath) async -> Bool {
        let connection = state.withLock { s -> Connection? in
            guard s.scope == .engagedDevices, s.engaged[path] == nil, let c = s.connection else { return nil }
            s.engaged[path] = .some(nil)
            return c
        }
        guard let connection else { return false }
        let rule = Self.deviceRule(path)
        do throws(BusError) {
            let id = try await connection.subscribe(rule, apply)
            let kept = state.withLock { s -> Bool in
                guard s.connection === connection, s.scope == .engagedDevices, s.engaged[path] != nil else { return false }
                s.engaged[path] = id
                return true
            }
            if !kept { connection.unsubscribe(id, rule: rule) }
            return kept
        } catch {
            state.withLock { s in if s.engaged[path] == .some(nil) { s.engaged[path] = nil } }
            return false
        }
    }

    /// The device's object went: its rule with it.
    func disengage(_ path: ObjectPath) {
        let (connection, id) = state.withLock { s -> (Connection?, SubscriptionID?) in
            guard let entry = s.engaged.removeValue(forKey: path) else { return (nil, nil) }
            return (s.connection, entry)
        }
        if let connection, let id { connection.unsubscribe(id, rule: Self.deviceRule(path)) }
    }

    /// Devices engaged now (for /metrics and tests).
    var engagedCount: Int { state.withLock { $0.engaged.count } }

    static func deviceRule(_ path: ObjectPath) -> MatchRule {
        MatchRule(sender: BlueZ.service, path: path, interface: Connection.propertiesInterface, member: "PropertiesChanged",
                  arg0: BlueZ.deviceInterface)
    }
}
