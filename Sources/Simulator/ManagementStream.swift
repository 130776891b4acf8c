import Dispatch
import Glibc
import Management
import Sockets
import Synchronization

/// The kernel's Bluetooth management events for the simulator's adapters, as a trusted reader of
/// the management socket gets them beside bluetoothd: one frame per packet (the 6-byte header and
/// the parameters), on Unix SOCK_SEQPACKET sockets, to every client from its connection on. A
/// client's commands are answered as the kernel answers the ones a reader sends when it opens
/// (Read Management Version Information, Read Management Supported Commands, Read Controller Index
/// List: the controllers plugged in), each in order with the events; any other goes to the
/// command handler (the engine: the advertisement monitor commands), whose answer goes to that
/// client alone, or is an unknown command without one.
///
/// A client that does not read never holds the engine up: frames are sent with MSG_DONTWAIT into
/// the client's socket buffer (SO_SNDBUF `sendBuffer`, which the kernel caps at
/// net.core.wmem_max), and one that does not fit is dropped for that client and counted, as the
/// kernel drops an event for a management socket whose receive buffer is full. A client that
/// closed its end is let go when its hang-up is read, or at the next frame.
final class ManagementStream: Sendable {
    /// Unchecked: Dispatch's sources may be cancelled from any thread.
    private struct Client: @unchecked Sendable {
        /// Unique for the stream's life (a descriptor's number may come back for another client).
        let id: Int
        let fd: Int32
        /// Reads its commands; cancelled when the client is let go, and closes `fd` then.
        let source: any DispatchSourceRead
        var dropped = 0
    }

    private let clients = Mutex<[Client]>([])
    /// The controllers plugged in (what Read Controller Index List answers). Changed and read
    /// with `clients` held, so that a list and the Index Added or Removed frames keep their order.
    private let controllers = Mutex<Set<ControllerIndex>>([])
    private let queue = DispatchQueue(label: "gattway-sim.management")
    private let nextClient = Atomic<Int>(0)
    /// Answers one command frame (the engine's): the frames to send back to its client.
    typealias CommandHandler = @Sendable ([UInt8]) async -> [[UInt8]]
    private let commands = Mutex<CommandHandler?>(nil)
    /// The handler's commands, answered one at a time in the order read.
    private let commandQueue: AsyncStream<(client: Int, frame: [UInt8])>.Continuation
    private let commandTask = Mutex<Task<Void, Never>?>(nil)
    /// Some client is connected: the engine builds no frame while none is.
    private let active = Atomic<Bool>(false)
    private let counters = Mutex(ManagementStreamCounters())
    private let listener = Mutex<Listener?>(nil)
    private let log: @Sendable (String) -> Void

    /// What each client's socket may hold unread: about 2 700 Device Found frames of ~60 bytes
    /// when the kernel grants it (it doubles the value asked; 212 992 bytes by default hold 278),
    /// more than a second of the benchmark's 2 000 advertisements a second.
    static let sendBuffer: Int32 = 1 << 20

    init(log: @escaping @Sendable (String) -> Void) {
        self.log = log
        let (stream, continuation) = AsyncStream<(client: Int, frame: [UInt8])>.makeStream(bufferingPolicy: .bufferingOldest(256))
        commandQueue = continuation
        let task = Task { [weak self] in
            for await (client, frame) in stream {
                guard let self, let handle = self.commands.withLock({ $0 }) else { continue }
                self.answer(client, await handle(frame))
            }
        }
        commandTask.withLock { $0 = task }
    }

    deinit {
        commandQueue.finish()
        commandTask.withLock { $0?.cancel() }
    }

    /// Who answers the commands the stream does not (none: they are unknown commands).
    func setCommandHandler(_ handler: @escaping CommandHandler) {
        commands.withLock { $0 = handler }
    }

    /// Sends `frames` to client `id` alone (a command's answer), if it is still there.
    private func answer(_ id: Int, _ frames: [[UInt8]]) {
        clients.withLock { list in
            guard let client = list.first(where: { $0.id == id }) else { return }
            for frame in frames { _ = Glibc.send(client.fd, frame, frame.count, Int32(MSG_DONTWAIT) | Int32(MSG_NOSIGNAL)) }
        }
    }

    var isActive: Bool { active.load(ordering: .relaxed) }

    var currentCounters: ManagementStreamCounters {
        var current = counters.withLock { $0 }
        current.clients = clients.withLock { $0.count }
        return current
    }

