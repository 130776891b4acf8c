import BLE
import ESPHomeAPI
import GatewayCore
import Synchronization
import Threading

/// The API clients' connections to devices: a slot for each device a client connects (at most
/// `limit` in all, as an ESPHome proxy has, and no more than the adapters in use offer: see
/// `slots(configured:adapters:)`), the notifications each slot holds, and the requests
/// of one client for one device run one after the other, in the order sent (a write without
/// response, then a disconnect, then a connect must reach the device in that order).
///
/// The links are the core's: a device a client connects is connected as a REST client's is
/// (`/v1/devices` lists it), and one connected already is only taken; notifications are
/// holds that every client shares (they outlive a reconnection the core makes). A slot is
/// freed when its client disconnects the device or goes away, or when the link goes down:
/// then its holds are let go, and the device is disconnected unless another client still has a
/// slot for it or gattway keeps it connected (`autoReconnect`). Clients that subscribed are told
/// every change of the free slots.
final class Connections: Sendable {
    struct Key: Hashable, Sendable {
        let client: UInt64
        let device: BluetoothAddress
    }

    private struct Slot {
        let client: APIClient
        var connected = false
        var mtu = 0
        /// Characteristics (handles) whose notifications it holds.
        var holds: Set<UInt16> = []
    }

    private struct State {
        var slots: [Key: Slot] = [:]
        /// The slots the adapters offer now, `limit` at most.
        var offered: Int
        /// Clients that subscribed to the free slots.
        var watchers: [UInt64: APIClient] = [:]
    }

    /// How a slot ends, and what its client is told.
    private enum Ending {
        /// The client asked: told with no error.
        case asked(APIClient)
        /// The client went away: told nothing.
        case clientGone
        /// The link went down by itself (with the core's error; nil: this side ended it).
        case linkLost(BLEError?)
    }

    /// `--esphome-connections`.
    let limit: Int
    private let bluetooth: GatewayBluetooth
    private let state: Mutex<State>
    private let lanes = Lanes<Key>(maxWaiting: 64)
    private let log: @Sendable (String) -> Void

    /// A connection attempt's deadline (ESP-IDF gives up on an LE connection after about 20 s too).
    static let connectTimeout = 20.0
    /// A pairing's: aioesphomeapi's default wait for the answer is 30 s.
    static let pairTimeout = Duration.seconds(25)
    static let cccd = BluetoothUUID(uint16: 0x2902)

    init(limit: Int, bluetooth: GatewayBluetooth, log: @escaping @Sendable (String) -> Void) {
        self.limit = limit
        self.bluetooth = bluetooth
        self.log = log
        state = Mutex(State(offered: limit))
    }

    /// The slots a proxy with `configured` slots offers on these adapters: each usable one
    /// (selected and powered) its link limit, once learnt (BlueZ tells none before a refusal),
    /// else `configured`; `configured` at most. No usable adapter: none.
    static func slots(configured: Int, adapters: [AdapterInfo]) -> Int {
        min(configured, adapters.filter { $0.selected && $0.powered }.reduce(0) { $0 + ($1.connectionLimit ?? configured) })
    }

    /// The adapters changed (one added, removed, powered, a limit learnt): subscribers hear the
    /// slots it makes, when they changed.
    func adaptersChanged(_ adapters: [AdapterInfo]) {
        let offered = Self.slots(configured: limit, adapters: adapters)
        let changed = state.withLock { s in
            defer { s.offered = offered }
            return s.offered != offered
        }
        if changed {
            log("connection slots: \(offered) (adapters: \(adapters.filter { $0.selected && $0.powered }.map(\.id).joined(separator: ", ")))")
            broadcastFree()
        }
    }

    // MARK: Requests (on the server's thread: decided at once, done in the key's lane)

    func handle(_ request: BluetoothDeviceRequest, from client: APIClient) {
        let key = Key(client: client.id, device: RawAdvertisement.device(request.address))
        switch request.requestType {
        case .disconnect: disconnect(key, client)
        case .pair: inLane(key, client, refusal: BluetoothDevicePairingResponse(address: request.address, succeeded: false, error: ProxyError.busy)) {
            await self.pair(key, client)
        }
        case .unpair: inLane(key, client, refusal: BluetoothDeviceUnpairingResponse(address: request.address, succeeded: false, error: ProxyError.busy)) {
            await self.unpair(key, client)
        }
        case .clearCache: inLane(key, client, refusal: BluetoothDeviceClearCacheResponse(address: request.address, succeeded: false, error: ProxyError.busy)) {
            await self.clearCache(key, client)
        }
        // With or without the client's cache, or the old v1 request: the same for gattway, whose
        // stack keeps its own cache and resolves the services at every connection.
        default: connect(key, client)
        }
    }

