import BLE
import GatewayCore
import HTTPServer
import SerialBridge
import Synchronization

/// `GET /v1/devices/{id}/serial`: a connected device's UART as a WebSocket. What the device sends
/// comes as binary messages as it arrives, or one text message per line (`?lines=true`); what
/// the writer (`?write=true`, one at a time) sends, text (UTF-8) or binary, is written to the
/// device in order, with flow control (see `SerialLink`).
extension API {
    static let serialMaxLineDefault = 4096
    /// Bytes kept for a socket between the port's opening and the upgrade.
    static let serialEarlyBytes = 64 * 1024
    /// The close code of a serial socket whose device disconnected (`onLinkLoss=close`).
    static let serialLinkLostCode: UInt16 = 4001

    func addSerialRoutes(to router: Router) {
        router.add("GET", "/v1/devices/{id}/serial", { request in await self.serialSocket(request) })
        router.add("GET", "/v1/serial-ports", handle { _ in SerialPortList(ports: self.serial.all.map(SerialPortBody.init)) })
        router.add("GET", "/v1/serial-ports/{port}", handle { request in SerialPortBody(try self.serialPort(request)) })
        router.add("POST", "/v1/serial-ports", handle(status: 201) { request in
            let body = try JSON.decode(SerialPortRequest.self, from: request.body)
            return SerialPortBody(try self.serial.open(try body.configuration()))
        })
        router.add("DELETE", "/v1/serial-ports/{port}", handle { request in
            let port = try self.serialPort(request)
            _ = self.serial.close(port.port)
            return SerialPortBody(port)
        })
    }

    private func serialPort(_ request: Request) throws(BLEError) -> SerialPort {
        let text = request.pathParameters["port"] ?? ""
        // JSON Schema's integers include 707.0; so does this path.
        guard let number = UInt16(text) ?? Double(text).flatMap({ UInt16(exactly: $0) }) else {
            throw BLEError(.invalidParameters, "a serial port is a number from 0 to 65535, not \"\(text)\"")
        }
        guard let port = serial.port(number) else {
            throw BLEError(.invalidHandle, "no serial port \(number) (GET /v1/serial-ports lists them)")
        }
        return port
    }

    private func serialSocket(_ request: Request) async -> Response {
        let layout = JSON.Layout(request)
        // Not an upgrade: refused before the device is touched.
        if let refusal = Response.webSocketRefusal(request) { return refusal }
        let place: StreamPlace
        switch admitStream(request) {
        case .admitted(let taken): place = taken
        case .refused(let refusal): return refusal
        }
        let options: SerialRequest
        let session: SerialSession
        let output = SerialOutput()
        do throws(BLEError) {
            options = try SerialRequest(request)
            if options.write && access.role(of: request) == .readOnly {
                throw BLEError(att: .insufficientAuthorization, "a read-only token may read the serial port, not write: open it without write=true")
            }
            let id = try Self.deviceID(request)
            session = try await serial.links.open(id, profile: options.profile, reader: output.reader(options), writer: options.write,
                                                  onLinkLoss: options.onLinkLoss, connect: options.connect)
        } catch {
            place.release()
            noteError(error, request)
            return .error(error, layout: layout)
        }
        // An upgrade that never happens (the client left first) closes the session with the response.
        let guarded = SessionGuard(session)
        // A browser that offers subprotocols (one may carry the token) needs one chosen.
        let offered = WebSocketHandshake.offeredSubprotocols(request)
        return Response.webSocket(request, subprotocol: offered.contains(Self.webSocketSubprotocol) ? Self.webSocketSubprotocol : nil,
                                  maxMessageBytes: limits.webSocketMessageBytes) { socket in
            output.attach(socket)
            for await message in socket.messages {
                let bytes: [UInt8] = switch message {
                case .text(let text): Array(text.utf8)
                case .binary(let data): data
                }
                guard guarded.session.isWriter else {
                    socket.close(code: 1008, reason: "this socket reads only: open one with write=true to write")
                    break
                }
                do throws(BLEError) {
                    try await guarded.session.write(bytes, options: options.writeOptions)
                } catch {
                    socket.close(code: 1011, reason: String("write failed: \(error.name): \(error.message)".utf8.prefix(120)) ?? "write failed")
                    break
                }
            }
            await guarded.session.close()
            place.release()
        }
    }
}

/// The query of `GET /v1/devices/{id}/serial`.
struct SerialRequest: Sendable {
    var profile: SerialProfile?
    var lines = false
    var maxLine = API.serialMaxLineDefault
    var write = false
    var writeOptions = SerialLink.WriteOptions()
    var onLinkLoss = SerialLink.LinkLoss.close
    var connect = false

    init(_ request: Request) throws(BLEError) {
        let q = request.query
        lines = try Parse.flag(q["lines"], field: "lines") ?? false
        write = try Parse.flag(q["write"], field: "write") ?? false
        if let text = q["maxLine"] {
            guard let n = Int(text), (1...1 << 20).contains(n) else {
                throw BLEError(.invalidParameters, "maxLine must be a number of bytes from 1 to 1048576, not \"\(text)\"")
            }
            maxLine = n
        }
        if let text = q["onLinkLoss"] {
            guard let loss = SerialLink.LinkLoss(rawValue: text) else {
                throw BLEError(.invalidParameters, "onLinkLoss must be close or hold, not \"\(text)\"")
            }
            onLinkLoss = loss
        }
        if let text = q["connect"] {
            guard text == "auto" else { throw BLEError(.invalidParameters, "connect must be auto, not \"\(text)\"") }
            connect = true
        }
        writeOptions = try SerialLink.WriteOptions(mode: q["mode"], rate: q["rate"])
        profile = try SerialProfile.named(q["profile"], service: q["service"], rx: q["rx"], tx: q["tx"])
    }
}

