import CLinux
import Glibc

extension ManagementChannel {
    /// Reads the same frames from a Unix seqpacket socket at `path` (the simulator's stream of
    /// its adapters' events, which answers the same commands) instead of the kernel's socket;
    /// see `open(descriptor:)`.
    public static func open(socketPath path: String, controllers: Set<ControllerIndex>, timeout: Duration = .seconds(2),
                            log: @escaping @Sendable (String) -> Void = { _ in },
                            ended: @escaping @Sendable (String) -> Void = { _ in },
                            controllersChanged: @escaping @Sendable (ControllerNews) -> Void = { _ in },
                            handler: @escaping @Sendable (ManagementEvent) -> Void) -> Opening {
        let fd: Int32
        do throws(ChannelError) {
            fd = try connect(socketPath: path)
        } catch {
            return .unavailable(error.description)
        }
        return open(descriptor: fd, controllers: controllers, timeout: timeout, log: log, ended: ended,
                    controllersChanged: controllersChanged, handler: handler)
    }

    /// A socket connected to `path`.
    private static func connect(socketPath path: String) throws(ChannelError) -> Int32 {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let room = MemoryLayout.size(ofValue: address.sun_path)
        let utf8 = Array(path.utf8)
        guard !utf8.isEmpty, utf8.count < room else { throw ChannelError("\(path): not a usable socket path (1 to \(room - 1) bytes)") }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: utf8) }
        let fd = socket(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw ChannelError(call: "socket(AF_UNIX, SOCK_SEQPACKET)", errno: errno) }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else {
            let error = ChannelError(call: "connect to \(path)", errno: errno)
            Glibc.close(fd)
            throw error
        }
        return fd
    }
}
