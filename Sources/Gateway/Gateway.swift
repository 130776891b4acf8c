import Access
import BLE
import HTTPServer
import Sensors
import Synchronization

/// The REST API over a `Central`: routes, request parsing and response shapes.
public final class Gateway: Sendable {
    /// The backend as the blocklist lets clients use it.
    let central: BlocklistedCentral
    /// The GATT blocklist in force (`GET /v1/blocklist`).
    let blocklist: Blocklist
    public let version: String
    let hub: EventHub
    let holds: NotificationHolds
    /// Each device's latest sensor reading (`/v1/sensors`, a device's `sensor`, `sensor` events).
    let sensors: SensorBoard
    let streams: StreamLimit
    let limits: Limits
    /// Tokens, origins, rates: consulted in front of every route, and by `/v1/ws` for its role.
    let access: AccessControl
    /// Whether a connect without `autoReconnect` keeps the device connected.
    let autoReconnect: Bool
    /// What outlives gattway (`--state-dir`).
    let restoration: Restoration
    /// The last values read or notified, for `?maxAge=`.
    let values: ValueCache
    /// Devices gattway connected for `connect=auto`, disconnected when idle.
    let autoConnections: AutoConnections
    /// Diagnostics: recent errors, request counts and latencies, reconnection attempts.
    let errors = ErrorLog()
    let requests = RequestMetrics()
    let reconnectAttempts = Atomic<Int>(0)
    let resubscriptions = ResubscriptionCounters()
    let started = ContinuousClock.now
    /// `GET /v1/devices`, encoded compact, while the device list stays the same.
    private let deviceList = EncodedCache()

    /// - Parameters:
    ///   - keepAliveInterval: how often an SSE stream gets a comment, so that proxies keep it open.
    ///   - limits: event streams and WebSocket messages.
    ///   - access: who may do what (default: no tokens, pages of the gateway's own origin only).
    ///   - autoReconnect: the default of a connect's `autoReconnect`.
    ///   - stateDirectory: where the state to restore at start is kept (nil: nowhere).
    ///   - blocklist: the GATT attributes clients may not use, or only read or write.
    ///   - idleDisconnect: how long a device connected for `connect=auto` stays connected without requests.
    ///   - sensorKeys: bind keys of devices that encrypt their sensor advertisements.
    public init(central: Central, version: String, keepAliveInterval: Duration = .seconds(15), limits: Limits = Limits(),
                access: AccessControl? = nil, autoReconnect: Bool = false, stateDirectory: String? = nil,
                blocklist: Blocklist = .standard, idleDisconnect: Duration = .seconds(60), sensorKeys: SensorKeys = SensorKeys(),
                log: @escaping @Sendable (String) -> Void = { _ in }) {
        let central = BlocklistedCentral(base: central, blocklist: blocklist)
        self.central = central
        self.blocklist = blocklist
        self.limits = limits
        self.access = access ?? AccessControl(.init(origins: try! OriginPolicy(allowing: [])), log: log)
        self.autoReconnect = autoReconnect
        let restoration = Restoration(directory: stateDirectory, log: log)
        self.restoration = restoration
        self.version = version
        let hub = EventHub(keepAliveInterval: keepAliveInterval)
        self.hub = hub
        let sensors = SensorBoard(keys: sensorKeys) { hub.publish(.sensor($0)) }
        self.sensors = sensors
        streams = StreamLimit(limit: limits.streams, perClient: limits.clientStreams)
        let holds = NotificationHolds(central: central)
        self.holds = holds
        let values = ValueCache()
        self.values = values
        let autoConnections = AutoConnections(central: central, holds: holds, idleAfter: idleDisconnect, log: log)
        self.autoConnections = autoConnections
        central.setEventHandler { [weak self] event in
            switch event {
            case .advertisement(let info):
                hub.publish(event)
                sensors.hear(info)
            case .advertisementChanged(let info):
                // Not a client's `advertisement` event (see CentralEvent): only a reading, if any.
                sensors.hear(info)
            default:
                hub.publish(event)
            }
            self?.noteEvent(event)
            switch event {
            case .state(let status): restoration.stateChanged(status, central: central)
            case .connection(let id, .connected, _): restoration.connected(id)
            case .connection(let id, .disconnected, _): autoConnections.linkDown(id)
            case .resubscribed(let id, let handle, _, let error): restoration.resubscribed(id, handle, error)
            case .value(let update): values.noted(update)
            default: break
            }
        }
    }

    /// Restores what the state directory says (the scan, kept devices, REST holds); kept devices
    /// that cannot connect now are tried again by the central. `GET /v1/restoration` reports it.
    public func restore() async { await restoration.restore(central: central, holds: holds) }

