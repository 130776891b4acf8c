import BLE
import DBus
import Synchronization

/// The last step of recovery: the adapter powered off and on again through BlueZ
/// (`Adapter1.Powered`). The kernel then drops every connection it holds on it, a stale one
/// among them (a link whose end the controller never reported keeps every later connection to
/// that device refused, "Input/output error" or "Operation already in progress"); bonds stay.
/// Every link on the adapter goes down with it; the kept ones are connected again.
///
/// Each adapter at most once per `interval`, so that a device that is merely unreachable cannot
/// have it reset again and again; `enabled` false turns it off.
final class AdapterReset: Sendable {
    private let link: BusLink
    private let log: @Sendable (String) -> Void
    let enabled: Bool
    let interval: Duration
    /// When each adapter was last reset.
    private let last = Mutex<[ObjectPath: ContinuousClock.Instant]>([:])
    private let count = Atomic<Int>(0)

    init(link: BusLink, enabled: Bool, interval: Duration, log: @escaping @Sendable (String) -> Void) {
        self.link = link
        self.enabled = enabled
        self.interval = interval
        self.log = log
    }

    /// Resets done since start (for /metrics).
    var resets: Int { count.load(ordering: .relaxed) }

    /// Whether a reset began at or after `instant`.
    func done(since instant: ContinuousClock.Instant) -> Bool { last.withLock { $0.values.contains { $0 >= instant } } }

    /// Powers the adapter off and on, unless turned off or done within `interval`; what
    /// happened, for the caller's error message.
    func reset(_ adapter: ObjectPath, because why: String) async -> String {
        guard enabled else { return "resetting the adapter is turned off" }
        let now = ContinuousClock.now
        let allowed = last.withLock { last -> Bool in
            if let at = last[adapter], now - at < interval { return false }
            last[adapter] = now
            return true
        }
        let name = String(adapter.lastElement)
        guard allowed else { return "\(name) was reset less than \(Connector.seconds(interval)) ago" }
        log("\(name): resetting the adapter (powered off and on) because \(why)")
        count.add(1, ordering: .relaxed)
        do throws(BusError) {
            try await setPowered(adapter, false)
            try await setPowered(adapter, true)
        } catch {
            log("\(name): resetting the adapter failed: \(error)")
            return "resetting the adapter failed: \(error.message)"
        }
        log("\(name): the adapter was reset")
        return "the adapter (\(name)) was reset"
    }

    /// bluetoothd answers once the kernel has done it; the mirror is read again then, as the
    /// signal may come later.
    private func setPowered(_ adapter: ObjectPath, _ on: Bool) async throws(BusError) {
        _ = try await link.call(.methodCall(destination: BlueZ.service, path: adapter, interface: "org.freedesktop.DBus.Properties",
                                            member: "Set", [.string(BlueZ.adapterInterface), .string("Powered"), .variant(.bool(on))]),
                                timeout: .seconds(10))
        if let props = try? await link.getAllProperties(adapter, BlueZ.adapterInterface) {
            link.tree.refresh(adapter, BlueZ.adapterInterface, props)
        }
    }
}
