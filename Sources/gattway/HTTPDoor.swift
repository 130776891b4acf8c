import GatewayCore
import HTTPAPI
import HTTPServer
import Launch
import SerialBridge

/// The HTTP API (`--listen`), served by libmicrohttpd: every request logged, but the watchdog's.
struct HTTPDoor {
    let server: Server
    let tls: Bool
    /// Marks the watchdog's own requests, which are not logged (one every few seconds).
    private let watchdogMark: String

    static func start(_ options: Options, _ loaded: Loaded, gateway: Gateway, serial: SerialPorts) throws(StartFailure) -> HTTPDoor {
        let capacity = Capacity.fitting(options)
        let limits = Limits(streams: capacity.streams, clientStreams: options.maxClientStreams,
                            webSocketMessageBytes: options.maxWebSocketMessage)
        let serve = API(gateway: gateway, limits: limits, access: loaded.access, serial: serial, log: log).handler()
        let watchdogMark = String(UInt64.random(in: 1...UInt64.max), radix: 16)
        let access = loaded.access
        do {
            let server = try Server(host: options.host, port: options.port, tls: loaded.tls, maxBodyBytes: options.maxBodyBytes,
                                    connectionLimit: capacity.connections, connectionsPerClient: options.maxClientConnections,
                                    log: { log("http: \($0)") }, errorResponder: API.errorResponder,
                                    onRefusal: { error, client in
                                        access.refusals.refused(error.name, client: client, "answered \(error.status)")
                                    }) { request in
                let start = ContinuousClock.now
                let response = await serve(request)
                if request.headers["x-gattway-watchdog"] != watchdogMark {
                    log("\(request.method) \(request.path) \(response.status) \(milliseconds(ContinuousClock.now - start)) ms")
                }
                return response
            }
            return HTTPDoor(server: server, tls: loaded.tls != nil, watchdogMark: watchdogMark)
        } catch {
            throw StartFailure("\(error)", status: 1)
        }
    }

    /// Whether the server answers a request of its own (`GET /v1/state`, not logged) in time.
    func answers(timeout: Duration) -> Bool {
        server.selfCheck("/v1/state", headers: ["X-Gattway-Watchdog": watchdogMark], timeout: timeout) != nil
    }

    func stop() { server.stop() }
}

/// "12.3": a duration in milliseconds, to a tenth.
func milliseconds(_ elapsed: Duration) -> String {
    let tenths = elapsed.components.seconds * 10_000 + elapsed.components.attoseconds / 100_000_000_000_000
    return "\(tenths / 10).\(tenths % 10)"
}

/// Connections and streams served at once: what the options ask for, within the file
/// descriptors the system allows (one a connection, and some for the bus, the log and the
/// server's own). `ulimit -n` is raised to fit; where its hard limit is lower, fewer (logged).
enum Capacity {
    static let spare = 64

    static func fitting(_ options: Options) -> (connections: Int, streams: Int) {
        let reserve = Server.defaultConnectionReserve + spare
        let descriptors = Server.raiseDescriptorLimit(to: options.maxConnections + reserve)
        var connections = options.maxConnections
        if descriptors < connections + reserve {
            connections = max(1, descriptors - reserve)
            log("gattway: only \(descriptors) file descriptors are allowed (ulimit -n); serving at most \(connections) connections"
                + " instead of \(options.maxConnections)", .warning)
        }
        return (connections, min(options.maxStreams, connections))
    }
}
