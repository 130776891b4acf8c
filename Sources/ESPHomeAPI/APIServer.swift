import CLinux
import Dispatch
import Glibc
import Sockets
import Synchronization
import Threading

/// Why the server could not start (its socket), or a call it depends on failed.
public struct APIServerError: Error, CustomStringConvertible, Sendable {
    public let description: String

    init(_ description: String) { self.description = description }

    init(call: String, errno code: Int32) {
        self.init(SocketError(call: call, errno: code).description)
    }
}

/// A TCP server for the ESPHome native API: plaintext, or Noise with a key.
///
/// One thread of its own does all the socket I/O with epoll (edge-triggered), woken by an
/// eventfd for what other threads ask (a client to write to or to end, the stop). Each client's
/// framing state lives on that thread; what other threads touch is behind the client's lock
/// (`APIClient`). A client that breaks the protocol, has another key, sends a frame over the
/// limit, says nothing after connecting or stops answering pings, or does not read, is ended,
/// it alone, and the log says why in one line.
public final class APIServer: Sendable {
    public struct Configuration: Sendable {
        /// An IPv4 or IPv6 literal, or "localhost".
        public var host: String
        /// 0: a free port, in `APIServer.port`.
        public var port: UInt16
        /// The Noise key; nil: plaintext.
        public var key: EncryptionKey?
        /// Clients at once; one more is refused (and logged).
        public var maxClients = 16
        /// Bytes waiting to be written to one client; past it the client is ended.
        public var maxBuffered = 1 << 20
        /// The largest message payload taken from a client (the protocol's frames hold 65535 at most).
        public var maxPayload = Int(UInt16.max)
        /// From the connection to the client's first message (after the handshake, under Noise).
        public var handshakeTimeout = Duration.seconds(10)
        /// A client silent this long is pinged; silent twice as long, it is ended.
        public var pingInterval = Duration.seconds(60)
        /// How long a closing client's last bytes may take.
        public var closeTimeout = Duration.seconds(2)

        public init(host: String, port: UInt16, key: EncryptionKey? = nil) {
            self.host = host
            self.port = port
            self.key = key
        }
    }

    /// Who the server says it is in a Noise server hello (clients may check both).
    public struct Identity: Sendable {
        public var name: String
        /// 12 lower-case hex digits, as ESPHome writes it there.
        public var macAddress: String

        public init(name: String, macAddress: String) {
            self.name = name
            self.macAddress = macAddress
        }
    }

    /// The port it listens on.
    public let port: UInt16
    let mailbox: Mailbox
    private let done = DispatchSemaphore(value: 0)
    private let stopped = Atomic<Bool>(false)
    let identity: Mutex<Identity>

    public init(_ configuration: Configuration, identity: Identity, handler: any APIHandler,
                log: @escaping @Sendable (String) -> Void) throws(APIServerError) {
        let (listener, port): (Int32, UInt16)
        do throws(SocketError) {
            (listener, port) = try TCPListener.open(host: configuration.host, port: configuration.port)
        } catch {
            throw APIServerError(error.description)
        }
        self.port = port
        self.identity = Mutex(identity)
        let epoll = epoll_create1(Int32(EPOLL_CLOEXEC))
        let wake = eventfd(0, Int32(EFD_CLOEXEC) | Int32(EFD_NONBLOCK))
        guard epoll >= 0, wake >= 0 else {
            let code = errno
            for fd in [listener, epoll, wake] where fd >= 0 { close(fd) }
            throw APIServerError(call: "epoll", errno: code)
        }
        mailbox = Mailbox(wakeFD: wake)
        let done = self.done
        Threads.start(name: "esphome-api") { [self] in
            Loop(configuration: configuration, server: self, listener: listener, epoll: epoll, handler: handler, log: log).run()
            done.signal()
        }
    }

    /// The name and MAC of the next Noise server hellos.
    public func setIdentity(_ identity: Identity) {
        self.identity.withLock { $0 = identity }
    }

    /// Tells every client that the server is going (a DisconnectRequest, one try to write it),
    /// closes them and the socket, and returns when the thread has ended.
    public func stop() {
        guard !stopped.exchange(true, ordering: .relaxed) else { return }
        mailbox.post(.shutDown)
        done.wait()
    }

    enum Command {
        /// A client has bytes to write, or is to end.
        case attend(UInt64)
        case shutDown
    }

    /// Commands for the thread, and the eventfd that wakes it.
    final class Mailbox: Sendable {
        let wakeFD: Int32
        private let queue = Mutex<[Command]>([])

        init(wakeFD: Int32) { self.wakeFD = wakeFD }

        deinit { close(wakeFD) }

        func post(_ command: Command) {
            let first = queue.withLock { queue -> Bool in
                queue.append(command)
                return queue.count == 1
            }
            if first { eventfd_write(wakeFD, 1) }
        }

        func take() -> [Command] {
            var value: eventfd_t = 0
            _ = eventfd_read(wakeFD, &value)
            return queue.withLock { queue in
                defer { queue = [] }
                return queue
            }
        }
    }
}
