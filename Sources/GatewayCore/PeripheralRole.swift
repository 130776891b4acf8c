import BLE
import Synchronization

/// The peripheral role (`CBPeripheralManager`) over the stack's `PeripheralManager`: the services
/// and advertisements clients defined, the values centrals read, the claims of stream clients
/// that answer requests themselves, and the events. It knows no door.
///
/// A central's read gets the stored value and a write stores its value (a `peripheralRead` or
/// `peripheralWrite` event tells it), unless a client claimed the characteristic: then the
/// request goes to that client as an event with a `request` id, and its `respond` answers the
/// central, within `answerDeadline` (after which the central gets `unlikelyError`).
package final class PeripheralRole: Sendable {
    /// A claiming client's time to answer (the stack's own deadline is longer): 4 s unless a
    /// test says otherwise.
    package let answerDeadline: Duration

    package let manager: any PeripheralManager
    private let hub: EventHub
    private let blocklist: Blocklist
    private let restoration: Restoration
    private let log: @Sendable (String) -> Void

    private struct Pending {
        let owner: Int
        let read: Bool
        let notice: PeripheralNotice
        let continuation: CheckedContinuation<PeripheralResponse, Never>
        let timer: Task<Void, Never>
    }

    private struct State {
        var services: [Int: RegisteredService] = [:]
        var definitions: [Int: ServiceDefinition] = [:]
        var advertisements: [Int: RegisteredAdvertisement] = [:]
        var advertisementRequests: [Int: AdvertisementRequest] = [:]
        var values: [LocalAttribute: [UInt8]] = [:]
        /// By characteristic: the client (its owner number) that answers its requests.
        var claims: [LocalAttribute: Int] = [:]
        var pending: [String: Pending] = [:]
        var requests = 0
        var owners = 0
        /// Connected centrals and the adapter each is connected to.
        var centrals: [BluetoothAddress: String] = [:]
        var subscribed: Set<LocalAttribute> = []
        /// Services and advertisements to define again once the stack can (kept, not taken yet).
        var waiting: (services: [ServiceDefinition], advertisements: [AdvertisementRequest]) = ([], [])
        /// `defineWaiting` runs (one at a time: two would define a service twice).
        var defining = false
    }

    private let state = Mutex(State())

    package init(manager: any PeripheralManager, hub: EventHub, blocklist: Blocklist, restoration: Restoration,
                 answerDeadline: Duration = .seconds(4), log: @escaping @Sendable (String) -> Void) {
        self.manager = manager
        self.answerDeadline = answerDeadline
        self.hub = hub
        self.blocklist = blocklist
        self.restoration = restoration
        self.log = log
        manager.setEventHandler { [weak self] event in self?.noted(event) }
        manager.setRequestHandler { [weak self] request in await self?.answer(request) ?? .error(.unlikelyError) }
    }

    // MARK: - Services

    package func addService(_ definition: ServiceDefinition) async throws(BLEError) -> RegisteredService {
        let local = try definition.local(blocklist: blocklist)
        try checkUnique(local)
        let registered = try await manager.add(local)
        state.withLock { s in
            s.services[registered.id] = registered
            s.definitions[registered.id] = definition
            if let kept = s.waiting.services.firstIndex(of: definition) { s.waiting.services.remove(at: kept) }
            for (i, c) in local.characteristics.enumerated() {
                s.values[LocalAttribute(service: registered.id, characteristic: i)] = c.value
                for (j, d) in c.descriptors.enumerated() {
                    s.values[LocalAttribute(service: registered.id, characteristic: i, descriptor: j)] = d.value
                }
            }
        }
        keep()
        return registered
    }

    /// The API names a local characteristic by its UUID: each is served once.
    private func checkUnique(_ service: LocalService) throws(BLEError) {
        let served = state.withLock { s in s.services.values.map { ($0.adapter, $0.service) } }
        // Without an adapter the stack picks one: any adapter's copy is a twin then.
        if served.contains(where: { $0.1.uuid == service.uuid && (service.adapter == nil || service.adapter == $0.0) }) {
            throw BLEError(.invalidParameters, "uuid: service \(service.uuid.uuidString) is served already; remove it first")
        }
        let taken = Set(served.flatMap { $0.1.characteristics.map(\.uuid) })
        if let twice = service.characteristics.first(where: { taken.contains($0.uuid) }) {
            throw BLEError(.invalidParameters, "characteristic \(twice.uuid.uuidString) is served already by another service; the API"
                           + " names local characteristics by UUID, so each is served once")
        }
    }

    /// Stops serving a service, by its id (`service(_:)` finds it).
    package func removeService(id: Int) async throws(BLEError) {
        try await manager.remove(service: id)
        state.withLock { s in
            s.services[id] = nil
            s.definitions[id] = nil
            s.values = s.values.filter { $0.key.service != id }
            s.claims = s.claims.filter { $0.key.service != id }
            s.subscribed = s.subscribed.filter { $0.service != id }
        }
        keep()
    }

    /// A service by its UUID or its id (a served UUID first: "1812" is that service, not id 1812).
    package func service(_ selector: String) throws(BLEError) -> RegisteredService {
        let uuid = BluetoothUUID(selector)
        let found = state.withLock { s in
            s.services.values.first { $0.service.uuid == uuid } ?? Int(selector).flatMap { s.services[$0] }
        }
        guard let found else { throw BLEError(.invalidHandle, "no local service \"\(selector)\"; the peripheral role lists what it serves") }
        return found
    }

    /// A local characteristic by its UUID, or by the handle BlueZ gave it.
    package func characteristic(_ selector: String) throws(BLEError) -> (LocalAttribute, RegisteredService) {
        let target = try Parse.selector(selector)
        let found = state.withLock { s -> (LocalAttribute, RegisteredService)? in
            for service in s.services.values.sorted(by: { $0.id < $1.id }) {
                for (i, c) in service.service.characteristics.enumerated() {
                    let match = switch target {
                    case .uuid(let u): c.uuid == u
                    case .handle(let h): service.characteristicHandles[i] == h
                    }
                    if match { return (LocalAttribute(service: service.id, characteristic: i), service) }
                }
            }
            return nil
        }
        guard let found else { throw BLEError(.invalidHandle, "no local characteristic \"\(selector)\"; the peripheral role lists what it serves") }
        return found
    }

    // MARK: - Values

    /// Sets a characteristic's value (what reads answer) and sends it to the centrals that
    /// subscribed; whether any had.
    package func setValue(_ value: [UInt8], for selector: String) async throws(BLEError)
        -> (LocalAttribute, RegisteredService, sent: Bool) {
        guard value.count <= ServiceDefinition.maximumValueLength else {
            throw BLEError(.invalidParameters, "value: \(value.count) bytes; an attribute holds at most \(ServiceDefinition.maximumValueLength)")
        }
        let (attribute, service) = try characteristic(selector)
        let before = state.withLock { $0.values.updateValue(value, forKey: attribute) }
        let props = service.service.characteristics[attribute.characteristic].properties
        guard !props.isDisjoint(with: [.notify, .indicate]) else { return (attribute, service, false) }
        do {
            return (attribute, service, try await manager.updateValue(value, for: attribute))
        } catch {
            // Not sent: the client is told, and reads answer what they did.
            state.withLock { $0.values[attribute] = before }
            throw error
        }
    }

    package func value(_ attribute: LocalAttribute) -> [UInt8] { state.withLock { $0.values[attribute] ?? [] } }

    // MARK: - Advertisements

    package func startAdvertising(_ request: AdvertisementRequest) async throws(BLEError) -> RegisteredAdvertisement {
        let registered = try await manager.startAdvertising(try request.definition())
        state.withLock { s in
            s.advertisements[registered.id] = registered
            s.advertisementRequests[registered.id] = request
            if let kept = s.waiting.advertisements.firstIndex(of: request) { s.waiting.advertisements.remove(at: kept) }
        }
        keep()
        return registered
    }

    package func stopAdvertising(_ selector: String) async throws(BLEError) {
        guard let id = Int(selector), state.withLock({ $0.advertisements[id] != nil }) else {
            throw BLEError(.invalidHandle, "no advertisement \"\(selector)\"; the peripheral role lists what it serves")
        }
        try await manager.stopAdvertising(id)
        state.withLock { s in
            s.advertisements[id] = nil
            s.advertisementRequests[id] = nil
        }
        keep()
    }

    // MARK: - Claims

    /// A number for a client that may claim characteristics (one per stream).
    package func newOwner() -> Int { state.withLock { s in s.owners += 1; return s.owners } }

    package func claim(_ selector: String, owner: Int) throws(BLEError) -> (LocalAttribute, RegisteredService) {
        let (attribute, service) = try characteristic(selector)
        try state.withLock { s throws(BLEError) in
            if let other = s.claims[attribute] {
                throw BLEError(.invalidParameters, other == owner ? "characteristic \(selector) is claimed by this socket already"
                               : "characteristic \(selector) is claimed by another client; it answers its requests")
            }
            s.claims[attribute] = owner
        }
        return (attribute, service)
    }

    /// Ends claims (one, or all of `owner`'s: its stream closed); requests it had not answered
    /// get `unlikelyError` now rather than at their deadline.
    package func unclaim(owner: Int, _ attribute: LocalAttribute? = nil) {
        let orphans = state.withLock { s -> [Pending] in
            s.claims = s.claims.filter { $0.value != owner || (attribute != nil && $0.key != attribute) }
            guard attribute == nil else { return [] }
            let mine = s.pending.filter { $0.value.owner == owner }
            for id in mine.keys { s.pending[id] = nil }
            return Array(mine.values)
        }
        for p in orphans {
            p.timer.cancel()
            p.continuation.resume(returning: .error(.unlikelyError))
        }
    }

    /// Requests waiting for a claiming client's answer.
    package var waitingRequests: Int { state.withLock { $0.pending.count } }

    /// A claiming client's answer to request `id`.
    package func respond(_ id: String, owner: Int, with response: PeripheralResponse) throws(BLEError) {
        let pending = try state.withLock { s throws(BLEError) -> Pending in
            guard let p = s.pending[id] else {
                throw BLEError(.connectionTimeout, "request \(id) is not waiting for an answer: answered already, or past its"
                               + " \(answerDeadline.inSeconds) s deadline (the central got unlikelyError then)")
            }
            guard p.owner == owner else { throw BLEError(.invalidParameters, "request \(id) was sent to another client") }
            switch response {
            case .value where !p.read: throw BLEError(.invalidParameters, "request \(id) is a write: answer it without a value (or with an error)")
            case .done where p.read: throw BLEError(.invalidParameters, "request \(id) is a read: answer it with a value (or an error)")
            default: break
            }
            s.pending[id] = nil
            return p
        }
        pending.timer.cancel()
        pending.continuation.resume(returning: response)
    }

    // MARK: - Requests

    /// Every read and write of a central (the stack's request handler).
    func answer(_ request: PeripheralRequest) async -> PeripheralResponse {
        let characteristicOf = LocalAttribute(service: request.attribute.service, characteristic: request.attribute.characteristic)
        let (owner, stored, described) = state.withLock { s in
            (request.attribute.descriptor == nil ? s.claims[characteristicOf] : nil, s.values[request.attribute] ?? [],
             Self.describe(request.attribute, in: s.services))
        }
        guard let described else { return .error(.attributeNotFound) }
        var notice = PeripheralNotice(.read, central: request.central, adapter: described.adapter, attribute: described.attribute,
                                      offset: request.offset)
        if case .write(let bytes, let withResponse) = request.kind {
            (notice.kind, notice.value, notice.withResponse) = (.write, bytes, withResponse)
        }
        if let owner {
            if case .write(_, false) = request.kind {
                hub.publish(.peripheral(notice))  // nothing to answer: the client is told
                return .done
            }
            return await forward(notice, to: owner)
        }
        switch request.kind {
        case .read:
            guard request.offset <= stored.count else { return refuse(notice, .invalidOffset) }
            notice.value = Array(stored[request.offset...])
            hub.publish(.peripheral(notice))
            return .value(notice.value!)
        case .write(let bytes, _):
            guard request.offset <= stored.count else { return refuse(notice, .invalidOffset) }
            let value = Array(stored.prefix(request.offset)) + bytes
            guard value.count <= ServiceDefinition.maximumValueLength else { return refuse(notice, .invalidAttributeValueLength) }
            state.withLock { $0.values[request.attribute] = value }
            hub.publish(.peripheral(notice))
            return .done
        }
    }

    private func refuse(_ notice: PeripheralNotice, _ code: ATTErrorCode) -> PeripheralResponse {
        var notice = notice
        notice.error = BLEError(att: code, "answered \(code.name)")
        hub.publish(.peripheral(notice))
        return .error(code)
    }

    /// Hands a request to the client that claimed it, and waits for its answer or the deadline.
    private func forward(_ notice: PeripheralNotice, to owner: Int) async -> PeripheralResponse {
        await withCheckedContinuation { continuation in
            let sent = state.withLock { s -> PeripheralNotice in
                s.requests += 1
                let id = "r\(s.requests)"
                let deadline = answerDeadline
                let timer = Task { [weak self] in
                    try? await Task.sleep(for: deadline)
                    guard !Task.isCancelled else { return }
                    self?.expire(id)
                }
                var notice = notice
                notice.request = id
                s.pending[id] = Pending(owner: owner, read: notice.kind == .read, notice: notice, continuation: continuation, timer: timer)
                return notice
            }
            hub.publish(.peripheral(sent))
        }
    }

    private func expire(_ id: String) {
        guard let p = state.withLock({ $0.pending.removeValue(forKey: id) }) else { return }
        log("peripheral: request \(id) not answered within \(answerDeadline.inSeconds) s: the central gets unlikelyError")
        p.continuation.resume(returning: .error(.unlikelyError))
        // The claiming client hears it as the same request, with its error.
        var notice = p.notice
        notice.error = BLEError(.connectionTimeout, "request \(id) was not answered within \(answerDeadline.inSeconds) s; the central got unlikelyError")
        hub.publish(.peripheral(notice))
    }

    private static func describe(_ a: LocalAttribute, in services: [Int: RegisteredService]) -> (adapter: String, attribute: PeripheralNotice.Attribute)? {
        guard let s = services[a.service], s.service.characteristics.indices.contains(a.characteristic) else { return nil }
        let c = s.service.characteristics[a.characteristic]
        let descriptor = a.descriptor.flatMap { c.descriptors.indices.contains($0) ? c.descriptors[$0].uuid : nil }
        return (s.adapter, .init(service: s.id, serviceUUID: s.service.uuid, characteristic: c.uuid,
                                 handle: s.characteristicHandles[a.characteristic], descriptor: descriptor))
    }

    // MARK: - What clients see

    /// `GET /v1/peripheral`: everything the role holds, in id order.
    package struct Snapshot: Sendable {
        package var status: PeripheralStatus
        package var services: [RegisteredService]
        package var advertisements: [(RegisteredAdvertisement, AdvertisementRequest)]
        package var values: [LocalAttribute: [UInt8]]
        package var claimed: Set<LocalAttribute>
        package var subscribed: Set<LocalAttribute>
        package var centrals: [(BluetoothAddress, String)]
    }

    package func snapshot() async -> Snapshot {
        let status = await manager.status()
        return state.withLock { s in
            Snapshot(status: status, services: s.services.values.sorted { $0.id < $1.id },
                     advertisements: s.advertisements.values.sorted { $0.id < $1.id }.compactMap { a in
                         s.advertisementRequests[a.id].map { (a, $0) }
                     },
                     values: s.values, claimed: Set(s.claims.keys), subscribed: s.subscribed,
                     centrals: s.centrals.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
        }
    }

    // MARK: - The stack's events

    private func noted(_ event: PeripheralEvent) {
        switch event {
        case .state(let status):
            if status.state == .poweredOn { Task { await self.defineWaiting() } }
        case .service(let registered):
            state.withLock { s in if s.services[registered.id] != nil { s.services[registered.id] = registered } }
        case .advertisement(let registered):
            state.withLock { s in if s.advertisements[registered.id] != nil { s.advertisements[registered.id] = registered } }
        case .central(let address, let adapter, let connected):
            state.withLock { s in s.centrals[address] = connected ? adapter : nil }
            hub.publish(.peripheral(PeripheralNotice(connected ? .centralConnected : .centralDisconnected, central: address, adapter: adapter)))
        case .subscription(let attribute, let central, let subscribed):
            let described = state.withLock { s in
                if subscribed { s.subscribed.insert(attribute) } else { s.subscribed.remove(attribute) }
                return Self.describe(attribute, in: s.services)
            }
            hub.publish(.peripheral(PeripheralNotice(subscribed ? .subscribed : .unsubscribed, central: central,
                                                     adapter: described?.adapter, attribute: described?.attribute)))
        case .confirmed(let attribute, let central):
            let described = state.withLock { Self.describe(attribute, in: $0.services) }
            hub.publish(.peripheral(PeripheralNotice(.indicationConfirmed, central: central, adapter: described?.adapter,
                                                     attribute: described?.attribute)))
        }
    }

    // MARK: - What lasts

    /// The state file keeps the definitions, in the order they were made.
    private func keep() {
        let (services, advertisements) = state.withLock { s in
            (s.definitions.sorted { $0.key < $1.key }.map(\.value) + s.waiting.services,
             s.advertisementRequests.sorted { $0.key < $1.key }.map(\.value) + s.waiting.advertisements)
        }
        restoration.peripheral(services: services, advertisements: advertisements)
    }

    /// Defines what the state file kept (at start); what the stack cannot take yet (Bluetooth
    /// off) is defined again when it becomes usable.
    package func restore() async {
        let kept = restoration.keptPeripheral
        guard !kept.services.isEmpty || !kept.advertisements.isEmpty else { return }
        state.withLock { $0.waiting = (kept.services, kept.advertisements) }
        await defineWaiting()
    }

    /// Defines what waits; what the stack refuses for good (a definition it calls invalid) is
    /// dropped, the rest waits for Bluetooth to become usable again.
    private func defineWaiting() async {
        guard let waiting = state.withLock({ s -> (services: [ServiceDefinition], advertisements: [AdvertisementRequest])? in
            guard !s.defining, !s.waiting.services.isEmpty || !s.waiting.advertisements.isEmpty else { return nil }
            s.defining = true
            return s.waiting
        }) else { return }
        defer { state.withLock { $0.defining = false } }
        for definition in waiting.services {
            do { _ = try await addService(definition) } catch {
                log("peripheral: kept service \(definition.uuid) not served: \(error.message)")
                if error.code == .cb(.invalidParameters) || error.code == .cb(.uuidNotAllowed) {
                    state.withLock { s in s.waiting.services.removeAll { $0 == definition } }
                    keep()
                }
            }
        }
        for request in waiting.advertisements {
            do { _ = try await startAdvertising(request) } catch {
                log("peripheral: kept advertisement not started: \(error.message)")
                if error.code == .cb(.invalidParameters) {
                    state.withLock { s in s.waiting.advertisements.removeAll { $0 == request } }
                    keep()
                }
            }
        }
    }
}