    private func connect(_ key: Key, _ client: APIClient) {
        let address = RawAdvertisement.address(key.device)
        enum Decision { case answerConnected(Int), ignore, full, start }
        let decision = state.withLock { s -> Decision in
            if let slot = s.slots[key] { return slot.connected ? .answerConnected(slot.mtu) : .ignore }
            guard s.slots.count < s.offered else { return .full }
            s.slots[key] = Slot(client: client)
            return .start
        }
        switch decision {
        case .answerConnected(let mtu):
            client.send(BluetoothDeviceConnectionResponse(address: address, connected: true, mtu: UInt32(mtu)))
        case .ignore:
            break  // a connection attempt runs already: its answer comes (as ESPHome does)
        case .full:
            // As ESPHome answers when no slot is free: not connected, no error code.
            log("\(client.peer): \(key.device): no connection slot free (\(used) in use)")
            client.send(BluetoothDeviceConnectionResponse(address: address, connected: false))
        case .start:
            broadcastFree()
            if !lanes.submit(key, { await self.connectNow(key, client) }) {
                state.withLock { _ = $0.slots.removeValue(forKey: key) }
                client.send(BluetoothDeviceConnectionResponse(address: address, connected: false, error: ProxyError.busy))
                broadcastFree()
            }
        }
    }

    private func connectNow(_ key: Key, _ client: APIClient) async {
        let address = RawAdvertisement.address(key.device)
        do throws(BLEError) {
            let info = try await bluetooth.connect(key.device, timeout: Self.connectTimeout)
            let mtu = info.mtu ?? 23
            let kept = state.withLock { s -> Bool in
                guard s.slots[key] != nil else { return false }
                s.slots[key]!.connected = true
                s.slots[key]!.mtu = mtu
                return true
            }
            // Without its slot (the client went): the release waiting in the lane lets it go.
            if kept { client.send(BluetoothDeviceConnectionResponse(address: address, connected: true, mtu: UInt32(mtu))) }
        } catch {
            log("\(client.peer): \(key.device): connect failed: \(error)")
            _ = state.withLock { $0.slots.removeValue(forKey: key) }
            client.send(BluetoothDeviceConnectionResponse(address: address, connected: false, error: ProxyError.connect(error)))
            broadcastFree()
        }
    }

    private func disconnect(_ key: Key, _ client: APIClient) {
        guard state.withLock({ $0.slots[key] != nil }) else {
            client.send(BluetoothDeviceConnectionResponse(address: RawAdvertisement.address(key.device), connected: false))
            sendFree(to: client)
            return
        }
        inLane(key, client, refusal: BluetoothDeviceConnectionResponse(address: RawAdvertisement.address(key.device), connected: false,
                                                                        error: ProxyError.busy)) {
            await self.release(key, .asked(client))
        }
    }

    /// A GATT request: run in the key's lane on a connected slot; without one, ESPHome's "not
    /// connected" at once.
    func gatt(_ address: UInt64, _ handle: UInt32, from client: APIClient,
              _ work: @escaping @Sendable (BluetoothAddress) async throws(BLEError) -> [any APIMessage],
              errorFor operation: ProxyError.Operation = .read) {
        let key = Key(client: client.id, device: RawAdvertisement.device(address))
        guard state.withLock({ $0.slots[key] != nil }) else {
            client.send(BluetoothGATTErrorResponse(address: address, handle: handle, error: ProxyError.notConnected))
            return
        }
        inLane(key, client, refusal: BluetoothGATTErrorResponse(address: address, handle: handle, error: ProxyError.busy)) {
            guard self.state.withLock({ $0.slots[key]?.connected == true }) else {
                client.send(BluetoothGATTErrorResponse(address: address, handle: handle, error: ProxyError.notConnected))
                return
            }
            do throws(BLEError) {
                client.send(try await work(key.device))
            } catch {
                client.send(BluetoothGATTErrorResponse(address: address, handle: handle, error: ProxyError.gatt(error, operation)))
            }
        }
    }

