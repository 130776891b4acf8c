import BLE
import DBus
import Synchronization
@testable import BlueZ

/// A bluetoothd that plays GattManager1 and LEAdvertisingManager1 as doc/gatt-api.txt and
/// doc/advertising-api.txt describe them, on one adapter hci0: it reads a registered
/// application's objects (`GetManagedObjects`), sets the handles it gives (`Properties.Set
/// Handle`), reads an advertisement's properties (`GetAll`), and refuses advertisements past
/// `SupportedInstances`. Tests make it call the application as a central's request would.
final class FakePeripheralBlueZ: Sendable {
    let connection: Connection
    let objects: ExportedObjects
    static let adapter = ObjectPath(trusted: "/org/bluez/hci0")

    struct Seen {
        /// The application's objects as read at its last registration.
        var application: [ObjectPath: [String: [String: Value]]] = [:]
        var applicationOwner: String?
        var registrations = 0
        var unregistrations = 0
        var advertisements: [ObjectPath: [String: Value]] = [:]
    }
    let seen = Mutex(Seen())
    /// The next handle to give.
    private let nextHandle = Mutex<UInt16>(0x0010)

    init(address: String, supportedInstances: UInt8 = 1) async throws {
        connection = try Connection(address: address)
        let connection = self.connection
        objects = ExportedObjects(root: .root) { try? connection.send($0) }
        objects.add(Self.adapter, [
            "org.bluez.Adapter1": ["Address": .string("00:AA:00:00:00:01"), "Powered": .bool(true), "Name": .string("fake")],
            "org.bluez.GattManager1": [:],
            "org.bluez.LEAdvertisingManager1": ["SupportedInstances": .byte(supportedInstances), "ActiveInstances": .byte(0)],
        ])
        let objects = self.objects
        objects.setMethodHandler { [weak self] call in
            guard let self else { return }
            Task { await self.answer(call) }
        }
        connection.setMethodCallHandler { call in _ = objects.handle(call) }
        try await connection.requestName("org.bluez")
    }

    private func answer(_ call: Message) async {
        let caller = call.sender ?? ""
        let target = call.body.first?.objectPath
        switch (call.interface, call.member) {
        case ("org.bluez.GattManager1", "RegisterApplication"):
            guard let target, let app = try? await connection.managedObjects(of: caller, at: target) else {
                return objects.answer(call, call.errorReply(BusError(name: "org.bluez.Error.Failed", message: "no application")))
            }
            // Handles as bluetoothd gives them: the service's, then each characteristic's value handle.
            for (path, interfaces) in app.sorted(by: { $0.key < $1.key }) {
                for interface in interfaces.keys where interface.hasPrefix("org.bluez.Gatt") {
                    let asked = UInt16(interfaces[interface]?["Handle"]?.integer ?? 0)
                    let handle = asked != 0 ? asked : nextHandle.withLock { h in defer { h += 2 }; return h }
                    try? await connection.setProperty(caller, path, interface, "Handle", .uint16(handle))
                }
            }
            seen.withLock { $0.application = app; $0.applicationOwner = caller; $0.registrations += 1 }
            objects.answer(call, call.reply())
        case ("org.bluez.GattManager1", "UnregisterApplication"):
            seen.withLock { $0.unregistrations += 1; $0.application = [:] }
            objects.answer(call, call.reply())
        case ("org.bluez.LEAdvertisingManager1", "RegisterAdvertisement"):
            let room = objects.properties(Self.adapter, "org.bluez.LEAdvertisingManager1")?["SupportedInstances"]?.integer ?? 0
            if let target, seen.withLock({ $0.advertisements[target] != nil }) {
                return objects.answer(call, call.errorReply(BusError(name: "org.bluez.Error.AlreadyExists", message: "Already Exists")))
            }
            guard let target, seen.withLock({ $0.advertisements.count }) < room else {
                return objects.answer(call, call.errorReply(BusError(name: "org.bluez.Error.NotPermitted", message: "Maximum advertisements reached")))
            }
            guard let props = try? await connection.getAllProperties(caller, target, "org.bluez.LEAdvertisement1") else {
                return objects.answer(call, call.errorReply(BusError(name: "org.bluez.Error.Failed", message: "no advertisement")))
            }
            seen.withLock { $0.advertisements[target] = props }
            objects.answer(call, call.reply())
            countAdvertisements()
        case ("org.bluez.LEAdvertisingManager1", "UnregisterAdvertisement"):
            _ = seen.withLock { $0.advertisements.removeValue(forKey: target ?? .root) }
            objects.answer(call, call.reply())
            countAdvertisements()
        default:
            objects.answer(call, call.errorReply(BusError(name: "org.freedesktop.DBus.Error.UnknownMethod", message: "fake")))
        }
    }

    /// `ActiveInstances` follows, after the answer (as bluetoothd signals it).
    private func countAdvertisements() {
        let count = seen.withLock { $0.advertisements.count }
        objects.update(Self.adapter, "org.bluez.LEAdvertisingManager1", ["ActiveInstances": .byte(UInt8(count))])
    }

    /// Calls the application as bluetoothd does for a central's request.
    func call(_ owner: String, _ path: ObjectPath, _ interface: String, _ member: String, _ body: [Value] = []) async throws(BusError) -> [Value] {
        try await connection.call(.methodCall(destination: owner, path: path, interface: interface, member: member, body), timeout: .seconds(10)).body
    }

    /// A request's options as bluetoothd passes them.
    static func options(device: String = "dev_11_22_33_44_55_66", offset: UInt16 = 0, type: String? = nil) -> Value {
        var entries: [(String, Value)] = [("device", .objectPath(adapter.child(device)!)), ("offset", .uint16(offset)), ("mtu", .uint16(185))]
        if let type { entries.append(("type", .string(type))) }
        return .stringVariantDictionary(entries)
    }

    /// The adapter powers off or on (BlueZ keeps the applications and advertisements registered).
    func setPowered(_ on: Bool) {
        objects.update(Self.adapter, "org.bluez.Adapter1", ["Powered": .bool(on)])
    }

    /// A remote central connects to hci0 (BlueZ lists it as a device there) or disconnects.
    func central(_ address: String, connected: Bool) {
        let path = Self.adapter.child(BlueZ.pathElement(BluetoothAddress(address)!))!
        if objects.properties(path, "org.bluez.Device1") == nil {
            objects.add(path, ["org.bluez.Device1": ["Address": .string(address), "AddressType": .string("public"),
                                                     "Connected": .bool(false), "Adapter": .objectPath(Self.adapter)]], announce: true)
        }
        objects.update(path, "org.bluez.Device1", ["Connected": .bool(connected)])
    }

    /// bluetoothd exits: the name goes, and with it everything registered. The name is given up
    /// before the connection closes: the bus daemon notices a closed connection later, and a new
    /// bluetoothd asking for the name before then was refused (a full unit run in CI).
    func exit() async {
        try? await connection.releaseName("org.bluez")
        connection.close()
    }
}
