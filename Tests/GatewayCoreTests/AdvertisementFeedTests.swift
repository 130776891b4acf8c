import BLE
import Synchronization
import Testing
@testable import GatewayCore
import GatewayTesting

/// What the gateway hands doors beside the hub's JSON: every advertisement as it comes, and
/// which value events are a read's own.
@Suite struct AdvertisementFeedTests {
    let central = FakeCentral()
    let gateway: Gateway

    init() { gateway = Gateway(central: central, version: "test") }

    @Test func everyAdvertisementOfTheScanAndTheWatchUntilRemoved() {
        let heard = Mutex<[PeripheralInfo]>([])
        let id = gateway.advertisements.add { info in heard.withLock { $0.append(info) } }
        var second = central.device
        second.rssi = -70
        central.handler(.advertisement(central.device))
        central.handler(.advertisementChanged(second))
        central.handler(.advertisementChanged(second))  // a duplicate is one more advertisement
        central.handler(.connection(id: central.device.id, state: .connected, error: nil))
        #expect(heard.withLock { $0.map(\.rssi) } == [-55, -70, -70])
        gateway.advertisements.remove(id)
        #expect(gateway.advertisements.isEmpty)
        central.handler(.advertisementChanged(second))
        #expect(heard.withLock { $0.count } == 3)
    }

    @Test func aValueEventDuringAReadIsTheReadsOwn() async throws {
        let events = Mutex<[Bool]>([])
        let client = StreamClient(id: gateway.hub.newClientID(), transport: .sink(EventSink { event, _, _ in
            if let event { events.withLock { $0.append(event.readResult) } }
        }))
        client.select(Selection(types: EventTypes(.notification)), as: "")
        gateway.hub.add(client)
        let update = ValueUpdate(device: central.device.id, serviceHandle: 0x0030, serviceUUID: BluetoothUUID("ffe0")!,
                                 characteristicHandle: 0x0032, characteristicUUID: BluetoothUUID("ffe1")!, value: [1])
        central.handler(.value(update))
        _ = try await gateway.values.reading(.init(device: update.device, handle: 0x0032), whole: true) { () async throws(BLEError) in
            // BlueZ signals the value a read gets before it answers.
            central.handler(.value(update))
            return AttributeValue(handle: 0x0032, uuid: update.characteristicUUID, value: [1])
        }
        central.handler(.value(update))
        await gateway.hub.offered()
        #expect(events.withLock { $0 } == [false, true, false])
    }
}
