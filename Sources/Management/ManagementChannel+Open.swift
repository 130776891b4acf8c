import CLinux
import Glibc

extension ManagementChannel {
    /// What `open` found.
    public enum Opening: Sendable {
        /// The channel reads the kernel's events.
        case opened(ManagementChannel, Kernel)
        /// This process may not read them (it needs root or CAP_NET_ADMIN): keep the D-Bus path.
        case notPermitted(String)
        /// There is no management socket here (no Bluetooth in this kernel, another network
        /// namespace than the host's, a kernel that does not answer): keep the D-Bus path.
        case unavailable(String)
    }

    /// What the kernel said when the channel opened.
    public struct Kernel: Sendable, Equatable {
        public var version: ManagementVersion
        /// What this socket may send and will be sent.
        public var supported: SupportedCommands
        /// The controllers it knows (those in use may be missing from it: log it).
        public var controllers: [ControllerIndex]
    }

    /// Opens the kernel's management socket (AF_BLUETOOTH, BTPROTO_HCI, the control channel) and
    /// reads it (`open(descriptor:)`).
    ///
    /// Without CAP_NET_ADMIN, older kernels refuse the bind and newer ones bind an untrusted
    /// socket that is never sent device-found events: both are `.notPermitted`.
    public static func open(controllers: Set<ControllerIndex>, timeout: Duration = .seconds(2),
                            log: @escaping @Sendable (String) -> Void = { _ in },
                            ended: @escaping @Sendable (String) -> Void = { _ in },
                            controllersChanged: @escaping @Sendable (ControllerNews) -> Void = { _ in },
                            handler: @escaping @Sendable (ManagementEvent) -> Void) -> Opening {
        let fd = socket(AF_BLUETOOTH, Int32(SOCK_RAW.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue),
                        GW_BTPROTO_HCI)
        guard fd >= 0 else { return refusal("socket(AF_BLUETOOTH, BTPROTO_HCI)", errno).opening }
        guard gw_bind_hci_control(fd) == 0 else {
            let code = errno
            Glibc.close(fd)
            return refusal("bind to the management channel", code).opening
        }
        return open(descriptor: fd, controllers: controllers, timeout: timeout, log: log, ended: ended,
                    controllersChanged: controllersChanged, handler: handler)
    }

    /// Asks the socket `fd` (the kernel's, or one that serves the same frames: the simulator's)
    /// for its version, the commands and events it allows this socket and its controllers
    /// (within `timeout`), then reads it (see `init(reading:)`), keeping its controllers current.
    /// The channel owns `fd` from now on (closed if it does not open).
    public static func open(descriptor fd: Int32, controllers: Set<ControllerIndex>, timeout: Duration = .seconds(2),
                            log: @escaping @Sendable (String) -> Void = { _ in },
                            ended: @escaping @Sendable (String) -> Void = { _ in },
                            controllersChanged: @escaping @Sendable (ControllerNews) -> Void = { _ in },
                            handler: @escaping @Sendable (ManagementEvent) -> Void) -> Opening {
        let flags = fcntl(fd, F_GETFL)
        guard flags >= 0, fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0 else {
            let failed = refusal("fcntl", errno)
            Glibc.close(fd)
            return failed.opening
        }
        let kernel: Kernel
        switch handshake(fd: fd, timeout: timeout) {
        case .success(let answered): kernel = answered
        case .failure(let refusal):
            Glibc.close(fd)
            return refusal.opening
        }
        do {
            return .opened(try ManagementChannel(reading: fd, controllers: controllers, known: Set(kernel.controllers), log: log,
                                                 ended: ended, controllersChanged: controllersChanged, handler: handler),
                           kernel)
        } catch {
            return .unavailable(error.description)
        }
    }

    /// Why the channel did not open.
    enum Refusal: Error, Equatable {
        case notPermitted(String)
        case unavailable(String)

