import BLE
@testable import ESPHomeProxy
import Testing

/// The connection slots the proxy offers: `--esphome-connections` at most, and no more than the
/// usable adapters take links.
struct SlotsTests {
    func adapter(_ id: String, powered: Bool = true, selected: Bool = true, limit: Int? = nil) -> AdapterInfo {
        AdapterInfo(id: id, address: nil, name: nil, alias: nil, powered: powered, discovering: false, selected: selected,
                    connectionLimit: limit)
    }

    @Test func oneAdapterWithNoKnownLimitOffersTheConfiguredSlots() {
        #expect(Connections.slots(configured: 3, adapters: [adapter("hci0")]) == 3)
    }

    @Test func learntLimitsAddUpToTheConfiguredAtMost() {
        #expect(Connections.slots(configured: 5, adapters: [adapter("hci0", limit: 2)]) == 2)
        #expect(Connections.slots(configured: 5, adapters: [adapter("hci0", limit: 2), adapter("hci1", limit: 2)]) == 4)
        #expect(Connections.slots(configured: 3, adapters: [adapter("hci0", limit: 2), adapter("hci1", limit: 2)]) == 3)
    }

    @Test func adaptersNotUsableOfferNone() {
        #expect(Connections.slots(configured: 3, adapters: []) == 0)
        #expect(Connections.slots(configured: 3, adapters: [adapter("hci0", powered: false)]) == 0)
        #expect(Connections.slots(configured: 3, adapters: [adapter("hci0", limit: 1), adapter("hci1", selected: false)]) == 1)
    }
}
