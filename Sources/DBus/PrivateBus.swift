import CDBus
import Dispatch
import Glibc
import Synchronization
import Threading

/// A `dbus-daemon` of our own, listening on `<directory>/system_bus_socket` with an allow-all
/// policy: for the simulator, demos and tests. Mounting `directory` as `/run/dbus` in a
/// container makes it that container's system bus.
///
/// Nothing is left behind for long, however this process ends: the daemon dies with it (see
/// `Daemon`), and the directory, which a killed process cannot remove, is removed by the next
/// `PrivateBus` to start once no process uses it (`removeLeftovers`). Its owner holds an flock on
/// it for as long as the owner lives; the kernel releases it at any death.
public final class PrivateBus: Sendable {
    public let address: String
    public let directory: String
    private let daemon: Daemon
    /// The directory, open and flock'ed.
    private let lock: Int32
    private let stopped = Atomic<Bool>(false)

    /// What a bus's directory holds: `owner` (the creator's pid) says that the creator locks it.
    private static let entries = ["system_bus_socket", "bus.conf", "owner"]
    private static let prefix = "gattway-bus-"

    /// Starts the daemon and waits until it prints its address. With `directory` (e.g. that of
    /// a bus stopped before), the daemon listens there, so clients find it at the same address.
    public init(directory chosen: String? = nil, daemon name: String = "dbus-daemon") throws(BusError) {
        Self.removeLeftovers()
        if let chosen {
            guard mkdir(chosen, 0o755) == 0 || errno == EEXIST else { throw Self.failed("cannot make \(chosen)") }
            directory = chosen
        } else {
            var template = Array("/tmp/\(Self.prefix)XXXXXX".utf8CString)
            guard let dir = mkdtemp(&template) else { throw Self.failed("mkdtemp failed") }
            directory = String(cString: dir)
        }
        chmod(directory, 0o755)
        // Locked before `owner` exists: a directory with `owner` and no lock has lost its owner.
        lock = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard lock >= 0, flock(lock, LOCK_EX | LOCK_NB) == 0 else {
            if lock >= 0 { close(lock) }
            throw Self.failed("\(directory) is used by another bus")
        }
        let configPath = directory + "/bus.conf"
        let output: Int32
        do throws(BusError) {
            try Self.writeFile("\(getpid())\n", to: directory + "/owner")
            try Self.writeFile(Self.configuration(listen: "unix:path=\(directory)/system_bus_socket"), to: configPath)
            let started = try Daemon.start([name, "--config-file=\(configPath)", "--nofork", "--nopidfile", "--print-address=1"])
            daemon = started.daemon
            output = started.output
        } catch {
            Self.removeDirectory(directory)
            close(lock)
            throw error
        }
        // The first line the daemon prints is its address; EOF means it failed to start.
        var line: [UInt8] = []
        var byte: UInt8 = 0
        while read(output, &byte, 1) == 1, byte != UInt8(ascii: "\n") { line.append(byte) }
        close(output)
        guard !line.isEmpty else {
            daemon.stop()
            Self.removeDirectory(directory)
            close(lock)
            throw BusError(name: "org.freedesktop.DBus.Error.Spawn.ChildExited", message: "\(name) exited before printing its address")
        }
        address = "unix:path=\(directory)/system_bus_socket"
    }

