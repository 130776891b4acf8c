import Testing
import BLE
import DBus
import Synchronization
@testable import BlueZ

/// gattway's peripheral side against a fake bluetoothd on a private bus.
final class PeripheralRig: Sendable {
    let bus: PrivateBus
    let bluez: Mutex<FakePeripheralBlueZ>
    let central: BlueZCentral
    let events = EventLogOf<PeripheralEvent>()
    var peripheral: BlueZPeripheral { central.peripheral }
    var fake: FakePeripheralBlueZ { bluez.withLock { $0 } }

    init(supportedInstances: UInt8 = 1) async throws {
        bus = try PrivateBus()
        bluez = Mutex(try await FakePeripheralBlueZ(address: bus.address, supportedInstances: supportedInstances))
        let address = bus.address
        central = BlueZCentral { () throws(BusError) in try Connection(address: address) }
        central.peripheral.setEventHandler { [events] in events.append($0) }
        await central.start()
    }

    /// gattway's unique bus name (the application's owner).
    var app: String { central.link.connection!.uniqueName }

    /// bluetoothd restarts: the old one leaves the bus, a new one (knowing nothing) takes the name.
    func restartBlueZ() async throws {
        await fake.exit()
        bluez.withLock { _ = $0 }
        let fresh = try await FakePeripheralBlueZ(address: bus.address)
        bluez.withLock { $0 = fresh }
    }

    deinit {
        central.close()
        fake.connection.close()
        bus.stop()
    }
}

private let serviceUUID = BluetoothUUID("5a1e0001-0000-4000-8000-00805f9b34fb")!
private let charUUID = BluetoothUUID("5a1e0002-0000-4000-8000-00805f9b34fb")!
private let demo = LocalService(uuid: serviceUUID, characteristics: [
    LocalCharacteristic(uuid: charUUID, properties: [.read, .write, .writeWithoutResponse, .notify],
                        permissions: [.readable, .writeable, .readEncryptionRequired], value: Array("hello".utf8),
                        descriptors: [LocalDescriptor(uuid: BluetoothUUID(uint16: 0x2901), value: Array("demo".utf8))]),
])
private let charPath = ObjectPath(trusted: "/io/gattway/app/hci0/service1/char0")

@Suite(.serialized) struct PeripheralTests {
    @Test func aServiceIsRegisteredAsBlueZReadsItWithTheHandlesItGave() async throws {
        let rig = try await PeripheralRig()
        let registered = try await rig.peripheral.add(demo)
        #expect(registered.registered)
        #expect(registered.adapter == "hci0")
        #expect(registered.handle == 0x0010)
        #expect(registered.characteristicHandles == [0x0012])
        let app = rig.fake.seen.withLock { $0.application }
        let service = app[ObjectPath(trusted: "/io/gattway/app/hci0/service1")]?["org.bluez.GattService1"]
        #expect(service?["UUID"] == .string(serviceUUID.uuidString))
        #expect(service?["Primary"] == .bool(true))
        let characteristic = app[charPath]?["org.bluez.GattCharacteristic1"]
        #expect(characteristic?["Flags"] == .strings(["read", "write-without-response", "write", "notify", "encrypt-read"]))
        #expect(characteristic?["Service"] == .objectPath(ObjectPath(trusted: "/io/gattway/app/hci0/service1")))
        #expect(characteristic?["Notifying"] == .bool(false))
        let descriptor = app[charPath.child("desc0")!]?["org.bluez.GattDescriptor1"]
        #expect(descriptor?["UUID"] == .string("00002901-0000-1000-8000-00805f9b34fb"))
        #expect(descriptor?["Flags"] == .strings(["read"]))
        #expect(await rig.peripheral.services() == [registered])
        _ = try await rig.events.wait(what: "the service registered") { if case .service(let s) = $0 { s.registered } else { false } }
    }

    @Test func addingAServiceRegistersTheApplicationAgainKeepingTheHandles() async throws {
        let rig = try await PeripheralRig()
        let first = try await rig.peripheral.add(demo)
        var other = demo
        other.uuid = BluetoothUUID(uint16: 0x180F)
        let second = try await rig.peripheral.add(other)
        let seen = rig.fake.seen.withLock { $0 }
        #expect(seen.registrations == 2)
        #expect(seen.unregistrations == 1)
        #expect(seen.application.keys.contains(ObjectPath(trusted: "/io/gattway/app/hci0/service2")))
        #expect(await rig.peripheral.services().first?.handle == first.handle)
        #expect(second.handle != first.handle)
        try await rig.peripheral.remove(service: first.id)
        let after = rig.fake.seen.withLock { $0 }
        #expect(after.registrations == 3)
        #expect(!after.application.keys.contains(ObjectPath(trusted: "/io/gattway/app/hci0/service1")))
        #expect(await rig.peripheral.services().map(\.id) == [second.id])
    }

