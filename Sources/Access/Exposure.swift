import Sockets

/// Who can reach what gattway serves: a listener beyond loopback must ask for credentials, or
/// anyone who reaches it may use every device. The HTTP API asks for tokens, the ESPHome API for
/// its Noise key; a serial port is a raw TCP port and can ask for nothing. The operator may serve
/// an unguarded listener anyway (`--no-auth`); gattway refuses to start otherwise.
public enum Exposure {
    /// One place gattway listens, and what guards it.
    public struct Listener: Sendable, Equatable {
        public enum Door: Sendable, Equatable {
            /// The HTTP API (`--listen`), guarded when it has tokens.
            case http(tokens: Bool)
            /// The ESPHome native API (`--esphome-api`), guarded when it has a key.
            case esphome(key: Bool)
            /// A device's UART as a TCP port (`--serial`): never guarded.
            case serial(device: String)
        }

        public var host: String
        public var port: UInt16
        public var door: Door

        public init(host: String, port: UInt16, door: Door) {
            self.host = host
            self.port = port
            self.door = door
        }

        /// Whether something asks a client for credentials before it may use a device.
        public var isGuarded: Bool {
            switch door {
            case .http(let tokens): tokens
            case .esphome(let key): key
            case .serial: false
            }
        }
    }

    /// Whether `host` is a loopback address, reachable from this machine only.
    public static func isLoopback(_ host: String) -> Bool { TCPListener.isLoopback(host) }

    /// Why serving `listeners` is refused, for the first that is open to others: what it would
    /// let anyone do, and what to give instead. Nil when each is loopback, guarded, or
    /// `servedAnyway` (`--no-auth`).
    public static func refusal(_ listeners: [Listener], servedAnyway: Bool) -> String? {
        guard !servedAnyway, let open = listeners.first(where: { !$0.isGuarded && !isLoopback($0.host) }) else { return nil }
        let host = open.host.contains(":") ? "[\(open.host)]" : open.host
        switch open.door {
        case .http:
            return """
                --listen \(open.host) without tokens would let anyone who reaches it use every device.
                Give --tokens FILE (or GATTWAY_TOKENS), or --no-auth to do it anyway.
                """
        case .esphome:
            return """
                --esphome-api \(host):\(open.port) without a key would let anyone who reaches it use every device.
                Give --esphome-key BASE64 (or GATTWAY_ESPHOME_KEY), or --no-auth to do it anyway.
                """
        case .serial(let device):
            return """
                --serial \(host):\(open.port) would let anyone who reaches it use \(device) (a raw TCP port has no tokens).
                Serve it on 127.0.0.1 (and tunnel it), or give --no-auth to do it anyway.
                """
        }
    }
}