    /// Stops the daemon and removes its directory. False if the daemon was still there 5 s after
    /// its SIGKILL (stuck in the kernel): it is left, so that a stop never hangs; the caller says so.
    @discardableResult
    public func stop() -> Bool {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return true }
        let ended = daemon.stop()
        Self.removeDirectory(directory)
        close(lock)
        return ended
    }

    /// Removes the `gattway-bus-*` directories in `parent` that no process uses, and returns them:
    /// those whose owner died (its lock is free), and those of builds that took no lock, once
    /// 10 s old (younger, one may be starting). Not one where a daemon still accepts
    /// connections (an older build's that outlived its owner, or another build's running bus),
    /// nor another user's.
    @discardableResult
    package static func removeLeftovers(in parent: String = "/tmp") -> [String] {
        names(in: parent).filter { $0.hasPrefix(prefix) }.map { parent + "/" + $0 }.filter(removeIfUnused)
    }

    /// The names in a directory (`.` and `..` too).
    package static func names(in directory: String) -> [String] {
        guard let listing = opendir(directory) else { return [] }
        defer { closedir(listing) }
        var names: [String] = []
        while let entry = readdir(listing) {
            // The name read in place: a record is only as long as its name (d_reclen), so copying
            // the whole struct (`entry.pointee`) reads past it, and past the mapping at a page's
            // end (a crash seen in the tests).
            names.append(String(cString: UnsafeRawPointer(entry).advanced(by: MemoryLayout<dirent>.offset(of: \.d_name)!)
                .assumingMemoryBound(to: CChar.self)))
        }
        return names
    }

    private static func removeIfUnused(_ path: String) -> Bool {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }  // and with it the lock
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_uid == getuid() else { return false }
        if faccessat(fd, "owner", F_OK, 0) == 0 {
            guard flock(fd, LOCK_EX | LOCK_NB) == 0 else { return false }
        } else if time(nil) - info.st_mtim.tv_sec < 10 {
            return false
        }
        guard !listening(path + "/system_bus_socket") else { return false }
        removeDirectory(path)
        return access(path, F_OK) != 0
    }

    /// Whether a process accepts connections on the Unix socket at `path` (a full backlog counts).
    private static func listening(_ path: String) -> Bool {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue | SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        return connected == 0 || errno == EAGAIN
    }

    /// The bus's files, then the directory (which stays if something else was put in it).
    private static func removeDirectory(_ directory: String) {
        for name in entries { unlink(directory + "/" + name) }
        rmdir(directory)
    }

    private static func writeFile(_ text: String, to path: String) throws(BusError) {
        guard let file = fopen(path, "w") else { throw failed("cannot write \(path)") }
        fputs(text, file)
        fclose(file)
    }

    private static func failed(_ message: String) -> BusError {
        BusError(name: "org.freedesktop.DBus.Error.Failed", message: message)
    }

    private static func configuration(listen address: String) -> String {
        """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>system</type>
          <listen>\(address)</listen>
          <auth>EXTERNAL</auth>
          <auth>ANONYMOUS</auth>
          <allow_anonymous/>
          <policy context="default">
            <allow user="*"/>
            <allow own="*"/>
            <allow send_type="method_call"/>
            <allow send_type="signal"/>
            <allow send_type="method_return"/>
            <allow send_type="error"/>
            <allow receive_type="method_call"/>
            <allow receive_type="signal"/>
            <allow receive_type="method_return"/>
            <allow receive_type="error"/>
          </policy>
        </busconfig>
        """
    }
}

/// The daemon process, which cannot outlive this one: it is started (`gw_spawn_tied`) by a
/// thread of its own that then waits for it, so that thread lives exactly as long as the daemon,
/// and the kernel sends the daemon SIGKILL when that thread ends: only once the daemon has
/// exited, or when this process ends, however it ends (clean exit, SIGKILL, crash). Forked from
/// a thread of Swift's pool, the daemon would die when the pool retires that thread.
private final class Daemon: Sendable {
    private struct State {
        var pid: pid_t = 0
        var output: Int32 = -1
        var exited = false
    }
    private let state = Mutex(State())
    private let started = DispatchSemaphore(value: 0)
    private let ended = DispatchSemaphore(value: 0)

    /// Starts `argv`; returns it and the read end of its stdout.
    static func start(_ argv: [String]) throws(BusError) -> (daemon: Daemon, output: Int32) {
        let daemon = Daemon()
        Threads.start(name: "gattway-bus") {
            let cArgs = argv.map { strdup($0) } + [nil]
            var output: Int32 = -1
            let pid = gw_spawn_tied(cArgs, &output)
            cArgs.forEach { free($0) }
            daemon.state.withLock { $0 = State(pid: pid, output: output) }
            daemon.started.signal()
            if pid > 0 { daemon.waitForExit(pid) }
        }
        daemon.started.wait()
        let (pid, output) = daemon.state.withLock { ($0.pid, $0.output) }
        guard pid > 0 else {
            throw BusError(name: "org.freedesktop.DBus.Error.Spawn.ExecFailed", message: "cannot start \(argv[0]): \(String(cString: strerror(-pid)))")
        }
        return (daemon, output)
    }

    private func waitForExit(_ pid: pid_t) {
        var info = siginfo_t()
        // WNOWAIT: the pid stays the daemon's (a zombie) until `exited` is set, so `send`
        // never reaches a process that reused it.
        while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) != 0 && errno == EINTR {}
        state.withLock { $0.exited = true }
        waitpid(pid, nil, 0)
        ended.signal()
    }

    private func send(_ number: Int32) {
        state.withLock { if !$0.exited { kill($0.pid, number) } }
    }

    /// SIGTERM, and SIGKILL if it has not exited 5 s later; whether it exited (false: not 5 s
    /// after the SIGKILL either). Once only.
    func stop() -> Bool {
        send(SIGTERM)
        guard ended.wait(timeout: .now() + 5) == .timedOut else { return true }
        send(SIGKILL)
        return ended.wait(timeout: .now() + 5) == .success
    }
}
