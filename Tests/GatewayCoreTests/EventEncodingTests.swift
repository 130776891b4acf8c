import BLE
import Foundation
import Testing
@testable import GatewayCore

private let heartRate = ValueUpdate(
    device: BluetoothAddress("F0:00:00:00:00:01")!, serviceHandle: 0x0010, serviceUUID: BluetoothUUID("180d")!,
    characteristicHandle: 0x0015, characteristicUUID: BluetoothUUID("2a37")!, value: [0x06, 0x48])

private func object(_ bytes: [UInt8]) throws -> [String: Any] {
    try #require(JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
}

@Suite struct EventEncodingTests {
    @Test("times as ISO 8601 with milliseconds, as Foundation writes them", arguments: [
        0.0, 1_800_000_000.123, 951_782_400.5, 1_709_164_800.999, -86_400.25, 4_102_444_799.001, 1_767_225_599.9995,
    ])
    func timestampsMatchFoundation(_ seconds: Double) {
        let date = Date(timeIntervalSince1970: seconds)
        #expect(Timestamp.iso8601(date) == date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true)))
    }

    /// The hand-written notification has the fields the `EventBody` encoding has, with the same values.
    @Test(arguments: ValueFormat.allCases)
    func notificationMatchesTheEventBody(_ format: ValueFormat) throws {
        let event = HubEvent(seq: 41, time: Date(timeIntervalSince1970: 1_800_000_000.5), event: .central(.value(heartRate)))
        var encodings = EventEncodings(event)
        let fast = try object(EventEncodings.close(encodings.open(format), sequence: 7, subscription: "s1"))
        let reference = try object(EventBody.line(EventBody(event, format: format, subscription: "s1", sequence: 7)))
        #expect(NSDictionary(dictionary: fast).isEqual(to: reference))
    }

    @Test func otherEventsCarryTheirFieldsAndASubscription() throws {
        let event = HubEvent(seq: 3, time: Date(timeIntervalSince1970: 0),
                             event: .central(.connection(id: heartRate.device, state: .connected, error: nil)))
        var encodings = EventEncodings(event)
        let json = try object(EventEncodings.close(encodings.open(.hex), sequence: nil, subscription: "s2"))
        #expect(json["type"] as? String == "connection")
        #expect(json["state"] as? String == "connected")
        #expect(json["subscription"] as? String == "s2")
        #expect(json["sequence"] == nil)
    }

    @Test func stringsAreEscaped() throws {
        var update = heartRate
        update.value = Array("a\"b\\c\n\u{1}é".utf8)
        let event = HubEvent(seq: 1, time: Date(), event: .central(.value(update)))
        var encodings = EventEncodings(event)
        let json = try object(EventEncodings.close(encodings.open(.utf8), sequence: nil, subscription: nil))
        #expect(json["value"] as? String == "a\"b\\c\n\u{1}é")
    }

    @Test func oneEncodingPerFormatIsShared() {
        var encodings = EventEncodings(HubEvent(seq: 1, time: Date(), event: .central(.value(heartRate))))
        let first = encodings.open(.hex)
        let again = encodings.open(.hex)
        first.withUnsafeBufferPointer { a in again.withUnsafeBufferPointer { b in #expect(a.baseAddress == b.baseAddress) } }
        #expect(encodings.open(.base64) != first)
    }
}
