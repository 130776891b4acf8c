import DBus
import Synchronization
import Testing
@testable import BlueZ

private let device = ObjectPath("/org/bluez/hci0/dev_F0_00_00_00_00_01")!

/// bluetoothd's unique name in these tests.
private let bluez = ":1.7"

private func added(_ path: ObjectPath, _ props: [(String, Value)], serial: UInt32) -> Message {
    var m = Message.signal(path: .root, interface: Connection.objectManagerInterface, member: "InterfacesAdded", [
        .objectPath(path),
        .dictionary(key: Signature("s")!, value: Signature("a{sv}")!, [.init(.string("org.bluez.Device1"), .stringVariantDictionary(props))]),
    ])
    m.serial = serial
    m.sender = bluez
    return m
}

private func changed(_ path: ObjectPath, _ props: [(String, Value)], invalidated: [String] = [], serial: UInt32,
                     sender: String = bluez) -> Message {
    var m = Message.signal(path: path, interface: Connection.propertiesInterface, member: "PropertiesChanged",
                           [.string("org.bluez.Device1"), .stringVariantDictionary(props), .strings(invalidated)])
    m.serial = serial
    m.sender = sender
    return m
}

@Suite struct ObjectTreeTests {
    /// The crash after ~15 000 events: the observer, kept in a `Mutex`, ran one frame deeper on
    /// every signal. 100 000 signals must reach it at the depth of the first (counted, not timed).
    @Test func observerRunsAtTheSameDepthAfter100000Signals() {
        let tree = ObjectTree()
        tree.load([:], replySerial: 0, owner: bluez)
        tree.apply(added(device, [("Address", .string("F0:00:00:00:00:01")), ("RSSI", .int16(-60))], serial: 1))
        let depths = Mutex<(count: Int, first: Int?, last: Int?)>((0, nil, nil))
        tree.setObserver { _ in
            var local = 0
            let depth = withUnsafeMutablePointer(to: &local) { Int(bitPattern: $0) }
            depths.withLock { d in
                d.count += 1
                if d.first == nil { d.first = depth }
                d.last = depth
            }
        }
        let signal = changed(device, [("RSSI", .int16(-50))], serial: 2)
        for i in 0..<100_000 {
            tree.apply(signal)
            if i == 1_000, let (first, last) = depths.withLock({ d in d.first.flatMap { f in d.last.map { (f, $0) } } }),
               abs(first - last) > 4096 { break }  // growing: stop before the stack overflows
        }
        let seen = depths.withLock { $0 }
        #expect(seen.count == 100_000)
        if let first = seen.first, let last = seen.last {
            #expect(abs(first - last) < 1024, "signal 100 000 reached the observer \(abs(first - last)) bytes deeper than the first")
        }
    }

    @Test func signalsUpdateTheMirror() {
        let tree = ObjectTree()
        tree.load([:], replySerial: 0, owner: bluez)
        tree.apply(added(device, [("Address", .string("F0:00:00:00:00:01")), ("RSSI", .int16(-60))], serial: 1))
        tree.apply(changed(device, [("RSSI", .int16(-50))], serial: 2))
        #expect(tree.properties(at: device, "org.bluez.Device1")?["RSSI"] == .int16(-50))
        tree.apply(changed(device, [], invalidated: ["RSSI"], serial: 3))
        #expect(tree.properties(at: device, "org.bluez.Device1")?["RSSI"] == nil)
        var removed = Message.signal(path: .root, interface: Connection.objectManagerInterface, member: "InterfacesRemoved",
                                     [.objectPath(device), .strings(["org.bluez.Device1"])])
        removed.serial = 4
        removed.sender = bluez
        tree.apply(removed)
        #expect(tree.interfaces(at: device) == nil)
    }

    @Test func signalsDuringLoadAreAppliedOnlyIfNewerThanTheSnapshot() {
        let tree = ObjectTree()
        tree.beginLoading()
        // Sent before the GetManagedObjects reply (serial 10): already part of the snapshot.
        tree.apply(changed(device, [("RSSI", .int16(-90))], serial: 9))
        // Sent after it: must be applied on top.
        tree.apply(changed(device, [("Name", .string("new"))], serial: 11))
        tree.load([device: ["org.bluez.Device1": ["RSSI": .int16(-40), "Name": .string("old")]]], replySerial: 10, owner: bluez)
        let props = tree.properties(at: device, "org.bluez.Device1")
        #expect(props?["RSSI"] == .int16(-40))
        #expect(props?["Name"] == .string("new"))
    }

