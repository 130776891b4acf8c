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
/// The object paths use the service, characteristic-declaration and descriptor handles, as
/// bluetoothd's do.
struct AttributeTable: Sendable {
    static let firstHandle = 0x000A
    static let cccd = BluetoothUUID(uint16: 0x2902)
    static let extendedProperties = BluetoothUUID(uint16: 0x2900)

    struct Service: Sendable {
        let uuid: BluetoothUUID
        let handle: UInt16
        let primary: Bool
        let path: ObjectPath
        var characteristics: [Int] = []
    }

    struct Characteristic: Sendable {
        let uuid: BluetoothUUID
        let handle: UInt16
        let valueHandle: UInt16
        let service: Int
        let path: ObjectPath
        /// The ATT properties bluetoothd shows in `Flags`.
        let flags: [String]
        let read: Permission
        let write: Permission
        /// Security needed to subscribe (the CCCD write).
        let subscribe: Permission
        let configuration: SimulatorConfiguration.Characteristic
        var descriptors: [Int] = []

        var canNotify: Bool { flags.contains("notify") || flags.contains("indicate") }
        var hasWriteWithoutResponse: Bool { flags.contains("write-without-response") }
        var hasWrite: Bool { flags.contains("write") }
        var hasReliableWrite: Bool { flags.contains("reliable-write") }
        /// 0x0001 notification or 0x0002 indication, as the CCCD value.
        var subscriptionValue: [UInt8] { flags.contains("notify") ? [0x01, 0x00] : [0x02, 0x00] }
    }

    struct Descriptor: Sendable {
        let uuid: BluetoothUUID
        let handle: UInt16
        let characteristic: Int
        let path: ObjectPath
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

    init(_ device: SimulatorConfiguration.Device, path devicePath: ObjectPath) {
        var next = Self.firstHandle
        for (i, s) in device.services.enumerated() {
            // Validation guarantees that a configured handle does not overlap the previous service.
            if let h = s.handle, i == 0 || h >= next { next = h }
            let serviceHandle = UInt16(truncatingIfNeeded: next)
            let servicePath = devicePath.child("service" + hex4(serviceHandle))!
            var service = Service(uuid: s.uuid, handle: serviceHandle, primary: s.primary, path: servicePath)
            next += 1
            for c in s.characteristics {
                let handle = UInt16(truncatingIfNeeded: next)
                let path = servicePath.child("char" + hex4(handle))!
                let flags = Set(c.flags)
                var characteristic = Characteristic(
                    uuid: c.uuid, handle: handle, valueHandle: handle &+ 1, service: services.count, path: path,
                    flags: Self.remoteFlags(flags),
                    read: Self.permission(flags, plain: ["read"], suffix: "read"),
                    write: Self.permission(flags, plain: ["write", "write-without-response", "reliable-write",
                                                          "authenticated-signed-writes"], suffix: "write"),
                    subscribe: Self.permission(flags, plain: ["notify", "indicate"], suffix: "notify", alsoSuffix: "indicate"),
                    configuration: c)
                next += 2
                for d in Self.automaticDescriptors(of: c) + c.descriptors {
                    let dHandle = UInt16(truncatingIfNeeded: next)
                    let dFlags = Set(d.flags)
                    characteristic.descriptors.append(descriptors.count)
                    descriptors.append(Descriptor(
                        uuid: d.uuid, handle: dHandle, characteristic: characteristics.count,
                        path: path.child("desc" + hex4(dHandle))!,
                        read: Self.permission(dFlags, plain: ["read"], suffix: "read"),
                        write: Self.permission(dFlags, plain: ["write"], suffix: "write"),
                        initialValue: d.value.bytes))
                    next += 1
                }
                service.characteristics.append(characteristics.count)
                characteristics.append(characteristic)
            }
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

    /// The attribute a path handle or value handle names: (characteristic index, descriptor index).
    func attribute(handle: Int) -> (characteristic: Int?, descriptor: Int?) {
        if let c = characteristics.firstIndex(where: { Int($0.handle) == handle || Int($0.valueHandle) == handle }) {
            return (c, nil)
        }
        if let d = descriptors.firstIndex(where: { Int($0.handle) == handle }) { return (nil, d) }
        return (nil, nil)
    }
}

/// Four lowercase hex digits, as in bluetoothd's object paths.
func hex4(_ n: UInt16) -> String { hex16(n).lowercased() }
