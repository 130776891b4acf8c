import BLE
import FoundationEssentials
import Glibc
import Synchronization

/// CoreBluetooth's state restoration (`willRestoreState`), for a gateway: what the clients asked
/// for that should outlive gattway — devices to keep connected, kept notification holds,
/// a running scan and its filters, the watch a client started — kept in `<state dir>/state.json` and restored at start.
///
/// The file is written whenever that changes, atomically (a temporary file, fsync, rename,
/// fsync of the directory), so a crash leaves the old state or the new one. A file that cannot
/// be read or parsed is logged and set aside (renamed `state.json.corrupt-<time>`); gattway
/// starts without it.
package final class Restoration: Sendable {
    /// What is kept. Version 1.
    package struct Desired: Codable, Equatable, Sendable {
        package struct Hold: Codable, Hashable, Sendable {
            package var device: String
            package var characteristic: String
        }
        var version = 1
        /// Devices kept connected (connected with `autoReconnect`).
        var devices: [String] = []
        /// Kept notification holds (`NotificationHolds.keep`), by handle.
        var holds: [Hold] = []
        /// The running scan, as the client's request said (only scans without a timeout).
        var scan: ScanRequest?
        /// The watch, as the client's request said (not one that `--watch` started).
        var watch: WatchRequest?
        /// The peripheral role's services and advertisements, as clients defined them.
        var services: [ServiceDefinition]?
        var advertisements: [AdvertisementRequest]?
    }

    /// What the last start restored, for the doors to show.
    package struct Report: Encodable, Sendable {
        package struct Item: Encodable, Sendable {
            package var kind: String
            package var target: String
            /// "restored"; "pending" (a kept device not connected yet, a hold whose notifications
            /// have not started yet, a scan waiting for Bluetooth to be usable); or "failed" (the
            /// error says why; a hold stays held and is tried again).
            package var result: String
            package var error: ErrorBody.Content?
        }
        package var enabled: Bool
        package var file: String?
        /// Whether a state file was found and read.
        package var loaded = false
        /// Why the file was set aside, if it was.
        package var problem: String?
        package var items: [Item] = []
    }

    package let file: String?
    private let log: @Sendable (String) -> Void
    private let desired = Mutex(Desired())
    private let report: Mutex<Report>
    /// The kept scan, while Bluetooth was not usable enough to start it: started when it is.
    private let pendingScan = Mutex<ScanRequest?>(nil)
    /// Saves run one at a time, in order.
    private let saving = Mutex(())
    /// The state file as read at start, until `restore` acts on it.
    private let loaded = Mutex<Desired?>(nil)

    /// `directory` nil: nothing is kept. The state file is read here, before anything is
    /// served, so that the report says from the first request whether it was loaded;
    /// `restore` then acts on it.
    package init(directory: String?, log: @escaping @Sendable (String) -> Void) {
        file = directory.map { $0 + "/state.json" }
        self.log = log
        report = Mutex(Report(enabled: directory != nil, file: directory.map { $0 + "/state.json" }))
        if let state = load() {
            desired.withLock { $0 = state }
            loaded.withLock { $0 = state }
        }
    }

    package var current: Desired { desired.withLock { $0 } }
    package var lastReport: Report { report.withLock { $0 } }

    // MARK: - Recording what clients ask for

    package func kept(_ id: BluetoothAddress, _ keep: Bool) {
        change { d in
            d.devices.removeAll { $0 == id.description }
            if keep { d.devices.append(id.description) }
        }
    }

    package func held(_ id: BluetoothAddress, _ handle: UInt16, _ hold: Bool) {
        let entry = Desired.Hold(device: id.description, characteristic: AttributeSelector.format(handle))
        change { d in
            d.holds.removeAll { $0 == entry }
            if hold { d.holds.append(entry) }
        }
    }

    package func scanning(_ request: ScanRequest?) {
        pendingScan.withLock { $0 = nil }  // a client's scan replaces the kept one
        change { $0.scan = request?.timeout == nil ? request : nil }
    }

    package func watching(_ request: WatchRequest?) {
        change { $0.watch = request }
    }

    package func peripheral(services: [ServiceDefinition], advertisements: [AdvertisementRequest]) {
        change { d in
            d.services = services.isEmpty ? nil : services
            d.advertisements = advertisements.isEmpty ? nil : advertisements
        }
    }

    /// The peripheral role's definitions as kept (at start: what the state file had).
    package var keptPeripheral: (services: [ServiceDefinition], advertisements: [AdvertisementRequest]) {
        desired.withLock { ($0.services ?? [], $0.advertisements ?? []) }
    }

    private func change(_ body: (inout Desired) -> Void) {
        guard file != nil else { return }
        let (before, after) = desired.withLock { d -> (Desired, Desired) in
            let before = d
            body(&d)
            return (before, d)
        }
        if before != after { save() }
    }

    // MARK: - The file

    private func save() {
        guard let file else { return }
        saving.withLock { _ in
            let state = desired.withLock { $0 }
            do {
                try Self.writeAtomically(JSON.encode(state, .pretty), to: file)
            } catch {
                log("state: cannot write \(file): \(error)")
            }
        }
    }

    package struct FileError: Error, CustomStringConvertible {
        package let description: String
    }

    /// Temporary file, fsync, rename over `path`, fsync of the directory.
    package static func writeAtomically(_ bytes: [UInt8], to path: String) throws(FileError) {
        let temporary = path + ".tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw FileError(description: "open \(temporary): \(String(cString: strerror(errno)))") }
        var written = 0
        while written < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + written, bytes.count - written) }
            guard n > 0 else {
                let reason = String(cString: strerror(errno))
                close(fd)
                throw FileError(description: "write \(temporary): \(reason)")
            }
            written += n
        }
        guard fsync(fd) == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw FileError(description: "fsync \(temporary): \(reason)")
        }
        close(fd)
        guard rename(temporary, path) == 0 else { throw FileError(description: "rename to \(path): \(String(cString: strerror(errno)))") }
        let directory = String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)])
        let dirFD = open(directory.isEmpty ? "." : directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dirFD >= 0 {
            fsync(dirFD)
            close(dirFD)
        }
    }

    /// Reads the file; a missing one is no state, an unreadable one is set aside.
    private func load() -> Desired? {
        guard let file else { return nil }
        var bytes: [UInt8] = []
        let fd = open(file, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            if errno == ENOENT { return nil }
            return setAside(file, "cannot open it: \(String(cString: strerror(errno)))")
        }
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            bytes += buffer[0..<n]
            if bytes.count > 16 << 20 { break }
        }
        close(fd)
        do {
            let state = try JSONDecoder().decode(Desired.self, from: Data(bytes))
            guard state.version == 1 else { return setAside(file, "version \(state.version) is not known") }
            report.withLock { $0.loaded = true }
            return state
        } catch {
            return setAside(file, "it is not a state file (\(error))")
        }
    }

    private func setAside(_ file: String, _ problem: String) -> Desired? {
        let aside = file + ".corrupt-" + Timestamp.iso8601(Date()).replacing(":", with: "")
        rename(file, aside)
        log("state: \(file) set aside as \(aside): \(problem); starting without it")
        report.withLock { $0.problem = "\(problem); set aside as \(aside)" }
        return nil
    }

    // MARK: - Restoring

    /// Reads the state and asks for it again: the watch, the scan (when Bluetooth is not usable
    /// yet, once it is), each kept hold (held from now on; the central starts its notifications
    /// whenever the device is connected and has the characteristic, and says how it went), and
    /// each kept device (the central keeps trying those it cannot connect now).
    package func restore(central: Central, holds: NotificationHolds) async {
        guard let state = loaded.withLock({ $0.take() }) else { return }
        log("state: restoring \(state.devices.count) device(s), \(state.holds.count) hold(s)" + (state.scan != nil ? ", a scan" : "")
            + (state.watch != nil ? ", the watch" : ""))
        if let watch = state.watch { await ask("watch") { _ = try await central.startWatch(try watch.options()) } }
        if let scan = state.scan { await restoreScan(scan, central: central) }
        for hold in state.holds {
            let target = "\(hold.device) \(hold.characteristic)"
            guard let id = BluetoothAddress(hold.device), let selector = AttributeSelector(hold.characteristic),
                  case .handle(let handle) = selector else {
                note("hold", target, "failed", BLEError(.invalidParameters, "not a device and handle"))
                continue
            }
            // Noted before it is asked for: the outcome may come at once.
            note("hold", "\(id) \(AttributeSelector.format(handle))", "pending")
            await holds.restoreKept(NotificationHolds.Key(device: id, characteristic: handle))
        }
        for text in state.devices {
            guard let id = BluetoothAddress(text) else {
                note("device", text, "failed", BLEError(.invalidParameters, "not a device address"))
                continue
            }
            do {
                _ = try await central.connect(id, timeout: .seconds(30), autoReconnect: true)
                note("device", text, "restored")
            } catch {
                // Kept: the central tries again, and its holds are restored when it connects.
                note("device", text, "pending", error)
            }
        }
    }

    /// The kept scan: started, or pending until Bluetooth is usable (then `stateChanged` starts
    /// it); a scan the file describes wrongly fails for good.
    private func restoreScan(_ scan: ScanRequest, central: Central) async {
        do throws(BLEError) {
            _ = try await central.startScan(try scan.options())
            note("scan", "scan", "restored")
        } catch {
            if ReconnectPolicy.isPermanent(error) {
                note("scan", "scan", "failed", error)
                return
            }
            note("scan", "scan", "pending", error)
            pendingScan.withLock { $0 = scan }
            log("state: the scan is restored when Bluetooth is usable (\(error.message))")
        }
    }

    /// The manager's state changed: a scan waiting for a usable adapter starts now.
    package func stateChanged(_ status: ManagerStatus, central: Central) {
        guard status.state == .poweredOn, let scan = pendingScan.withLock({ $0.take() }) else { return }
        Task { await self.restoreScan(scan, central: central) }
    }

    /// A device connected: a restored device that was pending is restored now.
    package func connected(_ id: BluetoothAddress) {
        report.withLock { r in
            if let i = r.items.firstIndex(where: { $0.kind == "device" && $0.target == id.description && $0.result == "pending" }) {
                r.items[i].result = "restored"
                r.items[i].error = nil
            }
        }
    }

    /// The central started a hold's notifications again, or could not (`error`): a restored
    /// hold's item says so.
    package func resubscribed(_ id: BluetoothAddress, _ handle: UInt16, _ error: BLEError?) {
        let target = "\(id) \(AttributeSelector.format(handle))"
        let known = report.withLock { r in r.items.contains { $0.kind == "hold" && $0.target == target } }
        guard known else { return }
        note("hold", target, error == nil ? "restored" : "failed", error)
        if error == nil { log("state: the hold on \(target) is restored") }
    }

    /// Asks for the watch or the scan again, noting how it went.
    private func ask(_ kind: String, _ start: () async throws -> Void) async {
        do {
            try await start()
            note(kind, kind, "restored")
        } catch {
            note(kind, kind, "failed", error)
        }
    }

    private func note(_ kind: String, _ target: String, _ result: String, _ error: BLEError? = nil) {
        report.withLock { r in
            r.items.removeAll { $0.kind == kind && $0.target == target }
            r.items.append(Report.Item(kind: kind, target: target, result: result, error: error.map { ErrorBody($0).error }))
        }
    }

    private func note(_ kind: String, _ target: String, _ result: String, _ error: any Error) {
        let mapped: BLEError? = (error as? BLEError) ?? BLEError(.unknown, "\(error)")
        note(kind, target, result, mapped)
    }
}