    @Test func badDefinitionsAreRefusedAndNothingIsRegistered() async throws {
        let rig = try await PeripheralRig()
        let cases: [LocalService] = [
            LocalService(uuid: serviceUUID, characteristics: []),
            LocalService(uuid: serviceUUID, characteristics: [LocalCharacteristic(uuid: charUUID, properties: [.read], permissions: .readable,
                                                                                  value: Array(repeating: 0, count: 513))]),
            LocalService(uuid: serviceUUID, characteristics: [LocalCharacteristic(uuid: charUUID, properties: [.notify], permissions: .readable,
                                                                                  descriptors: [LocalDescriptor(uuid: BluetoothUUID(uint16: 0x2902), value: [0, 0])])]),
            LocalService(uuid: serviceUUID, characteristics: demo.characteristics, includes: [BluetoothUUID(uint16: 0x1800)]),
            LocalService(uuid: serviceUUID, characteristics: demo.characteristics, adapter: "hci7"),
        ]
        for service in cases {
            await #expect(throws: BLEError.self) { _ = try await rig.peripheral.add(service) }
        }
        #expect(await rig.peripheral.services().isEmpty)
        #expect(rig.fake.seen.withLock { $0.registrations } == 0)
    }

    @Test func readsAndWritesGoToTheRequestHandlerWithTheCentralAndOptions() async throws {
        let rig = try await PeripheralRig()
        _ = try await rig.peripheral.add(demo)
        let requests = Mutex<[PeripheralRequest]>([])
        rig.peripheral.setRequestHandler { request in
            requests.withLock { $0.append(request) }
            switch request.kind {
            case .read: return request.offset > 5 ? .error(.invalidOffset) : .value(Array("21.5".utf8))
            case .write(let value, _): return value == [0xFF] ? .error(.writeNotPermitted) : .done
            }
        }
        let read = try await rig.fake.call(rig.app, charPath, "org.bluez.GattCharacteristic1", "ReadValue", [FakePeripheralBlueZ.options(offset: 2)])
        #expect(read == [.bytes(Array("21.5".utf8))])
        _ = try await rig.fake.call(rig.app, charPath, "org.bluez.GattCharacteristic1", "WriteValue", [.bytes([1, 2]), FakePeripheralBlueZ.options(type: "command")])
        _ = try await rig.fake.call(rig.app, charPath, "org.bluez.GattCharacteristic1", "WriteValue", [.bytes([3]), FakePeripheralBlueZ.options(type: "request")])
        let central = BluetoothAddress("11:22:33:44:55:66")!
        let attribute = LocalAttribute(service: 1, characteristic: 0)
        #expect(requests.withLock { $0 } == [
            PeripheralRequest(attribute: attribute, kind: .read, central: central, offset: 2, mtu: 185),
            PeripheralRequest(attribute: attribute, kind: .write([1, 2], withResponse: false), central: central, offset: 0, mtu: 185),
            PeripheralRequest(attribute: attribute, kind: .write([3], withResponse: true), central: central, offset: 0, mtu: 185),
        ])
        for (body, member, name) in [([FakePeripheralBlueZ.options(offset: 9)], "ReadValue", "org.bluez.Error.InvalidOffset"),
                                     ([.bytes([0xFF]), FakePeripheralBlueZ.options()], "WriteValue", "org.bluez.Error.NotPermitted")] {
            do {
                _ = try await rig.fake.call(rig.app, charPath, "org.bluez.GattCharacteristic1", member, body)
                Issue.record("\(member) should have failed")
            } catch {
                #expect(error.name == name)
            }
        }
        let descriptor = try await rig.fake.call(rig.app, charPath.child("desc0")!, "org.bluez.GattDescriptor1", "ReadValue", [FakePeripheralBlueZ.options()])
        #expect(descriptor == [.bytes(Array("21.5".utf8))])
        #expect(requests.withLock { $0.last?.attribute } == LocalAttribute(service: 1, characteristic: 0, descriptor: 0))
    }

    @Test func withoutAHandlerReadsAnswerTheValueFromTheOffset() async throws {
        let rig = try await PeripheralRig()
        _ = try await rig.peripheral.add(demo)
        let read = try await rig.fake.call(rig.app, charPath, "org.bluez.GattCharacteristic1", "ReadValue", [FakePeripheralBlueZ.options(offset: 1)])
        #expect(read == [.bytes(Array("ello".utf8))])
    }

    @Test func anAnswerPastTheDeadlineIsAFailureAndIsDropped() async throws {
        let rig = try await PeripheralRig()
        _ = try await rig.peripheral.add(demo)
        rig.peripheral.setRequestHandler { _ in
            try? await Task.sleep(for: .seconds(8))
            return .value([1])
        }
        let started = ContinuousClock.now
        do {
            _ = try await rig.fake.call(rig.app, charPath, "org.bluez.GattCharacteristic1", "ReadValue", [FakePeripheralBlueZ.options()])
            Issue.record("the late answer was sent")
        } catch {
            #expect(error.name == "org.bluez.Error.Failed")
        }
        let waited = ContinuousClock.now - started
        #expect(waited >= .seconds(5) && waited < .seconds(7))
    }

    @Test func subscriptionsNotificationsAndConfirmations() async throws {
        let rig = try await PeripheralRig()
        _ = try await rig.peripheral.add(demo)
        let attribute = LocalAttribute(service: 1, characteristic: 0)
        #expect(try await rig.peripheral.updateValue([1], for: attribute) == false)
        let values = AsyncStream<Message>.makeStream()
        try await rig.fake.connection.subscribe(MatchRule(sender: rig.app, interface: Connection.propertiesInterface, member: "PropertiesChanged")) {
            values.continuation.yield($0)
        }
        _ = try await rig.fake.call(rig.app, charPath, "org.bluez.GattCharacteristic1", "StartNotify")
        _ = try await rig.events.wait(what: "subscribed") { $0 == .subscription(attribute, central: nil, subscribed: true) }
        #expect(try await rig.peripheral.updateValue([0x21, 0x05], for: attribute) == true)
        var signals = values.stream.makeAsyncIterator()
        var sawValue = false
        while let signal = await signals.next() {
            if signal.path == charPath, signal.body[1].stringDictionary?["Value"]?.unwrapped == .bytes([0x21, 0x05]) { sawValue = true; break }
        }
        #expect(sawValue)
        _ = try await rig.fake.call(rig.app, charPath, "org.bluez.GattCharacteristic1", "Confirm")
        _ = try await rig.events.wait(what: "confirmed") { $0 == .confirmed(attribute, central: nil) }
        _ = try await rig.fake.call(rig.app, charPath, "org.bluez.GattCharacteristic1", "StopNotify")
        _ = try await rig.events.wait(what: "unsubscribed") { $0 == .subscription(attribute, central: nil, subscribed: false) }
        #expect(try await rig.peripheral.updateValue([3], for: attribute) == false)
        await #expect(throws: BLEError.self) { _ = try await rig.peripheral.updateValue([3], for: LocalAttribute(service: 9, characteristic: 0)) }
    }

    @Test func onlyBluetoothdMayCallTheApplication() async throws {
        let rig = try await PeripheralRig()
        _ = try await rig.peripheral.add(demo)
        let stranger = try Connection(address: rig.bus.address)
        defer { stranger.close() }
        do {
            _ = try await stranger.call(.methodCall(destination: rig.app, path: charPath, interface: "org.bluez.GattCharacteristic1",
                                                    member: "ReadValue", [FakePeripheralBlueZ.options()]))
            Issue.record("a stranger read the characteristic")
        } catch {
            #expect(error.name == "org.bluez.Error.NotAuthorized")
        }
    }

    @Test func advertisementsCarryTheirDataAndPastTheRoomAreOutOfSpace() async throws {
        let rig = try await PeripheralRig()
        let definition = AdvertisementDefinition(localName: "gattway-demo", serviceUUIDs: [serviceUUID], manufacturerData: [0x004C: [0x02, 0x15]],
                                                 serviceData: [BluetoothUUID(uint16: 0xFEAA): [0x10]], includeTxPower: true,
                                                 intervalMs: 100...200, appearance: 0x0341)
        let advertisement = try await rig.peripheral.startAdvertising(definition)
        #expect(advertisement.registered)
        let props = rig.fake.seen.withLock { $0.advertisements[ObjectPath(trusted: "/io/gattway/adv/\(advertisement.id)")] }
        #expect(props?["Type"] == .string("peripheral"))
        #expect(props?["LocalName"] == .string("gattway-demo"))
        #expect(props?["ServiceUUIDs"] == .strings([serviceUUID.uuidString]))
        #expect(props?["ManufacturerData"]?.dictionaryEntries?.first?.key == .uint16(0x004C))
        #expect(props?["ManufacturerData"]?.dictionaryEntries?.first?.value.unwrapped == .bytes([0x02, 0x15]))
        #expect(props?["ServiceData"]?.dictionaryEntries?.first?.key == .string("0000feaa-0000-1000-8000-00805f9b34fb"))
        #expect(props?["Includes"] == .strings(["tx-power"]))
        #expect(props?["Appearance"] == .uint16(0x0341))
        #expect(props?["MinInterval"] == .uint32(100) && props?["MaxInterval"] == .uint32(200))
        do {
            _ = try await rig.peripheral.startAdvertising(AdvertisementDefinition(connectable: false))
            Issue.record("a second advertisement past SupportedInstances 1 was accepted")
        } catch {
            #expect(error.code == .cb(.outOfSpace))
            #expect(error.message.contains("SupportedInstances: 1"))
        }
        #expect(await rig.peripheral.advertisements().map(\.id) == [advertisement.id])
        #expect(await rig.peripheral.status().instances["hci0"]?.supported == 1)
        try await rig.peripheral.stopAdvertising(advertisement.id)
        #expect(rig.fake.seen.withLock { $0.advertisements.isEmpty })
        let beacon = try await rig.peripheral.startAdvertising(AdvertisementDefinition(connectable: false))
        #expect(rig.fake.seen.withLock { $0.advertisements.values.first?["Type"] } == .string("broadcast"))
        _ = try await rig.fake.call(rig.app, LEAdvertisement.path(beacon.id), "org.bluez.LEAdvertisement1", "Release")
        _ = try await rig.events.wait(what: "released") { if case .advertisement(let a) = $0 { a.id == beacon.id && !a.registered } else { false } }
    }

    @Test func afterTheAdapterPowersOnAgainEverythingIsRegisteredAgain() async throws {
        let rig = try await PeripheralRig()
        let service = try await rig.peripheral.add(demo)
        let advertisement = try await rig.peripheral.startAdvertising(AdvertisementDefinition(localName: "again"))
        let since = rig.events.recorded
        rig.fake.setPowered(false)
        _ = try await rig.events.wait(since: since, what: "the service unserved") { if case .service(let s) = $0 { !s.registered } else { false } }
        _ = try await rig.events.wait(since: since, what: "the advertisement unsent") { if case .advertisement(let a) = $0 { !a.registered } else { false } }
        #expect(await rig.peripheral.services().map(\.registered) == [false])
        let off = rig.events.recorded
        rig.fake.setPowered(true)
        _ = try await rig.events.wait(since: off, what: "the service served again") {
            if case .service(let s) = $0 { s.registered && s.id == service.id } else { false }
        }
        _ = try await rig.events.wait(since: off, what: "the advertisement sent again") {
            if case .advertisement(let a) = $0 { a.registered && a.id == advertisement.id } else { false }
        }
        #expect(rig.fake.seen.withLock { $0.registrations } == 2)
        #expect(await rig.peripheral.services().first?.handle == service.handle)
    }

    @Test func remoteCentralsOnAServingAdapterAreEvents() async throws {
        let rig = try await PeripheralRig()
        rig.fake.central("11:22:33:44:55:01", connected: true)
        _ = try await rig.peripheral.add(demo)
        let since = rig.events.recorded
        rig.fake.central("11:22:33:44:55:01", connected: false)
        rig.fake.central("11:22:33:44:55:66", connected: true)
        let central = BluetoothAddress("11:22:33:44:55:66")!
        _ = try await rig.events.wait(since: since, what: "the central connected") { $0 == .central(central, adapter: "hci0", connected: true) }
        rig.fake.central("11:22:33:44:55:66", connected: false)
        _ = try await rig.events.wait(since: since, what: "the central gone") { $0 == .central(central, adapter: "hci0", connected: false) }
        // One BlueZ lists already connected, and drops without a Connected false.
        let other = BluetoothAddress("11:22:33:44:55:77")!
        let path = FakePeripheralBlueZ.adapter.child(BlueZ.pathElement(other))!
        rig.fake.objects.add(path, ["org.bluez.Device1": ["Address": .string(other.description), "Connected": .bool(true),
                                                          "Adapter": .objectPath(FakePeripheralBlueZ.adapter)]], announce: true)
        _ = try await rig.events.wait(since: since, what: "the listed central") { $0 == .central(other, adapter: "hci0", connected: true) }
        rig.fake.objects.remove(under: path, announce: true)
        _ = try await rig.events.wait(since: since, what: "the dropped central") { $0 == .central(other, adapter: "hci0", connected: false) }
        // The link that was up before this side served is not told (nor its end).
        #expect(rig.events.count { if case .central(let id, _, _) = $0 { id != central && id != other } else { false } } == 0)
    }

    @Test func afterBluetoothdComesBackEverythingIsRegisteredAgain() async throws {
        let rig = try await PeripheralRig()
        let service = try await rig.peripheral.add(demo)
        let advertisement = try await rig.peripheral.startAdvertising(AdvertisementDefinition(localName: "back"))
        let since = rig.events.recorded
        try await rig.restartBlueZ()
        _ = try await rig.events.wait(since: since, what: "the service unserved") {
            if case .service(let s) = $0 { !s.registered } else { false }
        }
        _ = try await rig.events.wait(since: since, what: "the service served again") {
            if case .service(let s) = $0 { s.registered && s.id == service.id } else { false }
        }
        _ = try await rig.events.wait(since: since, what: "the advertisement sent again") {
            if case .advertisement(let a) = $0 { a.registered && a.id == advertisement.id } else { false }
        }
        let seen = rig.fake.seen.withLock { $0 }
        #expect(seen.registrations == 1)
        #expect(seen.application[charPath] != nil)
        #expect(seen.advertisements[LEAdvertisement.path(advertisement.id)]?["LocalName"] == .string("back"))
        // The new bluetoothd was asked for the handles the old one gave.
        #expect(await rig.peripheral.services().first?.handle == service.handle)
    }
}

