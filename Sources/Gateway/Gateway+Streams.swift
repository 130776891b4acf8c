import BLE
import FoundationEssentials
import HTTPServer

/// `GET /v1/events` (Server-Sent Events) and `GET /v1/ws` (WebSocket): live events.
extension Gateway {
    func addStreamRoutes(to router: Router) {
        router.add("GET", "/v1/events", { request in await self.serverSentEvents(request) })
        router.add("GET", "/v1/ws", { request in
            Response.webSocket(request, maxMessageBytes: 64 * 1024) { socket in await self.webSocketSession(socket) }
        })
    }

    // MARK: - Server-Sent Events

    private func serverSentEvents(_ request: Request) async -> Response {
        let selection: Selection
        let hold: NotificationHolds.Key?
        do throws(BLEError) {
            selection = try Self.selection(
                types: request.query["types"], device: request.query["device"],
                characteristic: request.query["characteristic"], format: request.query["format"])
            hold = try await resolveHold(selection)
            if let hold { try await holds.acquire(hold) }
        } catch {
            return .error(error)
        }
        let body = StreamBody(capacityBytes: 64 * 1024)
        let client = StreamClient(
            id: hub.newClientID(),
            write: { body.write($0) },
            encode: { encoded in
                let fields = switch encoded {
                case .event(let event, _, _, _): "id: \(event.seq)\nevent: \(event.type.rawValue)\n"
                case .dropped: "event: dropped\n"
                }
                return Array((fields + "data: ").utf8) + EventBody.line(EventBody(encoded)) + Array("\n\n".utf8)
            },
            disconnect: { body.close() })
        client.select(selection, as: "")
        // Proxies and browsers: reconnect after 2 s; a first comment so the headers go out now.
        body.write(Array("retry: 2000\n: connected\n\n".utf8))
        let keepAlive = Task { [keepAliveInterval] in
            while !body.isClosed {
                try? await Task.sleep(for: keepAliveInterval)
                if body.isClosed { break }
                body.write(Array(": keep-alive\n\n".utf8))
                client.flush()
            }
        }
        body.onClose { [hub, holds] in
            keepAlive.cancel()
            client.close()
            hub.remove(client)
            if let hold { Task { await holds.release(hold) } }
        }
        let lastEventID = request.header("last-event-id").flatMap { UInt64($0) }
        hub.add(client, replayAfter: lastEventID)
        return .stream(status: 200, headers: [
            (name: "Content-Type", value: "text/event-stream"),
            (name: "Cache-Control", value: "no-cache"),
            (name: "X-Accel-Buffering", value: "no"),
        ], body: body)
    }

    /// `?types=notification,connection&device=...&characteristic=2a37&format=hex`.
    static func selection(types: String?, device: String?, characteristic: String?, format: String?) throws(BLEError) -> Selection {
        var selection = Selection()
        if let types {
            var set = Set<EventType>()
            for name in types.split(separator: ",") {
                guard let type = EventType(rawValue: String(name).trimmingSpaces) else {
                    throw BLEError(.invalidParameters, "unknown event type \"\(name)\"; types are state, advertisement, connection, notification")
                }
                set.insert(type)
            }
            selection.types = set
        }
        if let device { selection.device = try Parse.address(device) }
        if let characteristic {
            guard selection.device != nil else {
                throw BLEError(.invalidParameters, "characteristic needs a device")
            }
            selection.characteristic = try Parse.selector(characteristic)
            if types == nil { selection.types = [.notification] }
        }
        selection.format = try Self.format(format)
        return selection
    }

    /// The characteristic a selection subscribes to (resolved to its handle, so that a UUID
    /// stands for one attribute), or nil when it selects no single characteristic.
    func resolveHold(_ selection: Selection) async throws(BLEError) -> NotificationHolds.Key? {
        guard let device = selection.device, let selector = selection.characteristic, selection.types.contains(.notification) else {
            return nil
        }
        let c = try await characteristic(on: device, selector)
        try Self.requireNotifiable(c)
        return NotificationHolds.Key(device: device, characteristic: c.handle)
    }

    // MARK: - WebSocket

    private func webSocketSession(_ socket: WebSocket) async {
        let client = StreamClient(
            id: hub.newClientID(),
            write: { socket.send(.text(String(decoding: $0, as: UTF8.self))) },
            encode: { EventBody.line(EventBody($0)) },
            disconnect: { socket.close(code: 1008, reason: "too slow: events were dropped") })
        hub.add(client)
        // What the socket's buffer refused waits in the client's queue; try again now and then
        // (for SSE the keep-alive does this), so the tail of a burst is not left behind.
        let flusher = Task {
            while !socket.isClosed {
                try? await Task.sleep(for: .milliseconds(250))
                client.flush()
            }
        }
        defer { flusher.cancel() }
        let session = WebSocketSession(gateway: self, client: client)
        for await message in socket.messages {
            guard case .text(let text) = message else {
                socket.send(.text(String(decoding: WebSocketSession.reply(id: nil, error: BLEError(.invalidParameters, "send JSON text messages")), as: UTF8.self)))
                continue
            }
            let reply = await session.handle(Array(text.utf8))
            socket.send(.text(String(decoding: reply, as: UTF8.self)))
        }
        client.close()
        hub.remove(client)
        await session.end()
    }
}
