import ESPHomeAPI
import GatewayCore
import Glibc
import Synchronization

/// The ESPHome-API door: gattway as a Bluetooth proxy of Home Assistant (`--esphome-api`).
///
/// This increment holds the conversation that is not Bluetooth: hello, login (no password),
/// device info (with the proxy's features and its adapter's address), an empty entity list,
/// ping, disconnect and time; the subscriptions to states, logs and Home Assistant services and
/// states are taken and nothing is ever sent on them (gattway has no entities). The Bluetooth
/// requests are refused at once for now (see `refuse`).
public final class ESPHomeProxy: Sendable {
    /// The port it listens on.
    public let port: UInt16
    private let server: APIServer

    /// Looks up the adapter's address (the Noise hello carries it), then listens.
    public init(_ configuration: APIServer.Configuration, name: String, version: String, gateway: Gateway,
                log: @escaping @Sendable (String) -> Void) async throws(APIServerError) {
        let identity = ProxyIdentity(name: name, version: version, encrypted: configuration.key != nil)
        let core = Core(gateway: gateway)
        let door = Door(identity: identity, core: core, log: log)
        let adapter = await core.adapterAddress()
        server = try APIServer(configuration, identity: door.serverIdentity(adapter), handler: door, log: log)
        port = server.port
        door.attach(server, adapter: adapter)
    }

    /// Tells each client that gattway is going, then closes.
    public func stop() {
        server.stop()
    }
}

/// The door's answers, on the server's thread (device info on a task of its own: the adapter is
/// looked up).
final class Door: APIHandler {
    let identity: ProxyIdentity
    let core: Core
    let log: @Sendable (String) -> Void
    /// The server, once made, and the adapter address its Noise hello says.
    private let server = Mutex<(server: APIServer?, adapter: MACAddress?)>((nil, nil))

    init(identity: ProxyIdentity, core: Core, log: @escaping @Sendable (String) -> Void) {
        self.identity = identity
        self.core = core
        self.log = log
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
        changed?.setIdentity(serverIdentity(adapter))
    }

    func received(_ message: ClientMessage, from client: APIClient) {
        switch message {
        case .hello(let hello):
            log("\(client.peer): hello from \(hello.clientInfo.isEmpty ? "a client" : hello.clientInfo) (API \(hello.apiVersionMajor).\(hello.apiVersionMinor))")
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
                let adapter = await core.adapterAddress()
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
        case .subscribeAdvertisements, .unsubscribeAdvertisements, .device, .getServices, .read, .write,
             .readDescriptor, .writeDescriptor, .notify, .subscribeConnectionsFree, .setScannerMode:
            refuse(message, client)
        }
    }

    func ended(_ client: APIClient, reason: String) {}

    /// ATT's "Request Not Supported" (0x06, ESP-IDF's ESP_GATT_REQ_NOT_SUPPORTED).
    static let notSupported: Int32 = 0x06

    /// The Bluetooth requests until the next increment brings them (advertisements from the
    /// central, batched; connections through it with slots; GATT; pairing; the scanner's state
    /// and mode): each answered at once where the API has an answer that refuses, so that a
    /// client does not wait for its timeout; no slot is free; advertisement subscriptions and
    /// the scanner mode are taken and nothing comes of them.
    private func refuse(_ message: ClientMessage, _ client: APIClient) {
        let error = Self.notSupported
        switch message {
        case .device(let request):
            let address = request.address
            switch request.requestType {
            case .pair: client.send(BluetoothDevicePairingResponse(address: address, succeeded: false, error: error))
            case .unpair: client.send(BluetoothDeviceUnpairingResponse(address: address, succeeded: false, error: error))
            case .clearCache: client.send(BluetoothDeviceClearCacheResponse(address: address, succeeded: false, error: error))
            case .disconnect: client.send(BluetoothDeviceConnectionResponse(address: address, connected: false))
            default: client.send(BluetoothDeviceConnectionResponse(address: address, connected: false, error: error))
            }
        case .getServices(let request):
            client.send(BluetoothGATTErrorResponse(address: request.address, handle: 0, error: error))
        case .read(let request as any BluetoothHandleMessage), .write(let request as any BluetoothHandleMessage),
             .readDescriptor(let request as any BluetoothHandleMessage), .writeDescriptor(let request as any BluetoothHandleMessage),
             .notify(let request as any BluetoothHandleMessage):
            client.send(BluetoothGATTErrorResponse(address: request.address, handle: request.handle, error: error))
        case .subscribeConnectionsFree:
            client.send(BluetoothConnectionsFreeResponse(free: 0, limit: 0, allocated: []))
        default:
            break
        }
    }
}
