import BLE
import Management

/// What the kernel tells a trusted reader of its Bluetooth management socket about the
/// simulator's adapters (`ManagementStream`): an advertisement received while discovering, a link
/// up, a link down. Nothing is built while no client reads the stream.
extension Engine {
    /// Device Found: entry `d`'s adapter received `ad` while discovering, and the kernel's
    /// discovery filter kept it. Advertisement and scan response come as one report, as the
    /// kernel merges them (the simulator does not tell them apart).
    func streamDeviceFound(_ d: Int, _ ad: Advertisement) {
        let device = devices[d]
        guard management.isActive, let controller = adapters[device.adapter].controller else { return }
        frameBuffer.removeAll(keepingCapacity: true)
        DeviceFound.append(to: &frameBuffer, controller: controller, address: device.address,
                           addressType: device.config.leAddressType, rssi: ad.rssi,
                           flags: device.config.connectable ? [] : .notConnectable) { ad.appendStructures(to: &$0) }
        management.send(frameBuffer)
    }

    /// Index Added or Index Removed: adapter `a`'s controller was plugged in or pulled out (sent
    /// before bluetoothd adds or removes the adapter, as the kernel does). The stream's list of
    /// controllers follows whether or not a client reads.
    func streamIndex(_ a: Int, added: Bool) {
        guard let controller = adapters[a].controller else { return }
        management.indexChanged(added ? .added(controller) : .removed(controller))
    }

    /// Advertisement Monitor Device Found: entry `d`'s adapter scans passively (a monitor, no
    /// discovery) and received `ad`; handle 0, as a kernel that filters in software reports
    /// every advertisement. No scan request went out: a name sent in the scan response is not in it.
    func streamMonitorFound(_ d: Int, _ ad: Advertisement) {
        let device = devices[d]
        guard management.isActive, let controller = adapters[device.adapter].controller else { return }
        var heard = ad
        if device.config.nameInScanResponse { heard.name = nil }
        frameBuffer.removeAll(keepingCapacity: true)
        DeviceFound.append(to: &frameBuffer, controller: controller, address: device.address,
                           addressType: device.config.leAddressType, rssi: heard.rssi,
                           flags: device.config.connectable ? [] : .notConnectable, monitor: 0) { heard.appendStructures(to: &$0) }
        management.send(frameBuffer)
    }

    /// The monitors one controller takes (the kernel's HCI_MAX_ADV_MONITOR_NUM_HANDLES).
    static let monitorHandles: UInt16 = 32

    /// A command a client of the management stream sent, answered as the kernel answers it: the
    /// advertisement monitor commands; any other is an Unknown Command. A frame whose header
    /// does not fit gets no answer (the kernel refuses its send).
    func managementCommand(_ frame: [UInt8]) -> [[UInt8]] {
        guard frame.count >= Frame.headerSize else { return [] }
        let u16 = { (i: Int) in UInt16(frame[i]) | UInt16(frame[i + 1]) << 8 }
        let opcode = Opcode(rawValue: u16(0)), controller = ControllerIndex(u16(2))
        let parameters = Array(frame[Frame.headerSize...])
        guard Int(u16(4)) == parameters.count else { return [] }
        let code = [UInt8(truncatingIfNeeded: opcode.rawValue), UInt8(opcode.rawValue >> 8)]
        let status = { (s: Status) in [Frame.encode(code: EventCode.commandStatus.rawValue, controller: controller, parameters: code + [s.rawValue])] }
        let complete = { (answer: [UInt8], s: Status) in
            [Frame.encode(code: EventCode.commandComplete.rawValue, controller: controller, parameters: code + [s.rawValue] + answer)]
        }
        guard [.readAdvertisementMonitorFeatures, .addAdvertisementPatternsMonitor, .removeAdvertisementMonitor].contains(opcode) else {
            return status(.unknownCommand)
        }
        guard let a = adapters.indices.first(where: { adapters[$0].present && adapters[$0].controller == controller }) else {
            return status(.invalidIndex)
        }
        switch opcode {
        case .readAdvertisementMonitorFeatures:
            return complete(AdvertisementMonitorFeatures(maxHandles: Self.monitorHandles, maxPatterns: UInt8(AdvertisementMonitor.maxPatterns),
                                                         handles: adapters[a].monitors).parameters, .success)
        case .addAdvertisementPatternsMonitor:
            guard AdvertisementMonitor.patterns(parsing: parameters) != nil else { return status(.invalidParameters) }
            guard let handle = (1...Self.monitorHandles).first(where: { !adapters[a].monitors.contains($0) }) else { return status(.noResources) }
            adapters[a].monitors.append(handle)
            log("\(adapters[a].config.id): advertisement monitor \(handle) added (scanning passively while not discovering)")
            return complete(AdvertisementMonitor.handleParameters(handle), .success)
        default:
            guard let handle = AdvertisementMonitor.handle(parsing: parameters) else { return status(.invalidParameters) }
            if handle == 0 {
                adapters[a].monitors = []
            } else {
                // The kernel completes it with Invalid Parameters (measured in the lab, Linux 6.1).
                guard let i = adapters[a].monitors.firstIndex(of: handle) else {
                    return complete(AdvertisementMonitor.handleParameters(handle), .invalidParameters)
                }
                adapters[a].monitors.remove(at: i)
            }
            log("\(adapters[a].config.id): advertisement monitor \(handle == 0 ? "every one" : String(handle)) removed")
            return complete(AdvertisementMonitor.handleParameters(handle), .success)
        }
    }