    /// A connected pair: one end is a client, the other is returned (the caller owns it).
    func connect() throws(SocketError) -> Int32 {
        var fds: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0 else {
            throw SocketError(call: "socketpair", errno: errno)
        }
        add(fds[0])
        return fds[1]
    }

    /// Listens on a Unix SOCK_SEQPACKET socket at `path` (a socket file already there, left by
    /// an earlier run, is removed) and takes every client that connects.
    func listen(path: String) throws(SocketError) {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard !bytes.isEmpty, bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            throw SocketError("\(path): a Unix socket path is 1 to \(MemoryLayout.size(ofValue: address.sun_path) - 1) bytes")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        var status = stat()
        if lstat(path, &status) == 0 {
            guard status.st_mode & S_IFMT == S_IFSOCK else { throw SocketError("\(path) exists and is not a socket") }
            unlink(path)
        }
        let fd = socket(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { throw SocketError(call: "socket", errno: errno) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0, Glibc.listen(fd, 16) == 0 else {
            let error = SocketError(call: "listening on \(path)", errno: errno)
            Glibc.close(fd)
            throw error
        }
        let source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        source.setEventHandler { [weak self] in self?.acceptWaiting(fd) }
        source.setCancelHandler { Glibc.close(fd) }
        let previous = listener.withLock { current in
            defer { current = Listener(source: source, path: path) }
            return current
        }
        previous?.source.cancel()
        source.resume()
    }

    private func acceptWaiting(_ listener: Int32) {
        while true {
            let fd = accept(listener, nil, nil)
            if fd >= 0 {
                _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
                add(fd)
                continue
            }
            if errno == EINTR || errno == ECONNABORTED { continue }
            if errno != EAGAIN && errno != EWOULDBLOCK { log("management stream: accept: \(String(cString: strerror(errno)))") }
            return
        }
    }

    private func add(_ fd: Int32) {
        var size = Self.sendBuffer
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        let source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        let id = nextClient.add(1, ordering: .relaxed).newValue
        source.setEventHandler { [weak self] in self?.readCommands(of: id, fd) }
        source.setCancelHandler { Glibc.close(fd) }
        clients.withLock { list in
            list.append(Client(id: id, fd: fd, source: source))
            active.store(true, ordering: .relaxed)
        }
        counters.withLock { $0.connected += 1 }
        source.resume()
    }

    /// The controllers plugged in when the stream starts.
    func setControllers(_ plugged: Set<ControllerIndex>) {
        clients.withLock { _ in controllers.withLock { $0 = plugged } }
    }

    /// A controller plugged in or pulled out: the set changes and every client is told, as the
    /// kernel tells its management sockets before bluetoothd adds or removes the adapter.
    func indexChanged(_ event: IndexEvent) {
        send(event.frame) {
            controllers.withLock {
                switch event {
                case .added(let c): $0.insert(c)
                case .removed(let c): $0.remove(c)
                }
            }
        }
    }

    /// Answers the commands waiting on client `fd`; lets it go when it closed its end.
    private func readCommands(of id: Int, _ fd: Int32) {
        var buffer = [UInt8](repeating: 0, count: 512)
        while true {
            let count = recv(fd, &buffer, buffer.count, Int32(MSG_DONTWAIT))
            if count > 0 {
                answer(Array(buffer[..<count]), to: id, fd)
                continue
            }
            if count < 0 && errno == EINTR { continue }
            if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return }
            letGo(fd)
            return
        }
    }

    /// The answer to one command frame, sent to its client only: the stream's own commands in
    /// order with the events, the others through the command handler.
    private func answer(_ command: [UInt8], to id: Int, _ fd: Int32) {
        guard command.count >= Frame.headerSize else { return }  // the kernel drops it too
        let opcode = Opcode(rawValue: UInt16(command[0]) | UInt16(command[1]) << 8)
        let controller = ControllerIndex(UInt16(command[2]) | UInt16(command[3]) << 8)
        let handled = commands.withLock { $0 != nil }
        if handled, !Self.ownCommands.contains(opcode) {
            if case .dropped = commandQueue.yield((id, command)) { log("management stream: too many commands waiting; one dropped") }
            return
        }
        clients.withLock { list in
            guard list.contains(where: { $0.id == id }) else { return }
            let parameters: [UInt8]? = switch opcode {
            case .readVersion: ManagementVersion(version: 1, revision: 22).parameters
            case .readCommands: SupportedCommands(commands: (Self.ownCommands + (handled ? Self.handlerCommands : [])).map(\.rawValue),
                                                  events: Self.events.map(\.rawValue)).parameters
            case .readIndexList: IndexList(controllers.withLock { $0 }.sorted()).parameters
            default: nil
            }
            let frame: [UInt8] = switch (parameters, command.count == Frame.headerSize, controller == .none) {
            case (let parameters?, true, true): Frame.commandComplete(opcode, .success, controller: controller, parameters: parameters)
            case (.some, _, _): Frame.commandStatus(opcode, .invalidParameters, controller: controller)
            case (nil, _, _): Frame.commandStatus(opcode, .unknownCommand, controller: controller)
            }
            _ = Glibc.send(fd, frame, frame.count, Int32(MSG_DONTWAIT) | Int32(MSG_NOSIGNAL))
        }
    }

    /// The events the stream sends (what Read Management Supported Commands lists).
    private static let events: [EventCode] = [.commandComplete, .commandStatus, .indexAdded, .indexRemoved,
                                              .deviceConnected, .deviceDisconnected, .deviceFound, .advertisementMonitorDeviceFound]
    /// The commands the stream answers itself, and those the engine's handler answers.
    private static let ownCommands: [Opcode] = [.readVersion, .readCommands, .readIndexList]
    private static let handlerCommands: [Opcode] = [.readAdvertisementMonitorFeatures, .addAdvertisementPatternsMonitor,
                                                    .removeAdvertisementMonitor]

    /// Client `fd` closed its end: it is let go (its source closes it).
    private func letGo(_ fd: Int32) {
        let gone = clients.withLock { list -> Client? in
            guard let i = list.firstIndex(where: { $0.fd == fd }) else { return nil }
            let client = list.remove(at: i)
            if list.isEmpty { active.store(false, ordering: .relaxed) }
            return client
        }
        guard let gone else { return }
        gone.source.cancel()
        counters.withLock { $0.left += 1 }
    }

    /// Sends one frame to every client (called by the engine, one frame at a time); `first` runs
    /// before, with the clients held.
    func send(_ frame: [UInt8], first: () -> Void = {}) {
        var dropped = 0, gone = 0, logged: [String] = []
        frame.withUnsafeBytes { bytes in
            clients.withLock { list in
                first()
                var i = 0
                while i < list.count {
                    let sent = Glibc.send(list[i].fd, bytes.baseAddress, bytes.count, Int32(MSG_DONTWAIT) | Int32(MSG_NOSIGNAL))
                    if sent == bytes.count {
                        i += 1
                        continue
                    }
                    let code = errno
                    if sent < 0 && code == EINTR { continue }
                    if sent < 0 && (code == EAGAIN || code == EWOULDBLOCK || code == ENOBUFS) {
                        list[i].dropped += 1
                        dropped += 1
                        if list[i].dropped == 1 {
                            logged.append("management stream: a client does not keep up: frames that do not fit its socket are dropped (counted)")
                        }
                        i += 1
                        continue
                    }
                    // It closed its end (EPIPE, ECONNRESET): let it go.
                    list.remove(at: i).source.cancel()
                    gone += 1
                }
                if list.isEmpty { active.store(false, ordering: .relaxed) }
            }
        }
        counters.withLock { c in
            c.frames += 1
            c.dropped += dropped
            c.left += gone
        }
        logged.forEach(log)
    }

    /// Stops listening (removing the socket file) and lets every client go.
    func stop() {
        if let listening = listener.withLock({ current in defer { current = nil }; return current }) {
            listening.source.cancel()
            unlink(listening.path)
        }
        clients.withLock { list in
            for client in list { client.source.cancel() }
            list = []
            active.store(false, ordering: .relaxed)
        }
    }
}

/// The listening socket's accept source. Unchecked: Dispatch's sources may be cancelled from any thread.
private final class Listener: @unchecked Sendable {
    let source: any DispatchSourceRead
    let path: String

    init(source: any DispatchSourceRead, path: String) {
        self.source = source
        self.path = path
    }
}

/// What the simulator's management event stream did since it started.
public struct ManagementStreamCounters: Sendable, Equatable {
    /// Clients connected now.
    public var clients = 0
    /// Clients that connected, and those that left.
    public var connected = 0
    public var left = 0
    /// Frames sent out (each to every client connected then).
    public var frames = 0
    /// Frames a client's full socket did not take, over all clients.
    public var dropped = 0
}
