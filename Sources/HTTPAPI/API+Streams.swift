import GatewayCore
import BLE
import FoundationEssentials
import HTTPServer

/// `GET /v1/events` (Server-Sent Events) and `GET /v1/ws` (WebSocket): live events.
extension API {
    func addStreamRoutes(to router: Router) {
        router.add("GET", "/v1/events", { request in await self.serverSentEvents(request) })
        router.add("GET", "/v1/ws", { request in
            // The place is taken at once and handed to the session; an upgrade that never
            // happens (the client left first) gives it back when the response is dropped.
            let place: StreamPlace
            switch self.admitStream(request) {
            case .admitted(let taken): place = taken
            case .refused(let refusal): return refusal
            }
            let readOnly = self.access.role(of: request) == .readOnly
            // A browser that offers subprotocols (one may carry the token) needs one chosen.
            let offered = WebSocketHandshake.offeredSubprotocols(request)
            let client = request.clientAddress
            return Response.openWebSocket(request, subprotocol: offered.contains(Self.webSocketSubprotocol) ? Self.webSocketSubprotocol : nil,
                                          maxMessageBytes: self.limits.webSocketMessageBytes,
                                          onOpen: { socket in self.openWebSocket(socket, readOnly: readOnly, client: client, place: place) })
        })
    }

    /// The streams a browser opens with `EventSource` or `WebSocket`, which cannot set headers:
    /// the only routes that take a token in the URL (`?access_token=`; docs/security.md).
    public static let queryTokenRoutes = ["/v1/events", "/v1/ws", "/v1/devices/{id}/serial"].map(PathPattern.init)

    /// The subprotocol of `/v1/ws`, for clients that offer one (`["gattway", "bearer.TOKEN"]`).
    static let webSocketSubprotocol = "gattway"

    enum StreamAdmission {
        case admitted(StreamPlace)
        case refused(Response)
    }

    /// A place for one more event stream, or the answer that refuses it (logged).
    func admitStream(_ request: Request) -> StreamAdmission {
        switch streams.acquire(request.clientAddress) {
        case .success(let place):
            return .admitted(place)
        case .failure(let refusal):
            let response = refusal.response(JSON.Layout(request))
            access.refusals.refused("streams", client: request.clientAddress, "\(response.status) \(request.method) \(request.path)")
            return .refused(response)
        }
    }

    // MARK: - Server-Sent Events

    private func serverSentEvents(_ request: Request) async -> Response {
        let layout = JSON.Layout(request)
        let place: StreamPlace
        switch admitStream(request) {
        case .admitted(let taken): place = taken
        case .refused(let refusal): return refusal
        }
        let selection: Selection
        let hold: NotificationHolds.Key?
        do throws(BLEError) {
            selection = try Gateway.selection(
                types: request.query["types"], device: request.query["device"],
                characteristic: request.query["characteristic"], format: request.query["format"],
                everyPacket: try Parse.flag(request.query["everyPacket"], field: "everyPacket"))
            hold = try await gateway.resolveHold(selection)
            if let hold { try await holds.acquire(hold) }
        } catch {
            place.release()
            return .error(error, layout: layout)
        }
        let body = StreamBody(capacityBytes: 64 * 1024)
        let client = StreamClient(id: hub.newClientID(), transport: .stream(SSETransport(body: body)), counters: hub.counters)
        client.select(selection, as: "")
        // Proxies and browsers: reconnect after 2 s; a first comment so the headers go out now.
        // The hub sends the keep-alive comments.
        body.write(Array("retry: 2000\n: connected\n\n".utf8))
        body.onClose { [hub, holds] in
            client.close()
            hub.remove(client)
            place.release()
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

    // MARK: - WebSocket

    /// A socket's session, on the server's I/O thread: no task waits while the socket is idle
    /// (10 000 idle sockets would hold 10 000 tasks); each message is handled in order, in a task
    /// that lives while messages wait, and the session ends after the last one.
    private func openWebSocket(_ socket: WebSocket, readOnly: Bool, client address: String, place: StreamPlace) {
        let client = StreamClient(id: hub.newClientID(), transport: .stream(WebSocketTransport(socket: socket)), counters: hub.counters)
        hub.add(client)
        let session = CommandSession(gateway: gateway, client: client, readOnly: readOnly)
        socket.onMessage { message in
            let reply: [UInt8]
            if case .text(let text) = message {
                reply = await session.handle(Array(text.utf8))
            } else {
                reply = CommandSession.reply(id: nil, error: BLEError(.invalidParameters, "send JSON text messages"))
            }
            // A reply is never dropped: if the send buffer has no room for it, the client has
            // not read for a long time; it learns why the socket closes.
            if !socket.sendText(utf8: reply) {
                socket.close(code: 1008, reason: "reply did not fit the send buffer: read what the socket sends")
            }
        }
        socket.onClose { [access, limits, hub] code in
            switch code {
            case 1009: access.refusals.refused("websocket", client: address, "a message over \(limits.webSocketMessageBytes) bytes: closed 1009")
            case 1002, 1007: access.refusals.refused("websocket", client: address, "broke the WebSocket protocol: closed \(code)")
            default: break
            }
            client.close()
            hub.remove(client)
            place.release()
            Task { await session.end() }
        }
    }
}
