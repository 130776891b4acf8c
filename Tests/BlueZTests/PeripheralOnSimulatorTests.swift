import Testing
import BLE
import DBus
import Simulator
import Synchronization
@testable import BlueZ

/// gattway's peripheral on the simulator's hci0 and gattway's own central on hci1, in one
/// process: the two pieces of issue 34 meeting through BlueZ's documented API.
/// The simulator on a private bus and gattway's central (not started: set its handlers first).
private final class SimulatedBlueZ: Sendable {
    let bus: PrivateBus
    let server: Connection
    let simulator: Simulator
    let central: BlueZCentral

    init(adapters: [SimulatorConfiguration.Adapter]) async throws {
        bus = try PrivateBus()
        server = try Connection(address: bus.address)
        simulator = Simulator(connection: server, configuration: SimulatorConfiguration(adapters: adapters, devices: []))
        let address = bus.address
        central = BlueZCentral { () throws(BusError) in try Connection(address: address) }
        do { try await simulator.start() } catch { close(); throw error }
    }

    func close() {
        central.close()
        simulator.stop()
        server.close()
        bus.stop()
    }
}

@Suite(.serialized) struct PeripheralOnSimulatorTests {
    private static let serviceUUID = BluetoothUUID("5a1e0001-0000-4000-8000-00805f9b34fb")!
    private static let charUUID = BluetoothUUID("5a1e0002-0000-4000-8000-00805f9b34fb")!

    /// BlueZ signals an adapter's advertisement counts after it answered the registration: the
    /// change is an `adapter` event, so a status read too early is not the last word.
    @Test func anAdvertisementStartedOrStoppedIsAnAdapterChange() async throws {
        let rig = try await SimulatedBlueZ(adapters: [.numbered(0)])
        defer { rig.close() }
        let central = rig.central
        let events = EventLog()
        central.setEventHandler { events.append($0) }
        await central.start()
        let hci0Changed: @Sendable (CentralEvent) -> Bool = { if case .adapter(let info, .changed) = $0 { info.id == "hci0" } else { false } }

        // The counts come after the answer (the simulator sends them 20 ms later, as bluetoothd's
        // idle-time property signals do): the status read right after the call shows them all the same.
        var since = events.recorded
        let advertisement = try await central.peripheral.startAdvertising(AdvertisementDefinition(localName: "gattway-room", adapter: "hci0"))
        #expect(await central.peripheral.status().instances["hci0"]?.active == 1)
        _ = try await events.wait(since: since, what: "hci0 changed: one advertisement running", hci0Changed)

        since = events.recorded
        try await central.peripheral.stopAdvertising(advertisement.id)
        #expect(await central.peripheral.status().instances["hci0"]?.active == 0)
        _ = try await events.wait(since: since, what: "hci0 changed: none running", hci0Changed)
    }

    @Test func ownCentralOnHci1ScansConnectsReadsWritesAndIsNotifiedByThePeripheralOnHci0() async throws {
        let rig = try await SimulatedBlueZ(adapters: [.numbered(0), .numbered(1)])
        defer { rig.close() }
        let central = rig.central
        let centralEvents = EventLog()
        let peripheralEvents = EventLogOf<PeripheralEvent>()
        central.setEventHandler { centralEvents.append($0) }
        central.peripheral.setEventHandler { peripheralEvents.append($0) }
        await central.start()
        let requests = Mutex<[PeripheralRequest]>([])
        central.peripheral.setRequestHandler { request in
            requests.withLock { $0.append(request) }
            if case .read = request.kind { return .value(Array("21.5".utf8)) }
            return .done
        }

        let service = try await central.peripheral.add(LocalService(uuid: Self.serviceUUID, characteristics: [
            LocalCharacteristic(uuid: Self.charUUID, properties: [.read, .write, .notify], permissions: [.readable, .writeable]),
        ], adapter: "hci0"))
        #expect(service.registered && service.handle != nil && service.characteristicHandles.allSatisfy { $0 != nil })
        let advertisement = try await central.peripheral.startAdvertising(AdvertisementDefinition(localName: "gattway-integ",
                                                                                                   serviceUUIDs: [Self.serviceUUID], adapter: "hci0"))
        #expect(advertisement.registered)

        _ = try await central.startScan(ScanOptions())
        let heard = try await centralEvents.wait(what: "the advertisement") {
            if case .advertisement(let p) = $0 { p.name == "gattway-integ" } else { false }
        }
        guard case .advertisement(let info) = heard else { return }
        _ = try await central.stopScan()
        _ = try await central.connect(info.id, timeout: .seconds(10), autoReconnect: false, adapter: "hci1")
        let ref = CharacteristicRef(.uuid(Self.charUUID))
        let read = try await central.readValue(info.id, ref, offset: 0)
        #expect(read.value == Array("21.5".utf8))
        _ = try await central.writeValue(info.id, ref, [7, 8], type: .withResponse, fragment: false)
        #expect(requests.withLock { $0.map(\.kind) } == [.read, .write([7, 8], withResponse: true)])
        #expect(requests.withLock { $0.first?.central } != nil)

        let characteristic = try await central.characteristic(info.id, ref)
        #expect(try await central.setNotifyValue(true, info.id, characteristic: characteristic.handle))
        let attribute = LocalAttribute(service: service.id, characteristic: 0)
        _ = try await peripheralEvents.wait(what: "subscribed") { $0 == .subscription(attribute, central: nil, subscribed: true) }
        _ = try await peripheralEvents.wait(what: "the central") { if case .central(_, "hci0", true) = $0 { true } else { false } }
        #expect(try await central.peripheral.updateValue([0x42], for: attribute))
        _ = try await centralEvents.wait(what: "the notification") { if case .value(let v) = $0 { v.value == [0x42] } else { false } }
    }
}