    /// Notifications on or off: the slot's hold of the characteristic.
    func notify(_ request: BluetoothGATTNotifyRequest, from client: APIClient) {
        let handle = UInt16(truncatingIfNeeded: request.handle)
        gatt(request.address, request.handle, from: client) { device throws(BLEError) in
            try await self.setHold(Key(client: client.id, device: device), handle, request.enable)
            return [BluetoothGATTNotifyResponse(address: request.address, handle: request.handle)]
        }
    }

    /// A descriptor write. The Client Characteristic Configuration (2902) is the stack's to
    /// write (BlueZ's StartNotify does, and the GATT blocklist keeps clients from it): a client
    /// writing it (bleak-esphome does after every notify request, as ESPHome leaves that to it)
    /// turns the slot's hold on or off instead.
    func writeDescriptor(_ request: BluetoothGATTWriteDescriptorRequest, from client: APIClient) {
        let handle = UInt16(truncatingIfNeeded: request.handle)
        gatt(request.address, request.handle, from: client, { device throws(BLEError) in
            let services = try await self.bluetooth.services(device)
            if let c = services.flatMap(\.characteristics).first(where: { $0.descriptors.contains { $0.handle == handle && $0.uuid == Self.cccd } }) {
                let enable = (request.data.first ?? 0) & 0x03 != 0
                try await self.setHold(Key(client: client.id, device: device), c.handle, enable)
            } else {
                try await self.bluetooth.write(device, descriptor: handle, request.data)
            }
            return [BluetoothGATTWriteResponse(address: request.address, handle: request.handle)]
        }, errorFor: .write)
    }

    private func setHold(_ key: Key, _ handle: UInt16, _ on: Bool) async throws(BLEError) {
        let held = state.withLock { $0.slots[key]?.holds.contains(handle) == true }
        if on, !held {
            try await bluetooth.hold(key.device, characteristic: handle)
            let kept = state.withLock { s -> Bool in
                guard s.slots[key] != nil else { return false }
                s.slots[key]!.holds.insert(handle)
                return true
            }
            if !kept { await bluetooth.release(key.device, characteristic: handle) }
        } else if !on, held {
            state.withLock { _ = $0.slots[key]?.holds.remove(handle) }
            await bluetooth.release(key.device, characteristic: handle)
        }
    }

    private func pair(_ key: Key, _ client: APIClient) async {
        let address = RawAdvertisement.address(key.device)
        guard state.withLock({ $0.slots[key]?.connected == true }) else {
            client.send(BluetoothDevicePairingResponse(address: address, succeeded: false, error: ProxyError.notConnected))
            return
        }
        do throws(BLEError) {
            let info = try await bluetooth.pair(key.device, timeout: Self.pairTimeout)
            client.send(BluetoothDevicePairingResponse(address: address, succeeded: info.paired))
        } catch {
            log("\(client.peer): \(key.device): pairing failed: \(error)")
            client.send(BluetoothDevicePairingResponse(address: address, succeeded: false, error: ProxyError.gatt(error)))
        }
    }

    /// Forgets the bond (BlueZ disconnects the device first: the slot's client is told after
    /// this answer, by the link's end, which waits in the lane).
    private func unpair(_ key: Key, _ client: APIClient) async {
        let address = RawAdvertisement.address(key.device)
        do throws(BLEError) {
            try await bluetooth.removeBond(key.device)
            client.send(BluetoothDeviceUnpairingResponse(address: address, succeeded: true))
        } catch {
            log("\(client.peer): \(key.device): unpairing failed: \(error)")
            client.send(BluetoothDeviceUnpairingResponse(address: address, succeeded: false, error: ProxyError.gatt(error)))
        }
    }

    /// Discovers the services anew past BlueZ's cache; a connected device is connected again
    /// (the link's end and return meanwhile are not the client's business: the lane looks at the
    /// link after this answer). A paired device keeps its cache with its bond: refused.
    private func clearCache(_ key: Key, _ client: APIClient) async {
        let address = RawAdvertisement.address(key.device)
        do throws(BLEError) {
            try await bluetooth.refreshGATT(key.device)
            client.send(BluetoothDeviceClearCacheResponse(address: address, succeeded: true))
        } catch {
            log("\(client.peer): \(key.device): clearing the GATT cache failed: \(error)")
            client.send(BluetoothDeviceClearCacheResponse(address: address, succeeded: false, error: ProxyError.gatt(error)))
        }
    }

    // MARK: Slots ending

