import BLE
import HTTPServer

/// The REST API over a `Central`: routes, request parsing and response shapes.
public final class Gateway: Sendable {
    let central: Central
    public let version: String
    let hub: EventHub
    let holds: NotificationHolds
    let streams: StreamLimit
    /// Whether a connect without `autoReconnect` keeps the device connected.
    let autoReconnect: Bool
    /// `GET /v1/devices`, encoded compact, while the device list stays the same.
    private let deviceList = EncodedCache()

    /// - Parameters:
    ///   - keepAliveInterval: how often an SSE stream gets a comment, so that proxies keep it open.
    ///   - maxStreams: event streams (SSE and WebSocket) open at once; more are answered 503.
    ///   - autoReconnect: the default of a connect's `autoReconnect`.
    public init(central: Central, version: String, keepAliveInterval: Duration = .seconds(15), maxStreams: Int = 10_000,
                autoReconnect: Bool = false) {
        self.central = central
        self.autoReconnect = autoReconnect
        self.version = version
        hub = EventHub(keepAliveInterval: keepAliveInterval)
        streams = StreamLimit(limit: maxStreams)
        holds = NotificationHolds(central: central)
        central.setEventHandler { [hub] event in hub.publish(event) }
    }

    /// The transport's errors (unknown route, oversize body) in the API's error shape.
    public static let errorResponder: @Sendable (ServerError) -> Response = { Response.error($0) }

    public func router() -> Router {
        let router = Router(errorResponder: Gateway.errorResponder)
        router.add("GET", "/", handle { _ in Index(name: "gattway", version: self.version, documentation: "openapi.yaml") })
        router.add("GET", "/v1/state", handle { _ in ManagerStateBody(await self.central.status()) })
        router.add("GET", "/v1/adapters", handle { _ in AdapterList(adapters: try await self.central.adapters().map(AdapterBody.init)) })
        router.add("GET", "/v1/scan", handle { _ in ScanStatusBody(await self.central.scanStatus()) })
        router.add("POST", "/v1/scan", handle { request in
            let body = try JSON.decode(ScanRequest.self, from: request.body)
            return ScanStatusBody(try await self.central.startScan(try body.options()))
        })
        router.add("DELETE", "/v1/scan", handle { _ in ScanStatusBody(try await self.central.stopScan()) })
        router.add("GET", "/v1/devices", { request in
            // The version is read before the list, so a kept answer is never older than it says.
            // Only the compact form is kept: `?pretty` is for people, and encoded each time.
            let layout = JSON.Layout(request)
            return .json(200, await self.deviceList.body(version: layout == .compact ? self.central.peripheralsVersion : nil) {
                JSON.encode(DeviceList(devices: await self.central.peripherals().map(DeviceBody.init)), layout)
            })
        })
        router.add("GET", "/v1/devices/{id}", handle { request in
            DeviceBody(try await self.central.peripheral(try Parse.address(request.pathParameters["id"] ?? "")))
        })
        addGATTRoutes(to: router)
        addStreamRoutes(to: router)
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
                return .error(error, layout: layout)
            } catch {
                return .error(BLEError(.unknown, "internal error: \(error)"), status: 500, layout: layout)
            }
        }
    }
}

struct Index: Encodable {
    var name: String
    var version: String
    var documentation: String
}
