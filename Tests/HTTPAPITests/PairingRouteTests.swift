import BLE
import HTTPServer
import Testing
@testable import GatewayCore
import GatewayTesting
@testable import HTTPAPI

/// The pairing routes' bodies and what they hand the central (`FakeCentral` records it).
@Suite struct PairingRouteTests {
    let central = FakeCentral()
    var router: Router { Gateway(central: central, version: "test").router() }
    let device = "/v1/devices/F0:00:00:00:00:01"

    @Test func aPasskeyGivenUpFrontGoesWithThePairing() async throws {
        let reply = try await call(router, "POST", device + "/pair", body: #"{"passkey": 12345, "timeout": 20}"#)
        #expect(reply.status == 200)
        #expect(reply.json["paired"] as? Bool == true && reply.json["bonded"] as? Bool == true)
        #expect(central.pairings.withLock { $0.pairs } == [.passkey(12345)])
        #expect(try await call(router, "POST", device + "/pair").status == 200)
        #expect(central.pairings.withLock { $0.pairs } == [.passkey(12345), nil])
        #expect(try await call(router, "POST", device + "/pair", body: #"{"pinCode": "0000"}"#).status == 200)
        #expect(central.pairings.withLock { $0.pairs } == [.passkey(12345), nil, .pinCode("0000")])
    }

    @Test func withoutAnAnswerThePairingKeysFileGivesOne() async throws {
        let keys = PairingKeys([BluetoothAddress("F0:00:00:00:00:01")!: .passkey(42)])
        let router = Gateway(central: central, version: "test", pairingKeys: keys).router()
        #expect(try await call(router, "POST", device + "/pair", body: "{}").status == 200)
        #expect(try await call(router, "POST", device + "/pair", body: #"{"passkey": 7}"#).status == 200)
        #expect(central.pairings.withLock { $0.pairs } == [.passkey(42), .passkey(7)], "an answer given wins over the file")
    }

    @Test(arguments: [
        (#"{"passkey": 1000000}"#, "passkey must be a whole number from 0 to 999999"),
        (#"{"passkey": -1}"#, "passkey must be a whole number from 0 to 999999"),
        (#"{"passkey": "123456"}"#, "passkey"),
        (#"{"passkey": 1.5}"#, "does not fit"),
        (#"{"pinCode": "12 34"}"#, "pinCode must be 1 to 16 letters or digits"),
        (#"{"pinCode": ""}"#, "pinCode must be 1 to 16 letters or digits"),
        (#"{"passkey": 1, "confirm": true}"#, "give one of passkey, pinCode and confirm"),
        (#"{"timeout": 0}"#, "timeout must be more than 0 and at most 300 seconds"),
        (#"{"code": 1}"#, "unknown field"),
    ])
    func badPairBodiesAreRefused(_ body: String, _ message: String) async throws {
        let reply = try await call(router, "POST", device + "/pair", body: body)
        #expect(reply.status == 400)
        #expect(reply.error?["message"].map { "\($0)".contains(message) } == true, "\(reply.json)")
        #expect(central.pairings.withLock { $0.pairs }.isEmpty)
    }

    @Test func anAnswerNobodyAskedForIsRefused() async throws {
        let reply = try await call(router, "POST", device + "/pairing", body: #"{"passkey": 123456}"#)
        #expect(reply.status == 400)
        #expect(reply.error?["message"] as? String == "no pairing request of F0:00:00:00:00:01 is waiting for an answer")
        let empty = try await call(router, "POST", device + "/pairing", body: "{}")
        #expect(empty.status == 400)
    }

    @Test func theQuestionWaitingIsShownAndAnswered() async throws {
        central.pairings.withLock { $0.waiting = .confirmation(81234) }
        let shown = try await call(router, "GET", device + "/pairing")
        #expect(shown.json["waiting"] as? Bool == true)
        #expect(shown.json["request"] as? String == "confirm")
        #expect(shown.json["passkey"] as? String == "081234", "six digits, as the device shows them")
        let wrongKind = try await call(router, "POST", device + "/pairing", body: #"{"passkey": 81234}"#)
        #expect(wrongKind.status == 400)
        let answered = try await call(router, "POST", device + "/pairing", body: #"{"confirm": true}"#)
        #expect(answered.status == 200 && answered.json["answered"] as? String == "confirm")
        #expect(central.pairings.withLock { $0.answers } == [.confirm(true)])
        #expect(try await call(router, "GET", device + "/pairing").json["waiting"] as? Bool == false)
    }
}
