import BLE
import ESPHomeAPI
import GatewayCore
import Glibc
import Synchronization
import Threading

/// The ESPHome-API door: gattway as a Bluetooth proxy of Home Assistant (`--esphome-api`).
///
/// Besides the conversation every ESPHome device holds (hello, login without a password, device
/// info with the proxy's features and its adapter's address, an empty entity list, ping,
/// disconnect, time; subscriptions to states, logs and Home Assistant's services and states are
/// taken and nothing is sent on them), it answers the Bluetooth proxy's requests over the core:
/// advertisements (`ProxyScanner`, `Advertiser`), connections, GATT, pairing and the cache
/// (`Connections`). Notifications, links going down and the adapter's state come from the event
/// hub.
public final class ESPHomeProxy: Sendable {
    /// The port it listens on.
    public let port: UInt16
    private let server: APIServer
    private let door: Door

    /// Looks up the adapter's address (the Noise hello carries it), then listens.
    /// - Parameter connections: the connection slots the API's clients share (ESPHome's default is 3).
    public init(_ configuration: APIServer.Configuration, name: String, version: String, gateway: Gateway, connections: Int = 3,
                log: @escaping @Sendable (String) -> Void) async throws(APIServerError) {
        let identity = ProxyIdentity(name: name, version: version, encrypted: configuration.key != nil)
        let bluetooth = GatewayBluetooth(gateway: gateway)
        let door = Door(identity: identity, bluetooth: bluetooth, connections: connections, log: log)
        let adapter = await bluetooth.adapterAddress()
        do {
            server = try APIServer(configuration, identity: door.serverIdentity(adapter), handler: door, log: log)
        } catch {
            door.stop()
            throw error
        }
        port = server.port
        self.door = door
        door.attach(server, adapter: adapter)
    }

    /// What the proxy announces over mDNS (ServiceAnnouncer's service): the node name, the
    /// service type, the port and the TXT records, with the adapter's address as it is now.
    /// - Parameter network: "wifi" or "ethernet", what the host is on.
    public func announcement(network: String) async -> (name: String, type: String, port: UInt16, txt: [String]) {
        let adapter = await door.bluetooth.adapterAddress()
        return (door.identity.name, ProxyIdentity.serviceType, port, door.identity.announcement(adapter: adapter, network: network))
    }

    /// `handler` runs when the adapter's address (the announced MAC) changes: announce again.
    public func onAdapterChange(_ handler: @escaping @Sendable () -> Void) {
        door.adapterChanged.set { _ in handler() }
    }

    /// Tells each client that gattway is going, then closes; the devices its clients had
    /// connected are disconnected, as when a client goes (those gattway keeps stay).
    public func stop() async {
        server.stop()
        door.stop()
        await door.connections.releaseAll()
    }
}

/// The door's answers, on the server's thread; what needs the radio runs in `Connections`'
/// lanes or `ProxyScanner`'s, and device info on a task of its own (the adapter is looked up).
final class Door: APIHandler {
    let identity: ProxyIdentity
    let bluetooth: GatewayBluetooth
    let log: @Sendable (String) -> Void
    let connections: Connections
    let scanner: ProxyScanner
    /// The server, once made, and the adapter address its Noise hello says.
    private let server = Mutex<(server: APIServer?, adapter: MACAddress?)>((nil, nil))
    /// Each client's API version, from its hello (what UUIDs it reads).
    private let versions = Mutex<[UInt64: (major: UInt32, minor: UInt32)]>([:])
    private let follower: StreamClient
    /// Told when the adapter's address changes.
    let adapterChanged = HandlerSlot<Void>()

    init(identity: ProxyIdentity, bluetooth: GatewayBluetooth, connections: Int, log: @escaping @Sendable (String) -> Void) {
        self.identity = identity
        self.bluetooth = bluetooth
        self.log = log
        let connections = Connections(limit: connections, bluetooth: bluetooth, log: log)
        let scanner = ProxyScanner(bluetooth: bluetooth, log: log)
        self.connections = connections
        self.scanner = scanner
        follower = bluetooth.follow([.notification, .connection, .state, .adapter]) { event in
            switch event.event {
            // Notifications only: a read's value comes as its answer (ESPHome tells them apart).
            case .central(.value(let update)) where !event.readResult: connections.notified(update)
            case .central(.connection(let id, .disconnected, let error)): connections.linkDown(id, error: error)
            case .central(.state): scanner.refresh()
            case .central(.adapter): Task { await connections.adaptersChanged(bluetooth.adapters()) }
            default: break
            }
        }
        Task { await connections.adaptersChanged(bluetooth.adapters()) }
    }

    func stop() {
        bluetooth.unfollow(follower)
        scanner.stop()
    }

    func serverIdentity(_ adapter: MACAddress?) -> APIServer.Identity {
        APIServer.Identity(name: identity.name, macAddress: adapter?.compact ?? "")
    }