    /// Device Connected or Disconnected for the link of entry `d`, which its adapter asked for;
    /// when the peer is another adapter of the simulator (its applications), that adapter sees
    /// the link too: one it did not ask for, and a reason seen from its side.
    func streamLink(_ d: Int, up: Bool, reason: DisconnectReason = .localHost) {
        guard management.isActive else { return }
        streamLink(of: d, up: up, initiated: true, reason: reason)
        if let e = centralEntry(d) {
            let theirs: DisconnectReason = switch reason {
            case .localHost: .remoteHost
            case .remoteHost: .localHost
            default: reason
            }
            streamLink(of: e, up: up, initiated: false, reason: theirs)
        }
    }

    private func streamLink(of d: Int, up: Bool, initiated: Bool, reason: DisconnectReason) {
        let device = devices[d]
        guard let controller = adapters[device.adapter].controller else { return }
        // No EIR: the kernel adds the advertisement it connected on only when it kept one.
        let frame = up
            ? DeviceConnected(controller: controller, address: device.address, addressType: device.config.leAddressType,
                              flags: initiated ? .initiatedConnection : []).frame
            : DeviceDisconnected(controller: controller, address: device.address, addressType: device.config.leAddressType,
                                 reason: reason).frame
        management.send(frame)
    }
}

/// The management module's advertising data (the simulator has an `AdvertisingData` of its own:
/// an LEAdvertisement1's properties).
private typealias ADStructures = Management.AdvertisingData

extension SimulatorConfiguration.Device {
    /// The management socket's name for `addressType`.
    var leAddressType: AddressType { addressType == "random" ? .leRandom : .lePublic }
}

extension Advertisement {
    /// The advertisement's AD structures, in a usual on-air order: Flags, the service UUIDs (the
    /// complete lists), the complete local name, TX power, service data, manufacturer data.
    /// Dictionaries go in key order; a value longer than a structure holds is cut to fit.
    func appendStructures(to bytes: inout [UInt8]) {
        if !flags.isEmpty { ADStructures.appendStructure(type: 0x01, to: &bytes) { $0 += flags.prefix(Self.most) } }
        appendUUIDs(to: &bytes)
        if let name {
            let utf8 = name.utf8
            // A name too long for one structure goes out shortened (0x08), as a device shortens it.
            ADStructures.appendStructure(type: utf8.count <= Self.most ? 0x09 : 0x08, to: &bytes) { $0 += utf8.prefix(Self.most) }
        }
        if let txPower { ADStructures.appendStructure(type: 0x0A, to: &bytes) { $0.append(UInt8(bitPattern: Int8(clamping: txPower))) } }
        for uuid in serviceData.keys.sorted() {
            let width = Self.width(of: uuid)
            // Service Data with a 16-bit (0x16), 32-bit (0x20) or 128-bit (0x21) UUID.
            ADStructures.appendStructure(type: width == 2 ? 0x16 : width == 4 ? 0x20 : 0x21, to: &bytes) {
                Self.append(uuid, width: width, to: &$0)
                $0 += serviceData[uuid]!.prefix(Self.most - width)
            }
        }
        for company in manufacturerData.keys.sorted() {
            ADStructures.appendStructure(type: 0xFF, to: &bytes) {
                $0.appendLittleEndian(UInt64(company), count: 2)
                $0 += manufacturerData[company]!.prefix(Self.most - 2)
            }
        }
    }

    /// The data bytes one AD structure holds.
    private static let most = 254

    /// Complete lists of 16-bit (0x03), 32-bit (0x05) and 128-bit (0x07) service UUIDs, each
    /// only if it has one, cut to what one structure holds.
    private func appendUUIDs(to bytes: inout [UInt8]) {
        for (type, width) in [(UInt8(0x03), 2), (0x05, 4), (0x07, 16)] {
            let list = uuids.filter { Self.width(of: $0) == width }
            guard !list.isEmpty else { continue }
            ADStructures.appendStructure(type: type, to: &bytes) { data in
                for uuid in list.prefix(Self.most / width) { Self.append(uuid, width: width, to: &data) }
            }
        }
    }

    /// The bytes of a UUID's shortest form: 2 for a 16-bit assigned number, 4 for a 32-bit one, else 16.
    private static func width(of uuid: BluetoothUUID) -> Int {
        uuid.uint16 != nil ? 2 : uuid.uint32 != nil ? 4 : 16
    }

    /// `uuid` in `width` bytes, least significant first, as AD structures carry it.
    private static func append(_ uuid: BluetoothUUID, width: Int, to bytes: inout [UInt8]) {
        if width == 16 { bytes += uuid.bytes.reversed() } else { bytes.appendLittleEndian(UInt64(uuid.uint32!), count: width) }
    }
}

extension Array where Element == UInt8 {
    /// The low `count` bytes of `value`, least significant first.
    mutating func appendLittleEndian(_ value: UInt64, count: Int) {
        for i in 0..<count { append(UInt8(truncatingIfNeeded: value >> (8 * i))) }
    }
}
