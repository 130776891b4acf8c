import BLE
import GatewayCore

/// Bluetooth as the gateway's core offers it to this door, in one place: the central as clients may use it (the
/// GATT blocklist applied), the advertisements it reports, the event hub, notification holds,
/// and connections as every door makes them. A device Home Assistant connects is one the REST
/// API lists as connected, and the other way round.
struct GatewayBluetooth: Sendable {
    let gateway: Gateway

    /// The address of the adapter gattway uses, nil while there is none.
    func adapterAddress() async -> MACAddress? {
        guard let address = await adapters().first(where: \.selected)?.address else { return nil }
        return MACAddress(bytes: address.bytes)
    }

    /// The adapters BlueZ has (none while it is away).
    func adapters() async -> [AdapterInfo] { (try? await gateway.central.adapters()) ?? [] }

    // MARK: Advertisements: the watch's (and the scan's), every one as it comes

    /// `hear` gets every advertisement the central reports, on its thread, until `stopListening`.
    func listen(_ hear: @escaping @Sendable (PeripheralInfo) -> Void) -> Int { gateway.advertisements.add(hear) }
    func stopListening(_ id: Int) { gateway.advertisements.remove(id) }

    func watchStatus() async -> WatchStatus { await gateway.central.watchStatus() }
    /// Starts the watch on every device, scanning actively or passively (not recorded for the
    /// next start: clients subscribe again).
    func watchEverything(active: Bool) async throws(BLEError) -> WatchStatus {
        try await gateway.central.startWatch(WatchOptions(active: active))
    }
    func stopWatch() async throws(BLEError) { _ = try await gateway.central.stopWatch() }

    // MARK: Events: notifications, links, the adapter's state

    /// A hub client that hands each event of these types to `deliver`, on the hub's thread.
    func follow(_ types: [EventType], _ deliver: @escaping @Sendable (HubEvent) -> Void) -> StreamClient {
        let hub = gateway.hub
        let client = StreamClient(id: hub.newClientID(), transport: .sink(EventSink { event, _, _ in
            if let event { deliver(event) }  // nil: a `dropped` notice (the hub counts those)
        }), counters: hub.counters)
        client.select(Selection(types: EventTypes(rawValue: types.reduce(0) { $0 | EventTypes($1).rawValue })), as: "")
        hub.add(client)
        return client
    }

    func unfollow(_ client: StreamClient) {
        client.close()
        gateway.hub.remove(client)
    }

    // MARK: Devices

    func peripheral(_ id: BluetoothAddress) async throws(BLEError) -> PeripheralInfo { try await gateway.central.peripheral(id) }

    /// A client's connect, never kept connected by gattway (the API's clients connect again themselves).
    func connect(_ id: BluetoothAddress, timeout: Double) async throws(BLEError) -> PeripheralInfo {
        try await gateway.connectPeripheral(id, timeout: timeout, autoReconnect: false)
    }

    func disconnect(_ id: BluetoothAddress) async throws(BLEError) { _ = try await gateway.disconnect(id) }

    func services(_ id: BluetoothAddress) async throws(BLEError) -> [GATTService] { try await gateway.central.services(id) }

    /// Reads through the value cache (so that the read's value event is known as such).
    func read(_ id: BluetoothAddress, characteristic handle: UInt16) async throws(BLEError) -> [UInt8] {
        try await gateway.readNow(id, .characteristic(.handle(handle)), offset: 0).value
    }

    func read(_ id: BluetoothAddress, descriptor handle: UInt16) async throws(BLEError) -> [UInt8] {
        try await gateway.readNow(id, .descriptor(.handle(handle)), offset: 0).value
    }

    /// One write: a value longer than a write without response can carry is refused, not cut up.
    func write(_ id: BluetoothAddress, characteristic handle: UInt16, _ value: [UInt8], withResponse: Bool) async throws(BLEError) {
        _ = try await gateway.central.writeValue(id, .handle(handle), value, type: withResponse ? .withResponse : .withoutResponse,
                                                 fragment: false)
    }

    func write(_ id: BluetoothAddress, descriptor handle: UInt16, _ value: [UInt8]) async throws(BLEError) {
        _ = try await gateway.central.writeDescriptor(id, .handle(handle), value)
    }

    /// Notifications through the holds every client shares: the first starts them, the last stops them.
    func hold(_ id: BluetoothAddress, characteristic handle: UInt16) async throws(BLEError) {
        try await gateway.holds.acquire(.init(device: id, characteristic: handle))
    }

    func release(_ id: BluetoothAddress, characteristic handle: UInt16) async {
        await gateway.holds.release(.init(device: id, characteristic: handle))
    }

    func pair(_ id: BluetoothAddress, timeout: Duration) async throws(BLEError) -> PeripheralInfo {
        try await gateway.central.pair(id, answer: nil, timeout: timeout)
    }

    func removeBond(_ id: BluetoothAddress) async throws(BLEError) { try await gateway.central.removeBond(id) }

    /// The device's services found anew; a bonded device keeps its bond (and so its cache: refused).
    func refreshGATT(_ id: BluetoothAddress) async throws(BLEError) { _ = try await gateway.central.refreshGATT(id, dropBond: false) }
}
