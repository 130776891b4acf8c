import GatewayCore
import HTTPServer

/// An SSE response body as a stream client's transport.
struct SSETransport: EventTransport {
    let body: StreamBody

    var framing: (any EventFraming.Type)? { SSEFraming.self }
    var room: Int { body.capacityBytes - body.bufferedBytes }
    func write(_ bytes: [UInt8]) -> Bool { body.write(bytes) }
    func write(count: Int, _ fill: (inout [UInt8]) -> Void) -> Bool { body.write(count: count, flush: false, fill) }
    func flush() { body.flush() }
    func onWritable(_ handler: @escaping @Sendable () -> Void) { body.onWritable(handler) }
    func keepAlive() { _ = body.write(Array(": keep-alive\n\n".utf8)) }
    func disconnect(reason: String) { body.close() }
}

/// Server-Sent Events: each event is `id:` (its seq, which a client sends back as
/// `Last-Event-ID`), `event:` (its type) and one `data:` line of JSON, then a blank line. A
/// `dropped` notice has no `id:`: it is not an event to resume after.
enum SSEFraming: EventFraming {
    static func head(_ event: HubEvent) -> [UInt8] {
        Array("id: \(event.seq)\nevent: \(event.type.rawValue)\ndata: ".utf8)
    }

    static var tail: [UInt8] { [0x0A, 0x0A] }

    static func dropped(_ json: [UInt8]) -> [UInt8] { Array("event: dropped\ndata: ".utf8) + json + tail }
}

/// A WebSocket as a stream client's transport: each event one text message, its JSON alone.
struct WebSocketTransport: EventTransport {
    let socket: WebSocket

    var framing: (any EventFraming.Type)? { nil }
    var room: Int { socket.sendBufferCapacity - socket.bufferedBytes }
    func write(_ bytes: [UInt8]) -> Bool { socket.sendText(utf8: bytes) }
    func write(count: Int, _ fill: (inout [UInt8]) -> Void) -> Bool { socket.sendText(count: count, flush: false, fill) }
    func flush() { socket.flush() }
    func onWritable(_ handler: @escaping @Sendable () -> Void) { socket.onWritable(handler) }
    /// Nothing: the socket keeps itself alive with pings.
    func keepAlive() {}
    func disconnect(reason: String) { socket.close(code: 1008, reason: reason) }
}
