import BLE
import DBus

/// What the peripheral demands before it answers an access.
enum Security: Int, Comparable, Sendable {
    case none, encrypted, authenticated
    static func < (a: Security, b: Security) -> Bool { a.rawValue < b.rawValue }
}

/// The peer's permission for one kind of access: allowed at all, and at which security level.
struct Permission: Sendable, Equatable {
    var allowed: Bool
    var security: Security = .none
    var authorize = false
    static let denied = Permission(allowed: false)
}

/// One peripheral's GATT database with handles allocated as a GATT server does: the service
/// declaration, then per characteristic its declaration, its value and its descriptors.
struct AttributeTable: Sendable {
    static let firstHandle = 0x000A
    static let cccd = BluetoothUUID(uint16: 0x2902)
    static let serviceChanged = BluetoothUUID(uint16: 0x2A05)
    static let databaseHash = BluetoothUUID(uint16: 0x2B2A)
    static let extendedProperties = BluetoothUUID(uint16: 0x2900)

    struct Service: Sendable {
        let uuid: BluetoothUUID
        let handle: UInt16
        /// Its last attribute's handle (the declaration's own when it has none).
        var endHandle: UInt16
        let primary: Bool
        var characteristics: [Int] = []
    }

    struct Characteristic: CharacteristicProperties, Sendable {
        let uuid: BluetoothUUID
        let handle: UInt16
        let valueHandle: UInt16
        let service: Int
        /// The ATT properties bluetoothd shows in `Flags`.
        let flags: [String]
        let read: Permission
        let write: Permission
        /// Security needed to subscribe (the CCCD write).
        let subscribe: Permission
        let configuration: SimulatorConfiguration.Characteristic
        var descriptors: [Int] = []
    }

    struct Descriptor: Sendable {
        let uuid: BluetoothUUID
        let handle: UInt16
        let characteristic: Int
        let read: Permission
        let write: Permission
        let initialValue: [UInt8]
        var isCCCD: Bool { uuid == AttributeTable.cccd }
    }

    private(set) var services: [Service] = []
    private(set) var characteristics: [Characteristic] = []
    private(set) var descriptors: [Descriptor] = []

    /// Attributes one characteristic takes: declaration, value, descriptors (with the ones a
    /// server adds itself: extended properties, CCCD).
    static func handleCount(of c: SimulatorConfiguration.Characteristic) -> Int {
        2 + automaticDescriptors(of: c).count + c.descriptors.count
    }

    private static func automaticDescriptors(of c: SimulatorConfiguration.Characteristic) -> [SimulatorConfiguration.Descriptor] {
        var out: [SimulatorConfiguration.Descriptor] = []
        let flags = Set(c.flags)
        let configured = Set(c.descriptors.map(\.uuid))
        let ext = (flags.contains("reliable-write") ? 1 : 0) | (flags.contains("writable-auxiliaries") ? 2 : 0)
        if ext != 0, !configured.contains(extendedProperties) {
            out.append(.init(uuid: extendedProperties, value: [UInt8(ext), 0], flags: ["read"]))
        }
        let notifying = ["notify", "indicate"].contains { f in flags.contains { $0.hasSuffix(f) } }
        if notifying, !configured.contains(cccd) {
            out.append(.init(uuid: cccd, value: [0, 0], flags: ["read", "write"]))
        }
        return out
    }

    /// Where a registered application's service has its attributes (bluetoothd's gatt_db may
    /// leave gaps where the client asked for handles): its last handle, and per characteristic
    /// its value handle and its own descriptors' handles.
    struct Placement: Sendable {
        let end: UInt16
        let characteristics: [(value: UInt16, descriptors: [UInt16])]
    }

    init(_ configured: [SimulatorConfiguration.Service], placements: [Placement]? = nil) {
        var next = Self.firstHandle
        for (i, s) in configured.enumerated() {
            // Validation guarantees that a configured handle does not overlap the previous service.
            if let h = s.handle, i == 0 || h >= next { next = h }
            let serviceHandle = UInt16(truncatingIfNeeded: next)
            var service = Service(uuid: s.uuid, handle: serviceHandle, endHandle: serviceHandle, primary: s.primary)
            next += 1
            for (j, c) in s.characteristics.enumerated() {
                if let placed = placements?[i].characteristics[j] { next = Int(placed.value) - 1 }
                let handle = UInt16(truncatingIfNeeded: next)
                let flags = Set(c.flags)
                var characteristic = Characteristic(
                    uuid: c.uuid, handle: handle, valueHandle: handle &+ 1, service: services.count,
                    flags: Self.remoteFlags(flags),
                    read: Self.permission(flags, plain: ["read"], suffix: "read"),
                    write: Self.permission(flags, plain: ["write", "write-without-response", "reliable-write",
                                                          "authenticated-signed-writes"], suffix: "write"),
                    subscribe: Self.permission(flags, plain: ["notify", "indicate"], suffix: "notify", alsoSuffix: "indicate"),
                    configuration: c)
                next += 2
                // bluetoothd's own server adds the CCCD before the extended properties (database_add_chrc).
                let automatic = placements == nil ? Self.automaticDescriptors(of: c) : Self.automaticDescriptors(of: c).reversed()
                for (k, d) in (automatic + c.descriptors).enumerated() {
                    if k >= automatic.count, let placed = placements?[i].characteristics[j] {
                        next = Int(placed.descriptors[k - automatic.count])
                    }
                    let dHandle = UInt16(truncatingIfNeeded: next)
                    let dFlags = Set(d.flags)
                    characteristic.descriptors.append(descriptors.count)
                    descriptors.append(Descriptor(
                        uuid: d.uuid, handle: dHandle, characteristic: characteristics.count,
                        read: Self.permission(dFlags, plain: ["read"], suffix: "read"),
                        write: Self.permission(dFlags, plain: ["write"], suffix: "write"),
                        initialValue: d.value.bytes))
                    next += 1
                }
                service.characteristics.append(characteristics.count)
                characteristics.append(characteristic)
            }
            service.endHandle = placements?[i].end ?? UInt16(truncatingIfNeeded: next - 1)
            next = Int(service.endHandle) + 1
            services.append(service)
        }
    }