    /// `--watch`: starts watching every device, unless the state file restores a watch (with
    /// its own filters). Not recorded in the state file: the flag says it at every start.
    public func watchAtStart() async {
        // What is kept (read from the state file at start): `restore`, which ran first, has
        // consumed the file itself.
        guard restoration.current.watch == nil else { return }
        // No options to refuse; an adapter that is not usable yet only delays the discovery.
        _ = try? await central.startWatch(WatchOptions())
    }

    /// What the server runs for every request: the routes behind access control, counted and timed.
    public func handler() -> Handler {
        let router = router()
        return instrumented(access.guarded(router.handle, allowedMethods: router.allowedMethods))
    }

    /// The transport's errors (unknown route, oversize body) in the API's error shape.
    public static let errorResponder: @Sendable (ServerError) -> Response = { Response.error($0) }

    public func router() -> Router {
        let router = Router(errorResponder: Gateway.errorResponder)
        addDashboardRoutes(to: router)
        router.add("GET", "/v1/state", handle { _ in ManagerStateBody(await self.central.status()) })
        router.add("GET", "/v1/adapters", handle { _ in AdapterList(adapters: try await self.central.adapters().map(AdapterBody.init)) })
        router.add("GET", "/v1/scan", handle { _ in ScanStatusBody(await self.central.scanStatus()) })
        router.add("POST", "/v1/scan", handle { request in
            let body = try JSON.decode(ScanRequest.self, from: request.body)
            let status = ScanStatusBody(try await self.central.startScan(try body.options()))
            self.restoration.scanning(body)
            return status
        })
        router.add("DELETE", "/v1/scan", handle { _ in
            let status = ScanStatusBody(try await self.central.stopScan())
            self.restoration.scanning(nil)
            return status
        })
        router.add("GET", "/v1/restoration", handle { _ in RestorationBody(self.restoration) })
        router.add("GET", "/v1/blocklist", handle { _ in BlocklistBody(self.blocklist) })
        router.add("GET", "/v1/devices", { request in
            // The version is read before the list, so a kept answer is never older than it says.
            // Only the compact form is kept: `?pretty` is for people, and encoded each time.
            let layout = JSON.Layout(request)
            return .json(200, await self.deviceList.body(version: layout == .compact ? self.central.peripheralsVersion : nil) {
                JSON.encode(DeviceList(devices: await self.central.peripherals().map(self.deviceBody)), layout)
            })
        })
        router.add("GET", "/v1/devices/{id}", handle { request in
            self.deviceBody(try await self.central.peripheral(try Parse.address(request.pathParameters["id"] ?? "")))
        })
        addSensorRoutes(to: router)
        addWatchRoutes(to: router)
        addGATTRoutes(to: router)
        addStreamRoutes(to: router)
        addDiagnosticRoutes(to: router)
        return router
    }

    /// A route handler that answers 200 with `T` as JSON, or the error in the documented shape,
    /// laid out as the request asks (`?pretty`).
    func handle<T: Encodable & Sendable>(_ body: @escaping @Sendable (Request) async throws -> T) -> Handler {
        return { request in
            let layout = JSON.Layout(request)
            do {
                return .json(200, JSON.encode(try await body(request), layout))
            } catch let error as BLEError {
                self.noteError(error, request)
                return .error(error, layout: layout)
            } catch {
                let unexpected = BLEError(.unknown, "internal error: \(error)")
                self.noteError(unexpected, request)
                return .error(unexpected, status: 500, layout: layout)
            }
        }
    }
}

/// What one client, and all of them, may hold open.
public struct Limits: Sendable {
    /// Event streams (SSE and WebSocket) open at once; more are answered 503.
    public var streams: Int
    /// Event streams open at once from one client address; more are answered 429.
    public var clientStreams: Int
    /// The largest WebSocket message a client may send; a larger one closes the socket (1009).
    public var webSocketMessageBytes: Int

    public init(streams: Int = 10_000, clientStreams: Int = 1_000, webSocketMessageBytes: Int = 64 * 1024) {
        self.streams = streams
        self.clientStreams = clientStreams
        self.webSocketMessageBytes = webSocketMessageBytes
    }
}

/// `GET /v1/restoration`: what is kept for the next start, and what the last start restored.
struct RestorationBody: Encodable {
    var enabled: Bool
    var file: String?
    var loaded: Bool
    var problem: String?
    var restored: [Restoration.Report.Item]
    var kept: Restoration.Desired

    init(_ r: Restoration) {
        let report = r.lastReport
        enabled = report.enabled
        file = report.file
        loaded = report.loaded
        problem = report.problem
        restored = report.items
        kept = r.current
    }
}

struct Index: Encodable {
    var name: String
    var version: String
    var documentation: String
}
