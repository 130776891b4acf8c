import BLE
import Synchronization
import Threading

/// A peripheral side that takes every definition, numbers services and advertisements as BlueZ's
/// side does (from 1), gives handles from 0x0010 on, and lets a test play a central: `request`
/// goes through the gateway's request handler as a central's read or write would.
package final class FakePeripheralManager: PeripheralManager {
    package init(supportedInstances: Int = 2) { self.supportedInstances = supportedInstances }
    private let supportedInstances: Int
    package let events = HandlerSlot<PeripheralEvent>()
    private let handler = Mutex<(@Sendable (PeripheralRequest) async -> PeripheralResponse)?>(nil)
    private let state = Mutex<(services: [RegisteredService], adverts: [RegisteredAdvertisement], next: Int, updates: [(LocalAttribute, [UInt8])])>(([], [], 0, []))
    /// Characteristics a central subscribed to.
    package let subscribed = Mutex<Set<LocalAttribute>>([])

    package func setEventHandler(_ handler: @escaping @Sendable (PeripheralEvent) -> Void) { events.set(handler) }
    package func setRequestHandler(_ handler: @escaping @Sendable (PeripheralRequest) async -> PeripheralResponse) {
        self.handler.withLock { $0 = handler }
    }
    package func status() async -> PeripheralStatus {
        PeripheralStatus(state: .poweredOn, instances: ["hci0": .init(supported: supportedInstances, active: state.withLock { $0.adverts.count })])
    }
    package func add(_ service: LocalService) async throws(BLEError) -> RegisteredService {
        state.withLock { s in
            s.next += 1
            let base = UInt16(0x10 * s.next)
            let r = RegisteredService(id: s.next, adapter: service.adapter ?? "hci0", service: service, handle: base,
                                      characteristicHandles: service.characteristics.indices.map { base + 2 + UInt16($0) * 3 }, registered: true)
            s.services.append(r)
            return r
        }
    }
    package func remove(service id: Int) async throws(BLEError) {
        try state.withLock { s throws(BLEError) in
            guard s.services.contains(where: { $0.id == id }) else { throw BLEError(.invalidHandle, "no service \(id)") }
            s.services.removeAll { $0.id == id }
        }
    }
    package func services() async -> [RegisteredService] { state.withLock { $0.services } }
    package func startAdvertising(_ advertisement: AdvertisementDefinition) async throws(BLEError) -> RegisteredAdvertisement {
        try state.withLock { s throws(BLEError) in
            guard s.adverts.count < supportedInstances else {
                throw BLEError(.outOfSpace, "hci0 sends at most \(supportedInstances) advertisements at once")
            }
            s.next += 1
            let r = RegisteredAdvertisement(id: s.next, adapter: advertisement.adapter ?? "hci0", definition: advertisement, registered: true)
            s.adverts.append(r)
            return r
        }
    }
    package func stopAdvertising(_ id: Int) async throws(BLEError) { state.withLock { $0.adverts.removeAll { $0.id == id } } }
    package func advertisements() async -> [RegisteredAdvertisement] { state.withLock { $0.adverts } }
    package func updateValue(_ value: [UInt8], for characteristic: LocalAttribute) async throws(BLEError) -> Bool {
        state.withLock { $0.updates.append((characteristic, value)) }
        return subscribed.withLock { $0.contains(characteristic) }
    }

    /// What `updateValue` was given, in order.
    package var updates: [(LocalAttribute, [UInt8])] { state.withLock { $0.updates } }

    /// A central's read or write, as the stack hands it over.
    package func request(_ request: PeripheralRequest) async -> PeripheralResponse {
        guard let handler = handler.withLock({ $0 }) else { return .error(.unlikelyError) }
        return await handler(request)
    }
}