    /// The characteristic properties (and extended properties) that `flags` give, in the order
    /// bluetoothd lists them.
    static func remoteFlags(_ flags: Set<String>) -> [String] {
        func any(_ names: String...) -> Bool { names.contains { flags.contains($0) } }
        var out: [String] = []
        if any("broadcast") { out.append("broadcast") }
        if any("read", "encrypt-read", "encrypt-authenticated-read", "secure-read") { out.append("read") }
        if any("write-without-response") { out.append("write-without-response") }
        if any("write", "encrypt-write", "encrypt-authenticated-write", "secure-write") { out.append("write") }
        if any("notify", "encrypt-notify", "encrypt-authenticated-notify", "secure-notify") { out.append("notify") }
        if any("indicate", "encrypt-indicate", "encrypt-authenticated-indicate", "secure-indicate") { out.append("indicate") }
        if any("authenticated-signed-writes") { out.append("authenticated-signed-writes") }
        if any("extended-properties", "reliable-write", "writable-auxiliaries") { out.append("extended-properties") }
        if any("reliable-write") { out.append("reliable-write") }
        if any("writable-auxiliaries") { out.append("writable-auxiliaries") }
        return out
    }

    /// Allowed when a plain flag or a security variant ("encrypt-<x>", ...) is present; the
    /// strictest variant present sets the security level.
    private static func permission(_ flags: Set<String>, plain: [String], suffix: String, alsoSuffix: String? = nil) -> Permission {
        let suffixes = [suffix] + (alsoSuffix.map { [$0] } ?? [])
        func has(_ prefix: String) -> Bool { suffixes.contains { flags.contains(prefix + $0) } }
        var p = Permission(allowed: plain.contains { flags.contains($0) })
        if has("encrypt-") { p.allowed = true; p.security = .encrypted }
        if has("encrypt-authenticated-") || has("secure-") { p.allowed = true; p.security = .authenticated }
        p.authorize = flags.contains("authorize")
        return p
    }

    /// What the server holds at one handle.
    enum Attribute: Equatable {
        case service(Int)
        case declaration(Int)
        case value(Int)
        case descriptor(Int)
    }

    /// The attribute at `handle`, nil when the server has none there.
    func attribute(at handle: UInt16) -> Attribute? {
        guard let s = services.lastIndex(where: { $0.handle <= handle }), handle <= services[s].endHandle else { return nil }
        if services[s].handle == handle { return .service(s) }
        for c in services[s].characteristics {
            if characteristics[c].handle == handle { return .declaration(c) }
            if characteristics[c].valueHandle == handle { return .value(c) }
            if let x = characteristics[c].descriptors.first(where: { descriptors[$0].handle == handle }) { return .descriptor(x) }
        }
        return nil
    }

    /// A declaration's value as a client reads it: the service UUID, or a characteristic's
    /// properties, value handle and UUID (UUIDs little-endian, 2 bytes when they have a 16-bit form).
    func declarationValue(_ attribute: Attribute) -> [UInt8] {
        func le(_ uuid: BluetoothUUID) -> [UInt8] {
            if let short = uuid.uint16 { return [UInt8(short & 0xFF), UInt8(short >> 8)] }
            return uuid.bytes.reversed()
        }
        switch attribute {
        case .service(let s): return le(services[s].uuid)
        case .declaration(let c):
            let info = characteristics[c]
            let bits = ["broadcast", "read", "write-without-response", "write", "notify", "indicate",
                        "authenticated-signed-writes", "extended-properties"]
            let properties = bits.enumerated().reduce(UInt8(0)) { info.flags.contains($1.element) ? $0 | 1 << $1.offset : $0 }
            return [properties, UInt8(info.valueHandle & 0xFF), UInt8(info.valueHandle >> 8)] + le(info.uuid)
        case .value, .descriptor: return []
        }
    }
}

/// What a characteristic's ATT properties (bluetoothd's `Flags`) let a client do.
protocol CharacteristicProperties {
    var flags: [String] { get }
}

extension CharacteristicProperties {
    var canNotify: Bool { flags.contains("notify") || flags.contains("indicate") }
    var hasWriteWithoutResponse: Bool { flags.contains("write-without-response") }
    var hasWrite: Bool { flags.contains("write") }
    var hasReliableWrite: Bool { flags.contains("reliable-write") }
    /// 0x0001 notification or 0x0002 indication, as the CCCD value.
    var subscriptionValue: [UInt8] { flags.contains("notify") ? [0x01, 0x00] : [0x02, 0x00] }
}

/// Four lowercase hex digits, as in bluetoothd's object paths.
func hex4(_ n: UInt16) -> String { hex16(n).lowercased() }
