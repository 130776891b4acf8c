import BLE
import Foundation
import Sensors
import Synchronization
import Testing
@testable import GatewayCore
import GatewayTesting

@Suite struct SensorBoardTests {
    /// What the board published, in order.
    final class Published: Sendable {
        let updates = Mutex<[SensorBoard.Update]>([])
    }

    /// A reading is published per new packet, `changed` only when a value differs; the same
    /// advertisement heard again (a listing) is neither decoded again nor published.
    @Test func newPacketsArePublishedAndMarkedWhenAValueChanged() {
        let published = Published()
        let board = SensorBoard(keys: SensorKeys()) { update in published.updates.withLock { $0.append(update) } }
        let start = Date()
        let packets = ["40 0001 02C409", "40 0002 02C409", "40 0002 02C409", "40 0003 02CA09"]
        for (i, hex) in packets.enumerated() { board.hear(bthome(thermometer, hex, lastSeen: start + Double(i))) }
        let updates = published.updates.withLock { $0 }
        #expect(updates.map(\.reading.packetId) == [1, 2, 3])
        #expect(updates.map(\.changed) == [true, false, true])
        #expect(updates.last?.reading.measurements["temperature"]?.value == .number(25.06))
        // An older snapshot (a listing read before the last event) changes nothing.
        let current = board.hear(bthome(thermometer, "40 0001 02C409", lastSeen: start))
        #expect(current?.reading.packetId == 3)
        #expect(current?.heard == start + 3)
        #expect(published.updates.withLock { $0.count } == 3)
    }

    /// New keys (SIGHUP) apply to an advertisement already heard: the next time it is heard or
    /// listed it is decoded again, and the change is published.
    /// A device no decoder would read is not kept; one that was a sensor is, and its reading goes
    /// when its advertisement stops being one.
    @Test func onlySensorsAreKeptAndOneThatStopsLosesItsReading() {
        let board = SensorBoard(keys: SensorKeys()) { _ in }
        var other = bthome(BluetoothAddress("5A:00:00:00:00:01")!, "")
        other.advertisement = AdvertisementData(manufacturerData: [0xFFFF: [1, 2]])
        #expect(board.hear(other) == nil && board.count == 0)
        #expect(board.hear(bthome(thermometer, "40 0001 02C409"))?.reading.format == .bthome && board.count == 1)
        var plain = bthome(thermometer, "")
        plain.advertisement = AdvertisementData(manufacturerData: [0xFFFF: [1, 2]])
        #expect(board.hear(plain) == nil && board.count == 1)
    }

    @Test func replacedKeysDecodeWhatWasHeard() throws {
        let published = Published()
        let board = SensorBoard(keys: SensorKeys()) { update in published.updates.withLock { $0.append(update) } }
        // bthome.io/encryption's example device, key and service data.
        let device = BluetoothAddress("54:48:E6:8F:80:A5")!
        let info = bthome(device, "41 e445f3c9962b 33221100 6c7c4519", lastSeen: Date())
        #expect(board.hear(info)?.reading.encryption == .missingKey)
        #expect(board.hear(info)?.reading.encryption == .missingKey)
        board.replaceKeys(SensorKeys([device: try ValueFormat.hex.decode("231d39c1d7cc1ab1aee224cd096db932")]))
        #expect(board.keyCount == 1)
        #expect(board.hear(info)?.reading.encryption == .decrypted)
        #expect(published.updates.withLock { $0.map(\.reading.encryption) } == [.missingKey, .decrypted])
        #expect(published.updates.withLock { $0.last?.changed } == true)
        board.replaceKeys(SensorKeys())
        #expect(board.hear(info)?.reading.encryption == .missingKey)
    }

    @Test func theBoardIsBounded() {
        let board = SensorBoard(keys: SensorKeys()) { _ in }
        let start = Date()
        for n in 0...SensorBoard.limit {
            let id = BluetoothAddress("A4:C1:38:00:\(String(format: "%02X:%02X", n >> 8, n & 0xFF))")!
            board.hear(bthome(id, "40 02C409", lastSeen: start + Double(n)))
        }
        #expect(board.count == SensorBoard.limit)
    }
}
