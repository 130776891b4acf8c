import Glibc
import Synchronization

/// A `dbus-daemon` of our own, listening on `<directory>/system_bus_socket` with an allow-all
/// policy: for the simulator, demos and tests. Mounting `directory` as `/run/dbus` in a
/// container makes it that container's system bus.
public final class PrivateBus: Sendable {
    public let address: String
    public let directory: String
    private let pid: pid_t
    private let stopped = Atomic<Bool>(false)

    /// Starts the daemon and waits until it prints its address. With `directory` (e.g. that of
    /// a bus stopped before), the daemon listens there, so clients find it at the same address.
    public init(directory chosen: String? = nil, daemon: String = "dbus-daemon") throws(BusError) {
        if let chosen {
            guard mkdir(chosen, 0o755) == 0 || errno == EEXIST else {
                throw BusError(name: "org.freedesktop.DBus.Error.Failed", message: "cannot make \(chosen)")
            }
            directory = chosen
        } else {
            var template = Array("/tmp/gattway-bus-XXXXXX".utf8CString)
            guard let dir = mkdtemp(&template) else { throw BusError(name: "org.freedesktop.DBus.Error.Failed", message: "mkdtemp failed") }
            directory = String(cString: dir)
        }
        chmod(directory, 0o755)
        let config = """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>system</type>
          <listen>unix:path=\(directory)/system_bus_socket</listen>
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
        let configPath = directory + "/bus.conf"
        guard let file = fopen(configPath, "w") else { throw BusError(name: "org.freedesktop.DBus.Error.Failed", message: "cannot write \(configPath)") }
        fputs(config, file)
        fclose(file)

        var pipeFDs: [Int32] = [0, 0]
        guard pipe(&pipeFDs) == 0 else { throw BusError(name: "org.freedesktop.DBus.Error.Failed", message: "pipe failed") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        posix_spawn_file_actions_adddup2(&actions, pipeFDs[1], 1)
        posix_spawn_file_actions_addclose(&actions, pipeFDs[0])
        // Unprivileged, it warns that it cannot raise its fd limit; nothing else goes to stderr.
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        // The child must not inherit a blocked SIGTERM (signal handling via Dispatch blocks it).
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        sigaddset(&defaults, SIGTERM)
        sigaddset(&defaults, SIGINT)
        sigaddset(&defaults, SIGPIPE)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        defer { posix_spawnattr_destroy(&attributes) }
        let argv = [daemon, "--config-file=\(configPath)", "--nofork", "--nopidfile", "--print-address=1"]
        var cArgs = argv.map { strdup($0) } + [nil]
        defer { cArgs.forEach { free($0) } }
        var child: pid_t = 0
        let spawned = posix_spawnp(&child, daemon, &actions, &attributes, &cArgs, environ)
        posix_spawn_file_actions_destroy(&actions)
        Glibc.close(pipeFDs[1])
        guard spawned == 0 else {
            Glibc.close(pipeFDs[0])
            throw BusError(name: "org.freedesktop.DBus.Error.Spawn.ExecFailed", message: "cannot start \(daemon): \(String(cString: strerror(spawned)))")
        }
        pid = child
        // The first line the daemon prints is its address; EOF means it failed to start.
        var line: [UInt8] = []
        var byte: UInt8 = 0
        while read(pipeFDs[0], &byte, 1) == 1, byte != UInt8(ascii: "\n") { line.append(byte) }
        Glibc.close(pipeFDs[0])
        guard !line.isEmpty else {
            var status: Int32 = 0
            waitpid(child, &status, 0)
            throw BusError(name: "org.freedesktop.DBus.Error.Spawn.ChildExited", message: "\(daemon) exited before printing its address")
        }
        address = "unix:path=\(directory)/system_bus_socket"
    }

    /// Stops the daemon and removes its directory.
    public func stop() {
        // Once only: a second SIGTERM could reach a reused pid.
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        kill(pid, SIGTERM)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        unlink(directory + "/system_bus_socket")
        unlink(directory + "/bus.conf")
        rmdir(directory)
    }
}