/// Where a serial socket's bytes go: its WebSocket once upgraded, bounded meanwhile.
private final class SerialOutput: Sendable {
    private struct State {
        var socket: WebSocket?
        var early: [WebSocketMessage] = []
        var earlyBytes = 0
        var framer: LineFramer?
        /// The link went down before the socket was there (`onLinkLoss=close`).
        var lost = false
    }
    private let state = Mutex(State())

    func reader(_ options: SerialRequest) -> SerialLink.Reader {
        state.withLock { $0.framer = options.lines ? LineFramer(maxLine: options.maxLine) : nil }
        let closes = options.onLinkLoss == .close
        return SerialLink.Reader(bytes: { [self] bytes in deliver(bytes) }, link: { [self] change in
            guard case .lost = change, closes else { return }
            let socket = state.withLock { s -> WebSocket? in
                s.lost = true
                return s.socket
            }
            socket.map(Self.closeForLinkLoss)
        })
    }

    /// The socket is there: what waited goes first.
    func attach(_ socket: WebSocket) {
        let (early, lost) = state.withLock { s -> ([WebSocketMessage], Bool) in
            s.socket = socket
            defer { s.early = [] }
            return (s.early, s.lost)
        }
        for message in early { _ = socket.send(message) }
        if lost { Self.closeForLinkLoss(socket) }
    }

    private static func closeForLinkLoss(_ socket: WebSocket) {
        socket.close(code: API.serialLinkLostCode, reason: "the device's link was lost")
    }

    /// False when the bytes found no room (the hub counts them as dropped).
    private func deliver(_ bytes: [UInt8]) -> Bool {
        state.withLock { s -> Bool in
            let messages: [WebSocketMessage]
            if s.framer != nil {
                messages = s.framer!.feed(bytes).map { line in
                    String(validating: line, as: UTF8.self).map(WebSocketMessage.text) ?? .binary(line)
                }
            } else {
                messages = [.binary(bytes)]
            }
            guard let socket = s.socket else {
                guard s.earlyBytes + bytes.count <= API.serialEarlyBytes else { return false }
                s.earlyBytes += bytes.count
                s.early += messages
                return true
            }
            var all = true
            for message in messages where !socket.send(message) { all = false }
            return all
        }
    }
}

/// Closes its session when dropped (an upgrade that never happened); closing twice is harmless.
private final class SessionGuard: Sendable {
    let session: SerialSession
    init(_ session: SerialSession) { self.session = session }
    deinit {
        let session = session
        Task { await session.close() }
    }
}

/// `POST /v1/serial-ports`: what `--serial HOST:PORT=ADDRESS[,OPTION]...` says, as JSON.
struct SerialPortRequest: Codable, Sendable, StrictDecodable {
    var device: String
    var host: String?
    var port: Int?
    var profile: String?
    var service: String?
    var rx: String?
    var tx: String?
    var onLinkLoss: String?
    var mode: String?
    var rate: Int?

    enum CodingKeys: String, CodingKey, CaseIterable {
        case device, host, port, profile, service, rx, tx, onLinkLoss, mode, rate
    }

    func configuration() throws(BLEError) -> SerialPort.Configuration {
        guard let number = UInt16(exactly: port ?? 0) else { throw BLEError(.invalidParameters, "port must be 0...65535 (0: a free one)") }
        var settings: [String: String] = [:]
        for (key, value) in [("profile", profile), ("service", service), ("rx", rx), ("tx", tx), ("onLinkLoss", onLinkLoss),
                             ("mode", mode), ("rate", rate.map(String.init))] {
            if let value { settings[key] = value }
        }
        return try SerialPort.Configuration(host: host ?? "127.0.0.1", port: number, device: try Parse.address(device, field: "device"),
                                            settings: settings)
    }
}

struct SerialPortList: Encodable, Sendable {
    var ports: [SerialPortBody]
}

/// A serial port as `/v1/serial-ports` shows it: its configuration, its clients, and the
/// device's link while one is attached.
struct SerialPortBody: Encodable, Sendable {
    var host: String
    var port: Int
    var device: String
    /// The profile asked for (nil: the first known one the device has).
    var profile: String?
    var onLinkLoss: String
    var mode: String
    var rate: Int?
    var clients: Int
    var accepted: Int
    var link: SerialLinkBody?

    init(_ port: SerialPort) {
        let c = port.configuration
        host = c.host
        self.port = Int(port.port)
        device = c.device.description
        profile = c.profile?.name
        onLinkLoss = c.onLinkLoss.rawValue
        mode = c.writeOptions.mode.rawValue
        rate = c.writeOptions.rate
        clients = port.clientCount
        accepted = port.acceptedCount
        link = port.link.map(SerialLinkBody.init)
    }
}

/// A device's open serial link: the characteristics it uses and its byte counts.
struct SerialLinkBody: Encodable, Sendable {
    var profile: String
    var service: String?
    var rx: String
    var tx: String
    var up: Bool
    var clients: Int
    var received: Int
    var sent: Int
    var dropped: Int
    var unwritten: Int

    init(_ link: SerialLink) {
        let r = link.resolved
        profile = r.profile.name
        service = r.profile.service?.uuidString
        rx = r.rx.uuid.uuidString
        tx = r.tx.uuid.uuidString
        up = link.isUp
        clients = link.clients
        let c = link.counters
        (received, sent, dropped, unwritten) = (c.received, c.sent, c.dropped, c.unwritten)
    }
}
