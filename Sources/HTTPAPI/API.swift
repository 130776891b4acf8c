import Access
import BLE
import GatewayCore
import HTTPServer
import Sensors
import SerialBridge

/// The HTTP API, a door of the gateway: REST routes, request parsing and response shapes,
/// Server-Sent Events and WebSockets, the dashboard's files, `/metrics`, in front of which access
/// control stands.
public final class API: Sendable {
    /// The core every door shares.
    let gateway: Gateway
    let streams: StreamLimit
    let limits: Limits
    /// Tokens, origins, rates: consulted in front of every route, and by `/v1/ws` for its role.
    let access: AccessControl
    /// The serial-port door: `/v1/devices/{id}/serial` and `/v1/serial-ports` call into it.
    let serial: SerialPorts
    /// Request counts and latencies (`/metrics`).
    let requests = RequestMetrics()
    /// `GET /v1/devices`, encoded compact, while the device list stays the same.
    private let deviceList = EncodedCache()

    /// - Parameters:
    ///   - limits: event streams and WebSocket messages.
    ///   - access: who may do what (default: no tokens, pages of the gateway's own origin only).
    ///   - serial: the serial-port door, whose links the WebSocket route shares and whose ports
    ///     `/v1/serial-ports` lists and adds to (default: one of its own, with no ports).
    package init(gateway: Gateway, limits: Limits = Limits(), access: AccessControl? = nil, serial: SerialPorts? = nil,
                log: @escaping @Sendable (String) -> Void = { _ in }) {
        self.gateway = gateway
        self.serial = serial ?? SerialPorts(links: SerialLinks(gateway: gateway, log: log), log: log)
        self.limits = limits
        self.access = access ?? AccessControl(.init(origins: try! OriginPolicy(allowing: []), queryTokenRoutes: Self.queryTokenRoutes), log: log)
        streams = StreamLimit(limit: limits.streams, perClient: limits.clientStreams)
    }

    // What the routes use of the core.
    var central: BlocklistedCentral { gateway.central }
    var hub: EventHub { gateway.hub }
    var holds: NotificationHolds { gateway.holds }
    var restoration: Restoration { gateway.restoration }
    var autoConnections: AutoConnections { gateway.autoConnections }
    var sensors: SensorBoard { gateway.sensors }
    var values: ValueCache { gateway.values }

    /// What the server runs for every request: the routes behind access control, counted and timed.
    public func handler() -> Handler {
        let router = router()
        return instrumented(access.guarded(router.handle, allowedMethods: router.allowedMethods))
    }

    /// The transport's errors (unknown route, oversize body) in the API's error shape.
    public static let errorResponder: @Sendable (ServerError) -> Response = { Response.error($0) }

    public func router() -> Router {
        let router = Router(errorResponder: API.errorResponder)
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
        router.add("GET", "/v1/blocklist", handle { _ in BlocklistBody(self.gateway.blocklist) })
        router.add("GET", "/v1/devices", { request in
            // The version is read before the list, so a kept answer is never older than it says.
            // Only the compact form is kept: `?pretty` is for people, and encoded each time.
            let layout = JSON.Layout(request)
            return .json(200, await self.deviceList.body(version: layout == .compact ? self.central.peripheralsVersion : nil) {
                JSON.encode(DeviceList(devices: await self.central.peripherals().map(self.gateway.deviceBody)), layout)
            })
        })
        router.add("GET", "/v1/devices/{id}", handle { request in
            self.gateway.deviceBody(try await self.central.peripheral(try Parse.address(request.pathParameters["id"] ?? "")))
        })
        addSensorRoutes(to: router)
        addWatchRoutes(to: router)
        addGATTRoutes(to: router)
        addStreamRoutes(to: router)
        addPairingRoutes(to: router)
        addSerialRoutes(to: router)
        addDiagnosticRoutes(to: router)
        addPeripheralRoutes(to: router)
        return router
    }

    /// A route handler that answers `status` (200, or 201 for what a POST made) with `T` as
    /// JSON, or the error in the documented shape, laid out as the request asks (`?pretty`).
    func handle<T: Encodable & Sendable>(status: Int = 200, _ body: @escaping @Sendable (Request) async throws -> T) -> Handler {
        return { request in
            let layout = JSON.Layout(request)
            do {
                return .json(status, JSON.encode(try await body(request), layout))
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
