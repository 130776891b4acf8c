import BLE
import GatewayCore
import Synchronization
import Threading

/// The serial ports of the gateway's devices: a device's `SerialLink` is opened by its first
/// client (WebSocket or TCP) and closed after its last, so that any number of clients share one
/// hold of the device's `tx` notifications.
package final class SerialLinks: Sendable {
    private let gateway: Gateway
    private let policy: ReconnectPolicy
    private let log: @Sendable (String) -> Void
    private let links = Mutex<[BluetoothAddress: SerialLink]>([:])
    /// The byte counts of the links closed so far (`totals` adds the open ones').
    private let closed = Mutex(SerialLink.Counters())
    /// Opening and closing a device's link happen one after another.
    private let turns = SerialQueues<BluetoothAddress>(maxWaiting: 64, maxWait: .seconds(60))

    /// - Parameter policy: the delays between attempts to connect again, for clients that hold
    ///   through a link loss.
    package init(gateway: Gateway, policy: ReconnectPolicy = .standard, log: @escaping @Sendable (String) -> Void) {
        self.gateway = gateway
        self.policy = policy
        self.log = log
    }

    /// A client of the device's serial port, reading with `reader`; with `writer`, also its one
    /// writer (`connectionLimitReached` while another is). `profile` nil: the first known profile
    /// the device has. With `connect`, a device not connected is connected first (as for
    /// `connect=auto`: gattway disconnects it once idle, after the last client); without, it must
    /// be connected (`notConnected`).
    package func open(_ id: BluetoothAddress, profile: SerialProfile?, reader: SerialLink.Reader, writer: Bool,
                      onLinkLoss: SerialLink.LinkLoss = .close, connect: Bool = false) async throws(BLEError) -> SerialSession {
        if connect { try await gateway.autoConnections.connectIfNeeded(id) }
        return try await turns.run(id, refused: { _ in BLEError(.outOfSpace, "too many clients are opening the serial port of \(id); retry later") }) { () async throws(BLEError) -> SerialSession in
            let link: SerialLink
            if let open = self.links.withLock({ $0[id] }) {
                if let profile, profile != open.resolved.profile {
                    throw BLEError(.invalidParameters, "the serial port of \(id) is open with \(open.resolved.profile.name)"
                                   + " (rx \(open.resolved.rx.uuid), tx \(open.resolved.tx.uuid)) by another client")
                }
                link = open
            } else {
                guard try await self.gateway.central.peripheral(id).state == .connected else {
                    throw BLEError(.notConnected, "\(id) is not connected: connect it first, or ask for connect=auto")
                }
                let resolved = try SerialProfile.resolve(profile, in: try await self.gateway.central.services(id), device: id)
                link = SerialLink(device: id, resolved: resolved, gateway: self.gateway, policy: self.policy, log: self.log)
                try await link.start()
                self.links.withLock { $0[id] = link }
                self.log("\(id): serial port open (\(resolved.profile.name): rx \(AttributeSelector.format(resolved.rx.handle)),"
                         + " tx \(AttributeSelector.format(resolved.tx.handle)))")
            }
            guard let client = link.attach(reader, writer: writer, onLinkLoss: onLinkLoss) else {
                throw BLEError(.connectionLimitReached, "the serial port of \(id) has a writer already (one at a time):"
                               + " open it to read, or again when that one is done")
            }
            return SerialSession(link: link, client: client, writer: writer, links: self)
        }
    }

    /// The device's open link, if any (for `/metrics` and tests).
    package func link(_ id: BluetoothAddress) -> SerialLink? { links.withLock { $0[id] } }

    /// Links open now.
    package var openCount: Int { links.withLock { $0.count } }

    /// Bytes over every link since start, open or closed (`/metrics`).
    package var totals: SerialLink.Counters {
        let open = links.withLock { Array($0.values) }.map(\.counters)
        return open.reduce(closed.withLock { $0 }, +)
    }

    func close(_ session: SerialSession) async {
        _ = await turns.run(session.link.device) { () async in
            guard session.link.detach(session.client) else { return }
            await session.link.stop()
            let c = session.link.counters
            // Counted once: out of the open links and into the closed ones together.
            self.links.withLock { links in
                links[session.link.device] = nil
                self.closed.withLock { $0 = $0 + c }
            }
            self.log("\(session.link.device): serial port closed (\(c.received) bytes received, \(c.sent) sent,"
                     + " \(c.dropped) dropped, \(c.unwritten) not written)")
        }
        // The idle time of a device connected for the port starts now.
        _ = try? await gateway.autoConnections.using(session.link.device) {}
    }
}

/// One client of a serial port: what it writes goes to the device, in order; `close` lets go.
package final class SerialSession: Sendable {
    package let link: SerialLink
    let client: Int
    package let isWriter: Bool
    private let links: SerialLinks
    private let closed = Atomic<Bool>(false)

    init(link: SerialLink, client: Int, writer: Bool, links: SerialLinks) {
        self.link = link
        self.client = client
        self.isWriter = writer
        self.links = links
    }

    package func write(_ bytes: [UInt8], options: SerialLink.WriteOptions) async throws(BLEError) {
        try await link.write(bytes, from: client, options: options)
    }

    package func close() async {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        await links.close(self)
    }
}
