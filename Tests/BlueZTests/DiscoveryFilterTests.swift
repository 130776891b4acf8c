import BLE
import DBus
import Testing
@testable import BlueZ

/// What BlueZ's discovery filter becomes for the scan, the watch, and both: one discovery
/// serves them, so its filter must let each see all it wants.
@Suite struct DiscoveryFilterTests {
    private func keys(_ filter: [(String, Value)]) -> [String: Value] { Dictionary(uniqueKeysWithValues: filter) }

    @Test func theScanAloneHandsDownItsServicesAndFloor() {
        let f = keys(Discovery.filter(scan: ScanOptions(services: [BluetoothUUID("180D")!], rssi: -70), watch: nil))
        #expect(f["Transport"] == .string("le"))
        #expect(f["UUIDs"] == .strings(["0000180d-0000-1000-8000-00805f9b34fb"]))
        #expect(f["RSSI"] == .int16(-70))
        #expect(f["DuplicateData"] == .bool(false))
    }

    @Test func theWatchNeverHandsDownServicesWhichBlueZMatchesAgainstUUIDsOnly() {
        let f = keys(Discovery.filter(scan: nil, watch: WatchOptions(services: [BluetoothUUID("181A")!], rssi: -90)))
        #expect(f["UUIDs"] == nil)
        #expect(f["RSSI"] == .int16(-90))
        #expect(f["DuplicateData"] == .bool(true))
    }

    @Test func bothTogetherKeepOnlyWhatNeitherLoses() {
        let scan = ScanOptions(services: [BluetoothUUID("180D")!], rssi: -70)
        let both = keys(Discovery.filter(scan: scan, watch: WatchOptions(rssi: -90)))
        #expect(both["UUIDs"] == nil, "the watch wants devices without the scan's services")
        #expect(both["RSSI"] == .int16(-90), "the lower floor")
        let oneFloor = keys(Discovery.filter(scan: scan, watch: WatchOptions()))
        #expect(oneFloor["RSSI"] == nil, "the watch has no floor: none")
        let scanWithout = keys(Discovery.filter(scan: ScanOptions(), watch: WatchOptions(rssi: -90)))
        #expect(scanWithout["RSSI"] == nil, "the scan has no floor: none")
    }
}
