import Management

/// gattway's advertisement monitors, written down where they outlive the process (the state
/// directory), so that the monitors of a gattway that ended without removing them (SIGKILL, the
/// watchdog's SIGABRT) are removed by the next one. The kernel keeps a monitor until it is
/// removed, whoever added it, and a controller takes 32: a service restarted by its watchdog now
/// and then would otherwise fill the controller up, and it would scan passively for nobody.
///
/// One line per monitor, `BOOT-ID hciN HANDLE`: a monitor of another boot is gone with it. What
/// is listed is removed only if the controller still has that handle (Read Advertisement Monitor
/// Features), and only before gattway adds its own there. A handle freed by a controller that
/// went away and came back while no gattway ran, then given to another program, would be taken
/// for gattway's: the one case this cannot tell.
public struct MonitorLedger: Sendable {
    /// This boot's id (`/proc/sys/kernel/random/boot_id`).
    public let boot: String
    /// The ledger's text, nil when there is none.
    public let read: @Sendable () -> String?
    /// Writes the ledger's text (atomically); why not, when it could not.
    public let write: @Sendable (String) -> String?

    public init(boot: String, read: @escaping @Sendable () -> String?, write: @escaping @Sendable (String) -> String?) {
        (self.boot, self.read, self.write) = (boot, read, write)
    }

    /// This boot's monitors, as written; lines of other boots, and lines that do not parse, are
    /// left out.
    func load() -> [ControllerIndex: Set<UInt16>] {
        var monitors: [ControllerIndex: Set<UInt16>] = [:]
        for line in (read() ?? "").split(separator: "\n") {
            let words = line.split(separator: " ")
            guard words.count == 3, words[0] == boot, let controller = ControllerIndex(adapterName: String(words[1])),
                  let handle = UInt16(words[2]), handle != 0 else { continue }
            monitors[controller, default: []].insert(handle)
        }
        return monitors
    }

    /// Writes `monitors` down in place of what was; why not, when it could not.
    func save(_ monitors: [ControllerIndex: Set<UInt16>]) -> String? {
        write(Self.text(monitors, boot: boot))
    }

    static func text(_ monitors: [ControllerIndex: Set<UInt16>], boot: String) -> String {
        monitors.sorted { $0.key < $1.key }.flatMap { controller, handles in
            handles.sorted().map { "\(boot) \(controller) \($0)\n" }
        }.joined()
    }
}