    @Test func signalsFromAnyoneButBluetoothdAreIgnored() {
        let tree = ObjectTree()
        tree.beginLoading()
        tree.apply(changed(device, [("RSSI", .int16(-1))], serial: 50, sender: ":1.99"))  // held, then dropped
        tree.load([device: ["org.bluez.Device1": ["RSSI": .int16(-40)]]], replySerial: 10, owner: bluez)
        tree.apply(changed(device, [("RSSI", .int16(-2))], serial: 51, sender: ":1.99"))
        #expect(tree.properties(at: device, "org.bluez.Device1")?["RSSI"] == .int16(-40))
        tree.apply(changed(device, [("RSSI", .int16(-3))], serial: 52))
        #expect(tree.properties(at: device, "org.bluez.Device1")?["RSSI"] == .int16(-3))
    }

    @Test func propertiesOfUnknownObjectsAreIgnored() {
        let tree = ObjectTree()
        tree.load([:], replySerial: 0, owner: bluez)
        tree.apply(changed(device, [("RSSI", .int16(-50))], serial: 1))
        #expect(tree.interfaces(at: device) == nil)
    }

    /// Two writers at once (signals on one thread, `refresh` on another, as the D-Bus thread and
    /// a task do): each change reaches the observer while the mirror still says what the change
    /// says, so the observer never sees a change after a newer one.
    @Test func observersSeeChangesInTheOrderTheyWereApplied() async {
        let tree = ObjectTree()
        tree.load([:], replySerial: 0, owner: bluez)
        tree.apply(added(device, [("Address", .string("F0:00:00:00:00:01")), ("RSSI", .int16(0))], serial: 1))
        let seen = Mutex<(changes: Int, stale: Int, last: Value?)>((0, 0, nil))
        tree.setObserver { change in
            guard case .properties(_, _, let changed, _) = change, let rssi = changed["RSSI"] else { return }
            let now = tree.properties(at: device, "org.bluez.Device1")?["RSSI"]
            seen.withLock { s in
                s.changes += 1
                if now != rssi { s.stale += 1 }
                s.last = rssi
            }
        }
        let rounds = 20_000
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for i in 0..<rounds { tree.apply(changed(device, [("RSSI", .int16(Int16(-(i % 100) - 1)))], serial: UInt32(2 + i))) }
            }
            group.addTask {
                for i in 0..<rounds { tree.refresh(device, "org.bluez.Device1", ["RSSI": .int16(Int16(i % 100 + 1))]) }
            }
        }
        let result = seen.withLock { $0 }
        #expect(result.changes > rounds)
        #expect(result.stale == 0, "\(result.stale) changes reached the observer after a newer one was applied")
        #expect(result.last == tree.properties(at: device, "org.bluez.Device1")?["RSSI"])
    }

    /// A notification that arrives while GetManagedObjects is under way is in the snapshot (its
    /// serial is older than the reply's) but must still reach the observer: it was an event.
    @Test func aNotificationHeldDuringALoadIsStillReported() {
        let tree = ObjectTree()
        let characteristic = ObjectPath("/org/bluez/hci0/dev_F0_00_00_00_00_01/service0010/char0011")!
        let seen = Mutex<[String]>([])
        tree.setObserver { change in
            switch change {
            case .reloaded: seen.withLock { $0.append("reloaded") }
            case .properties(_, "org.bluez.GattCharacteristic1", let changed, _):
                if let bytes = changed["Value"]?.bytes { seen.withLock { $0.append("value \(bytes)") } }
            default: break
            }
        }
        tree.beginLoading()
        func value(_ bytes: [UInt8], serial: UInt32) -> Message {
            var m = Message.signal(path: characteristic, interface: Connection.propertiesInterface, member: "PropertiesChanged",
                                   [.string("org.bluez.GattCharacteristic1"), .stringVariantDictionary([("Value", .bytes(bytes))]), .strings([])])
            m.serial = serial
            m.sender = bluez
            return m
        }
        tree.apply(value([1], serial: 9))   // before the reply: in the snapshot, still an event
        tree.apply(value([2], serial: 11))  // after it: applied on top
        tree.load([characteristic: ["org.bluez.GattCharacteristic1": ["Value": .bytes([1]), "UUID": .string("2a37")]]],
                  replySerial: 10, owner: bluez)
        #expect(seen.withLock { $0 } == ["reloaded", "value [1]", "value [2]"])
        #expect(tree.properties(at: characteristic, "org.bluez.GattCharacteristic1")?["Value"] == .bytes([2]))
    }
}
