import GatewayCore
import HTTPServer

/// An SSE response body as a stream client's transport.
struct SSETransport: EventTransport {
    let body: StreamBody

    var isSSE: Bool { true }
    var room: Int { body.capacityBytes - body.bufferedBytes }
    func write(_ bytes: [UInt8]) -> Bool { body.write(bytes) }
    func write(count: Int, _ fill: (inout [UInt8]) -> Void) -> Bool { body.write(count: count, flush: false, fill) }
    func flush() { body.flush() }
    func onWritable(_ handler: @escaping @Sendable () -> Void) { body.onWritable(handler) }
    func keepAlive() { _ = body.write(Array(": keep-alive\n\n".utf8)) }
    func disconnect(reason: String) { body.close() }
}

/// A WebSocket as a stream client's transport: each event one text message.
struct WebSocketTransport: EventTransport {
    let socket: WebSocket

    var isSSE: Bool { false }
    var room: Int { socket.sendBufferCapacity - socket.bufferedBytes }
    func write(_ bytes: [UInt8]) -> Bool { socket.sendText(utf8: bytes) }
    func write(count: Int, _ fill: (inout [UInt8]) -> Void) -> Bool { socket.sendText(count: count, flush: false, fill) }
    func flush() { socket.flush() }
    func onWritable(_ handler: @escaping @Sendable () -> Void) { socket.onWritable(handler) }
    func keepAlive() {}
    func disconnect(reason: String) { socket.close(code: 1008, reason: reason) }
}