        var opening: Opening {
            switch self {
            case .notPermitted(let why): .notPermitted(why)
            case .unavailable(let why): .unavailable(why)
            }
        }
    }

    static func refusal(_ call: String, _ code: Int32) -> Refusal {
        let text = "\(call): \(String(cString: strerror(code)))"
        return switch code {
        case EPERM, EACCES: .notPermitted(text + " (needs root or CAP_NET_ADMIN)")
        case EAFNOSUPPORT, EPROTONOSUPPORT:
            .unavailable(text + " (no Bluetooth in this kernel, or a network namespace other than the host's)")
        default: .unavailable(text)
        }
    }

    /// The commands sent when the channel opens, each with no parameters and for no controller.
    static let openingCommands: [Opcode] = [.readVersion, .readCommands, .readIndexList]

    /// Sends `openingCommands` on `fd` (non-blocking) and reads their answers until `timeout`;
    /// other frames read meanwhile are passed over (advertisements repeat).
    static func handshake(fd: Int32, timeout: Duration) -> Result<Kernel, Refusal> {
        for opcode in openingCommands {
            let frame = Frame.command(opcode)
            guard send(fd, frame, frame.count, Int32(MSG_NOSIGNAL)) == frame.count else {
                return .failure(refusal("sending \(opcode)", errno))
            }
        }
        let deadline = ContinuousClock.now + timeout
        var answers: [Opcode: [UInt8]] = [:]
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Frame.maxSize, alignment: 8)
        defer { buffer.deallocate() }
        while answers.count < openingCommands.count {
            let count = recv(fd, buffer.baseAddress, buffer.count, 0)
            if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
                let left = deadline - .now
                guard left > .zero else {
                    let missing = openingCommands.filter { answers[$0] == nil }.map(\.description)
                    return .failure(.unavailable("the kernel did not answer \(missing.joined(separator: ", ")) within \(timeout)"))
                }
                var watched = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                _ = poll(&watched, 1, Int32(clamping: left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000 + 1))
                continue
            }
            guard count > 0 else {
                return .failure(count == 0 ? .unavailable("the management socket closed") : refusal("reading the management socket", errno))
            }
            let event = try? Event(parsing: UnsafeRawBufferPointer(rebasing: buffer[..<count]))
            switch event {
            case .commandComplete(let opcode, let status, _, let parameters) where openingCommands.contains(opcode):
                if let refused = refusal(opcode, status) { return .failure(refused) }
                answers[opcode] = parameters
            case .commandStatus(let opcode, let status, _) where openingCommands.contains(opcode):
                if let refused = refusal(opcode, status) { return .failure(refused) }
            default:
                continue
            }
        }
        guard let version = ManagementVersion(parameters: answers[.readVersion]!) else {
            return .failure(.unavailable("the kernel's answer to \(Opcode.readVersion) does not fit its format"))
        }
        guard let supported = SupportedCommands(parameters: answers[.readCommands]!) else {
            return .failure(.unavailable("the kernel's answer to \(Opcode.readCommands) does not fit its format"))
        }
        guard let index = IndexList(parameters: answers[.readIndexList]!) else {
            return .failure(.unavailable("the kernel's answer to \(Opcode.readIndexList) does not fit its format"))
        }
        guard supported.includesDeviceFound else {
            return .failure(.notPermitted("the kernel (management \(version)) sends this socket no device-found events: it is"
                                          + " untrusted (needs root or CAP_NET_ADMIN)"))
        }
        return .success(Kernel(version: version, supported: supported, controllers: index.controllers))
    }

    /// A failed answer as a refusal; nil for success (Command Status's success means "pending").
    private static func refusal(_ opcode: Opcode, _ status: Status) -> Refusal? {
        switch status {
        case .success: nil
        case .permissionDenied: .notPermitted("the kernel refused \(opcode): \(status) (needs root or CAP_NET_ADMIN)")
        default: .unavailable("the kernel answered \(opcode) with \(status)")
        }
    }
}