    func attach(_ server: APIServer, adapter: MACAddress?) {
        self.server.withLock { $0 = (server, adapter) }
    }

    /// An adapter address found after the start (bluetoothd came later, an adapter was plugged
    /// in): the next Noise hellos say it, as device info does.
    private func noteAdapter(_ adapter: MACAddress?) {
        guard let adapter else { return }
        let changed = server.withLock { state -> APIServer? in
            guard state.adapter != adapter else { return nil }
            state.adapter = adapter
            return state.server
        }
        guard let changed else { return }
        changed.setIdentity(serverIdentity(adapter))
        adapterChanged(())
    }

    /// 16- and 32-bit UUIDs go in `short_uuid` to clients of API 1.12 and later.
    private func readsShortUUIDs(_ client: APIClient) -> Bool {
        guard let version = versions.withLock({ $0[client.id] }) else { return false }
        return version.major > 1 || (version.major == 1 && version.minor >= 12)
    }

    func received(_ message: ClientMessage, from client: APIClient) {
        switch message {
        case .hello(let hello):
            log("\(client.peer): hello from \(hello.clientInfo.isEmpty ? "a client" : hello.clientInfo) (API \(hello.apiVersionMajor).\(hello.apiVersionMinor))")
            versions.withLock { $0[client.id] = (hello.apiVersionMajor, hello.apiVersionMinor) }
            client.send(identity.hello())
        case .authentication:
            // No password: whatever it says is right (as ESPHome without a password answered).
            client.send(AuthenticationResponse(invalidPassword: false))
        case .disconnect:
            client.send(DisconnectResponse())
            client.close(reason: "disconnected")
        case .ping:
            client.send(PingResponse())
        case .deviceInfo:
            Task {
                let adapter = await bluetooth.adapterAddress()
                noteAdapter(adapter)
                client.send(identity.deviceInfo(adapter: adapter))
            }
        case .listEntities:
            client.send(ListEntitiesDoneResponse())
        case .getTime:
            client.send(GetTimeResponse(epochSeconds: UInt32(clamping: time(nil))))
        case .subscribeStates, .subscribeLogs, .subscribeHomeAssistantServices, .subscribeHomeAssistantStates,
             .time, .pingResponse, .disconnectResponse, .other:
            break
        case .subscribeAdvertisements:
            // Raw whatever the flags say: the features say raw, and ESPHome sends nothing else now.
            scanner.subscribe(client)
        case .unsubscribeAdvertisements:
            scanner.unsubscribe(client)
        case .setScannerMode(let request):
            scanner.setMode(request.mode, by: client)
        case .subscribeConnectionsFree:
            connections.subscribeFree(client)
        case .device(let request):
            connections.handle(request, from: client)
        case .getServices(let request):
            let short = readsShortUUIDs(client)
            connections.gatt(request.address, 0, from: client) { [bluetooth] device throws(BLEError) in
                ServicePages.messages(address: request.address, services: try await bluetooth.services(device), shortUUIDs: short)
            }
        case .read(let request):
            connections.gatt(request.address, request.handle, from: client) { [bluetooth] device throws(BLEError) in
                let data = try await bluetooth.read(device, characteristic: try Self.attHandle(request.handle))
                return [BluetoothGATTReadResponse(address: request.address, handle: request.handle, data: data)]
            }
        case .readDescriptor(let request):
            connections.gatt(request.address, request.handle, from: client) { [bluetooth] device throws(BLEError) in
                let data = try await bluetooth.read(device, descriptor: try Self.attHandle(request.handle))
                return [BluetoothGATTReadResponse(address: request.address, handle: request.handle, data: data)]
            }
        case .write(let request):
            connections.gatt(request.address, request.handle, from: client, { [bluetooth] device throws(BLEError) in
                try await bluetooth.write(device, characteristic: try Self.attHandle(request.handle), request.data, withResponse: request.response)
                // A write without response is not answered (the client does not wait); its failure is.
                return request.response ? [BluetoothGATTWriteResponse(address: request.address, handle: request.handle)] : []
            }, errorFor: .write)
        case .writeDescriptor(let request):
            connections.writeDescriptor(request, from: client)
        case .notify(let request):
            connections.notify(request, from: client)
        }
    }

    func ended(_ client: APIClient, reason: String) {
        versions.withLock { _ = $0.removeValue(forKey: client.id) }
        scanner.unsubscribe(client)
        connections.clientGone(client)
    }

    /// An ATT handle is 16 bits; the API's field is 32.
    static func attHandle(_ handle: UInt32) throws(BLEError) -> UInt16 {
        guard let h = UInt16(exactly: handle) else { throw BLEError(.invalidHandle, "handle \(handle) is not an ATT handle") }
        return h
    }
}
