import BLE
import FoundationEssentials
import GatewayCore
import Glibc
import HTTPServer
import Synchronization

/// Requests by method and status, and a latency histogram.
final class RequestMetrics: Sendable {
    /// Upper bounds of the latency buckets, in seconds.
    static let bounds: [Double] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]
    private struct State {
        var requests: [String: Int] = [:]
        var buckets = [Int](repeating: 0, count: RequestMetrics.bounds.count)
        var count = 0
        var sum = 0.0
    }
    private let state = Mutex(State())

    func observe(method: String, status: Int, seconds: Double) {
        state.withLock { s in
            s.requests["method=\"\(method)\",status=\"\(status)\"", default: 0] += 1
            if let i = Self.bounds.firstIndex(where: { seconds <= $0 }) { s.buckets[i] += 1 }
            s.count += 1
            s.sum += seconds
        }
    }

    func render(into out: inout String) {
        let s = state.withLock { $0 }
        Prometheus.head(&out, "gattway_http_requests_total", "HTTP requests answered, by method and status.", "counter")
        for (labels, n) in s.requests.sorted(by: { $0.key < $1.key }) { out += "gattway_http_requests_total{\(labels)} \(n)\n" }
        Prometheus.head(&out, "gattway_http_request_duration_seconds", "Time to answer a request (streams: until the stream starts).", "histogram")
        var cumulative = 0
        for (i, bound) in Self.bounds.enumerated() {
            cumulative += s.buckets[i]
            out += "gattway_http_request_duration_seconds_bucket{le=\"\(Prometheus.number(bound))\"} \(cumulative)\n"
        }
        out += "gattway_http_request_duration_seconds_bucket{le=\"+Inf\"} \(s.count)\n"
        out += "gattway_http_request_duration_seconds_sum \(Prometheus.number(s.sum))\n"
        out += "gattway_http_request_duration_seconds_count \(s.count)\n"
    }
}

extension API {
    /// Wraps the router: every answer counted, timed and, when it is an error, kept in the error log.
    func instrumented(_ handler: @escaping Handler) -> Handler {
        { request in
            let start = ContinuousClock.now
            let response = await handler(request)
            let elapsed = ContinuousClock.now - start
            let seconds = elapsed.inSeconds
            self.requests.observe(method: request.method, status: response.status, seconds: seconds)
            return response
        }
    }

    /// An error a route answered, for `/v1/errors` and `/metrics`.
    func noteError(_ error: BLEError, _ request: Request) {
        gateway.errors.count(error)
        let device = request.pathParameters["id"].flatMap { BluetoothAddress($0) }
        gateway.errors.record(error, operation: "\(request.method) \(request.path)", device: device)
    }

    func addDiagnosticRoutes(to router: Router) {
        router.add("GET", "/v1/errors", handle { _ in ErrorList(errors: self.gateway.errors.entries.reversed(), total: self.gateway.errors.total) })
        router.add("GET", "/metrics", { _ in
            Response(status: 200, headers: [(name: "Content-Type", value: "text/plain; version=0.0.4; charset=utf-8")],
                     body: Array(await self.metricsText().utf8))
        })
    }