@Suite struct PeripheralMarshallingTests {
    @Test func flagsFromPropertiesAndPermissions() {
        let cases: [(CharacteristicProperties, AttributePermissions, [String])] = [
            ([.read], [.readable], ["read"]),
            ([.write, .writeWithoutResponse], [.writeable], ["write-without-response", "write"]),
            ([.notify, .indicate], [], ["notify", "indicate"]),
            ([.read, .write], [.readAuthenticationRequired, .writeEncryptionRequired], ["read", "write", "encrypt-write", "encrypt-authenticated-read"]),
            ([.write], [.writeAuthenticationRequired], ["write", "encrypt-authenticated-write"]),
        ]
        for (properties, permissions, flags) in cases {
            #expect(GATTApplication.flags(properties, permissions) == flags)
        }
        #expect(GATTApplication.flags([.readable, .writeEncryptionRequired]) == ["read", "write", "encrypt-write"])
    }

    @Test func pathsNameTheirAttributes() {
        let attribute = LocalAttribute(service: 3, characteristic: 1, descriptor: 2)
        let path = GATTApplication.path(adapter: "hci1", attribute)
        #expect(path.rawValue == "/io/gattway/app/hci1/service3/char1/desc2")
        #expect(GATTApplication.attribute(path)?.attribute == attribute)
        #expect(GATTApplication.attribute(path)?.adapter == "hci1")
        #expect(GATTApplication.attribute(ObjectPath(trusted: "/io/gattway/app/hci1/service3"))?.attribute.characteristic == -1)
        #expect(GATTApplication.attribute(ObjectPath(trusted: "/io/gattway/app/hci1")) == nil)
        #expect(GATTApplication.attribute(ObjectPath(trusted: "/io/gattway/app/hci1/service3/x1")) == nil)
        #expect(LEAdvertisement.id(LEAdvertisement.path(7)) == 7)
    }