    /// The link of `device` went down (a hub event): each connected slot on it is looked at in
    /// its lane, after what its client asked before.
    func linkDown(_ device: BluetoothAddress, error: BLEError?) {
        let keys = state.withLock { $0.slots.filter { $0.key.device == device && $0.value.connected }.map(\.key) }
        for key in keys {
            lanes.submit(key) {
                // Up again meanwhile (a cache refresh, a kept device reconnected): nothing ended.
                if (try? await self.bluetooth.peripheral(device))?.state == .connected { return }
                await self.release(key, .linkLost(error))
            }
        }
    }

    /// The client went away: its slots are let go, after what it asked before.
    func clientGone(_ client: APIClient) {
        let keys = state.withLock { s in
            s.watchers[client.id] = nil
            return s.slots.keys.filter { $0.client == client.id }
        }
        for key in keys { lanes.submit(key) { await self.release(key, .clientGone) } }
    }

    /// At shutdown: every slot let go as if its client went (a link ended unless gattway keeps
    /// it), the devices side by side, each device's slots one after the other.
    func releaseAll() async {
        let keys = state.withLock { Array($0.slots.keys) }
        await withTaskGroup(of: Void.self) { group in
            for (_, slots) in Dictionary(grouping: keys, by: \.device) {
                group.addTask { for key in slots { await self.release(key, .clientGone) } }
            }
        }
    }

    /// Frees the slot: its holds let go, the link ended unless someone else has it, its client told.
    private func release(_ key: Key, _ ending: Ending) async {
        let address = RawAdvertisement.address(key.device)
        guard let slot = state.withLock({ $0.slots.removeValue(forKey: key) }) else {
            // Gone meanwhile (the link went down first): the answer the client waits for all the same.
            if case .asked(let client) = ending { client.send(BluetoothDeviceConnectionResponse(address: address, connected: false)) }
            return
        }
        for handle in slot.holds { await bluetooth.release(key.device, characteristic: handle) }
        switch ending {
        case .linkLost(let error):
            slot.client.send(BluetoothDeviceConnectionResponse(address: address, connected: false, error: ProxyError.linkLost(error)))
        case .asked, .clientGone:
            let shared = state.withLock { s in s.slots.keys.contains { $0.device == key.device } }
            if !shared, let info = try? await bluetooth.peripheral(key.device), info.state != .disconnected, info.reconnect == nil {
                do throws(BLEError) {
                    try await bluetooth.disconnect(key.device)
                } catch {
                    log("\(slot.client.peer): \(key.device): disconnect failed: \(error)")
                }
            }
            if case .asked = ending { slot.client.send(BluetoothDeviceConnectionResponse(address: address, connected: false)) }
        }
        broadcastFree()
    }

    // MARK: Notifications (the hub's thread)

    /// A notification: to each slot that holds the characteristic.
    func notified(_ update: ValueUpdate) {
        let clients = state.withLock { s in
            s.slots.filter { $0.key.device == update.device && $0.value.holds.contains(update.characteristicHandle) }.map(\.value.client)
        }
        guard !clients.isEmpty else { return }
        let message = BluetoothGATTNotifyDataResponse(address: RawAdvertisement.address(update.device),
                                                      handle: UInt32(update.characteristicHandle), data: update.value)
        for client in clients { client.send(message) }
    }

    // MARK: Free slots

    func subscribeFree(_ client: APIClient) {
        state.withLock { $0.watchers[client.id] = client }
        sendFree(to: client)
    }

    private func freeMessage() -> BluetoothConnectionsFreeResponse {
        let (allocated, offered) = state.withLock { s in (s.slots.keys.map { RawAdvertisement.address($0.device) }, s.offered) }
        return BluetoothConnectionsFreeResponse(free: UInt32(max(0, offered - allocated.count)), limit: UInt32(offered),
                                                allocated: allocated.sorted())
    }

    private func sendFree(to client: APIClient) { client.send(freeMessage()) }

    private func broadcastFree() {
        let message = freeMessage()
        for client in state.withLock({ Array($0.watchers.values) }) { client.send(message) }
    }

    /// Slots in use (tests, logs).
    var used: Int { state.withLock { $0.slots.count } }

    /// `work` in the key's lane, or `refusal` at once when too many wait there.
    private func inLane(_ key: Key, _ client: APIClient, refusal: some APIMessage, _ work: @escaping @Sendable () async -> Void) {
        if !lanes.submit(key, work) {
            log("\(client.peer): \(key.device): \(lanes.maxWaiting) requests wait already; refused")
            client.send(refusal)
        }
    }
}