    func metricsText() async -> String {
        var out = ""
        let devices = await central.peripherals()
        Prometheus.head(&out, "gattway_devices", "Devices listed, by state.", "gauge")
        for state in ["connected", "connecting", "disconnected", "disconnecting"] {
            Prometheus.sample(&out, "gattway_devices", [("state", state)], Double(devices.filter { $0.state.name == state }.count))
        }
        Prometheus.head(&out, "gattway_devices_kept", "Devices kept connected (autoReconnect).", "gauge")
        Prometheus.sample(&out, "gattway_devices_kept", [], Double(devices.filter { $0.reconnect != nil }.count))
        Prometheus.head(&out, "gattway_reconnect_attempts_total", "Reconnection attempts announced.", "counter")
        Prometheus.sample(&out, "gattway_reconnect_attempts_total", [], Double(gateway.reconnectAttempts.load(ordering: .relaxed)))
        Prometheus.head(&out, "gattway_notification_holds", "Characteristics held notifying, and their holders.", "gauge")
        let held = holds.snapshot()
        Prometheus.sample(&out, "gattway_notification_holds", [("of", "characteristics")], Double(held.count))
        Prometheus.sample(&out, "gattway_notification_holds", [("of", "holders")], Double(held.values.reduce(0, +)))
        Prometheus.head(&out, "gattway_notification_restores_total",
                        "Notifications started again after a connection or a GATT change, and those not restored within the deadline (still wanted).", "counter")
        Prometheus.sample(&out, "gattway_notification_restores_total", [("result", "restored")], Double(gateway.resubscriptions.restored.load(ordering: .relaxed)))
        Prometheus.sample(&out, "gattway_notification_restores_total", [("result", "failed")], Double(gateway.resubscriptions.failed.load(ordering: .relaxed)))
        Prometheus.head(&out, "gattway_serial_links", "Devices whose UART has serial clients (TCP ports, WebSockets) now.", "gauge")
        Prometheus.sample(&out, "gattway_serial_links", [], Double(serial.links.openCount))
        Prometheus.head(&out, "gattway_serial_bytes_total",
                        "Serial bytes: received from devices, sent to them, dropped (a client had no room), not written (a write failed).", "counter")
        let serialBytes = serial.links.totals
        for (direction, n) in [("received", serialBytes.received), ("sent", serialBytes.sent), ("dropped", serialBytes.dropped),
                               ("unwritten", serialBytes.unwritten)] {
            Prometheus.sample(&out, "gattway_serial_bytes_total", [("direction", direction)], Double(n))
        }
        Prometheus.head(&out, "gattway_refusals_total", "Requests refused by access control or a limit, by kind.", "counter")
        for (kind, n) in access.refusals.countsByKind.sorted(by: { $0.key < $1.key }) {
            Prometheus.sample(&out, "gattway_refusals_total", [("kind", kind)], Double(n))
        }
        Prometheus.head(&out, "gattway_stream_clients", "SSE streams and WebSockets open.", "gauge")
        Prometheus.sample(&out, "gattway_stream_clients", [], Double(streams.count))
        Prometheus.head(&out, "gattway_events_total", "Events published by the central, given to stream clients, and lost for them.", "counter")
        Prometheus.sample(&out, "gattway_events_total", [("what", "published")], Double(hub.published))
        Prometheus.sample(&out, "gattway_events_total", [("what", "delivered")], Double(hub.counters.delivered.load(ordering: .relaxed)))
        Prometheus.sample(&out, "gattway_events_total", [("what", "dropped")], Double(hub.counters.dropped.load(ordering: .relaxed)))
        Prometheus.head(&out, "gattway_errors_total", "Errors answered or reported, by CoreBluetooth domain and code name.", "counter")
        for (name, n) in gateway.errors.counts.sorted(by: { $0.key < $1.key }) {
            let parts = name.split(separator: " ", maxSplits: 1).map(String.init)
            Prometheus.sample(&out, "gattway_errors_total", [("domain", parts[0]), ("name", parts.count > 1 ? parts[1] : "")], Double(n))
        }
        requests.render(into: &out)
        // Each name's head once: kept in a set, not searched for in the text (that search, over
        // the whole text for every sample, was 5 M instructions of every scrape).
        var headed = Set<String>()
        for metric in central.diagnostics() {
            if headed.insert(metric.name).inserted {
                Prometheus.head(&out, metric.name, metric.help, metric.kind == .counter ? "counter" : "gauge")
            }
            Prometheus.sample(&out, metric.name, metric.labels, metric.value)
        }
        Prometheus.head(&out, "gattway_uptime_seconds", "Seconds since gattway started.", "gauge")
        let up = ContinuousClock.now - gateway.started
        Prometheus.sample(&out, "gattway_uptime_seconds", [], Double(up.components.seconds))
        Prometheus.head(&out, "gattway_resident_memory_bytes", "Resident set size.", "gauge")
        Prometheus.sample(&out, "gattway_resident_memory_bytes", [], Double(Self.residentBytes()))
        return out
    }

    /// From /proc/self/statm: "size resident shared ..." in pages.
    static func residentBytes() -> Int {
        let fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return 0 }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 128)
        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard n > 0 else { return 0 }
        let fields = String(decoding: buffer[0..<n], as: UTF8.self).split(separator: " ")
        guard fields.count > 1, let pages = Int(fields[1]) else { return 0 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }
}

struct ErrorList: Encodable {
    var errors: [ErrorLog.Entry]
    /// Errors since start (the list keeps the last 256).
    var total: Int
}