    @Test func attErrorsBecomeTheNamesBlueZTurnsBack() {
        let cases: [(ATTErrorCode, String)] = [
            (.readNotPermitted, "org.bluez.Error.NotPermitted"), (.writeNotPermitted, "org.bluez.Error.NotPermitted"),
            (.insufficientAuthorization, "org.bluez.Error.NotAuthorized"), (.invalidOffset, "org.bluez.Error.InvalidOffset"),
            (.invalidAttributeValueLength, "org.bluez.Error.InvalidValueLength"), (.requestNotSupported, "org.bluez.Error.NotSupported"),
            (.unlikelyError, "org.bluez.Error.Failed"), (ATTErrorCode(rawValue: 0x80), "org.bluez.Error.Failed"),
        ]
        for (code, name) in cases { #expect(ErrorMapping.reply(for: code).name == name) }
        let full = ErrorMapping.map(BusError(name: "org.bluez.Error.NotPermitted", message: "Maximum advertisements reached"), context: .adapter)
        #expect(full.code == .cb(.outOfSpace))
    }

    @Test func requestOptionsAsBlueZPassesThem() {
        let options = BlueZPeripheral.RequestOptions(FakePeripheralBlueZ.options(offset: 4, type: "command"))
        #expect(options.central == BluetoothAddress("11:22:33:44:55:66"))
        #expect(options.offset == 4 && options.mtu == 185 && options.type == "command")
        #expect(BlueZPeripheral.RequestOptions(nil) == BlueZPeripheral.RequestOptions(.emptyDictionary(key: "s", value: "v")))
    }
}
