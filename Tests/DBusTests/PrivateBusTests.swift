import Glibc
import Testing
@testable import DBus

/// What a private bus leaves behind, and what a later one removes (issue 28).
@Suite struct PrivateBusTests {
    /// A scratch directory standing for /tmp, so that the tests see only their own buses.
    private final class Scratch {
        let path: String
        init() throws {
            var template = Array("/tmp/gattway-test-XXXXXX".utf8CString)
            path = try #require(mkdtemp(&template).map { String(cString: $0) })
        }
        /// A bus directory as `PrivateBus` leaves it when its process is killed, or as an
        /// older build (which wrote no `owner`) leaves it, `age` seconds old.
        @discardableResult
        func leftover(_ name: String, owner: Bool, age: Int = 0) -> String {
            let directory = path + "/" + name
            mkdir(directory, 0o755)
            for file in ["bus.conf"] + (owner ? ["owner"] : []) { close(open(directory + "/" + file, O_CREAT | O_WRONLY, 0o644)) }
            backdate(directory, age)
            return directory
        }
        func backdate(_ directory: String, _ seconds: Int) {
            let then = timeval(tv_sec: time(nil) - seconds, tv_usec: 0)
            utimes(directory, [then, then])
        }
        deinit {
            for name in PrivateBusTests.entries(path) where name.hasPrefix("gattway-") {
                for file in ["bus.conf", "owner", "system_bus_socket"] { unlink("\(path)/\(name)/\(file)") }
                rmdir(path + "/" + name)
            }
            rmdir(path)
        }
    }

    private func exists(_ path: String) -> Bool { access(path, F_OK) == 0 }

    @Test func aDirectoryWhoseOwnerDiedIsRemovedOneInUseIsKept() throws {
        let scratch = try Scratch()
        let dead = scratch.leftover("gattway-bus-dead", owner: true)
        let live = try PrivateBus(directory: scratch.path + "/gattway-bus-live")
        defer { live.stop() }
        // The live bus's daemon is not what keeps it: its owner's lock is.
        scratch.backdate(live.directory, 60)
        #expect(PrivateBus.removeLeftovers(in: scratch.path) == [dead])
        #expect(!exists(dead))
        #expect(exists(live.directory + "/system_bus_socket"))
        live.stop()
        #expect(!exists(live.directory))
    }

    @Test func anOlderBuildsDirectoryIsRemovedOnceOldAndNoDaemonServesIt() throws {
        let scratch = try Scratch()
        let young = scratch.leftover("gattway-bus-young", owner: false)
        let old = scratch.leftover("gattway-bus-old", owner: false, age: 60)
        let other = scratch.leftover("gattway-other", owner: false, age: 60)
        // A daemon that outlived an older build's gattway: its directory has no `owner`.
        let served = try PrivateBus(directory: scratch.path + "/gattway-bus-served")
        defer { served.stop() }
        unlink(served.directory + "/owner")
        scratch.backdate(served.directory, 60)
        #expect(PrivateBus.removeLeftovers(in: scratch.path) == [old])
        #expect(exists(young) && exists(other) && exists(served.directory))
        scratch.backdate(young, 60)
        #expect(PrivateBus.removeLeftovers(in: scratch.path) == [young])
        #expect(exists(other) && exists(served.directory))
    }

    @Test func aDaemonThatCannotStartIsReportedAndLeavesNoDirectory() throws {
        let scratch = try Scratch()
        let directory = scratch.path + "/gattway-bus-x"
        #expect {
            _ = try PrivateBus(directory: directory, daemon: "/nonexistent/dbus-daemon")
        } throws: { error in
            (error as? BusError)?.description == "org.freedesktop.DBus.Error.Spawn.ExecFailed: cannot start /nonexistent/dbus-daemon: No such file or directory"
        }
        #expect(!exists(directory))
    }

    /// A descriptor this process has open without close-on-exec (another test's server socket,
    /// say) is not kept open by the daemon.
    @Test func theDaemonKeepsNoDescriptorOfOurs() throws {
        var ends: [Int32] = [0, 0]
        #expect(pipe(&ends) == 0)
        defer { close(ends[0]); close(ends[1]) }
        let bus = try PrivateBus()
        defer { bus.stop() }
        let daemon = try #require(Self.process(withArgument: "--config-file=\(bus.directory)/bus.conf"))
        var ours = stat()
        fstat(ends[1], &ours)
        let theirs = Self.descriptors(of: daemon)
        #expect(!theirs.isEmpty)
        #expect(!theirs.contains("pipe:[\(ours.st_ino)]"))
    }

    /// The pid of the process one of whose arguments is `argument`.
    private static func process(withArgument argument: String) -> Int32? {
        entries("/proc").compactMap(Int32.init).first { pid in
            guard let file = fopen("/proc/\(pid)/cmdline", "r") else { return false }
            defer { fclose(file) }
            var bytes: [UInt8] = []
            while case let c = fgetc(file), c != EOF { bytes.append(UInt8(c)) }
            return bytes.split(separator: 0).contains { String(decoding: $0, as: UTF8.self) == argument }
        }
    }

    /// What the descriptors of `pid` are (readlink of /proc/PID/fd/N).
    private static func descriptors(of pid: Int32) -> [String] {
        entries("/proc/\(pid)/fd").compactMap { fd in
            var target = [CChar](repeating: 0, count: 256)
            let n = readlink("/proc/\(pid)/fd/\(fd)", &target, target.count - 1)
            return n > 0 ? String(decoding: target[..<n].map(UInt8.init(bitPattern:)), as: UTF8.self) : nil
        }
    }

    fileprivate static func entries(_ path: String) -> [String] { PrivateBus.names(in: path) }
}
