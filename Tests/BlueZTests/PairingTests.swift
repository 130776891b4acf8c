import BLE
import DBus
import Testing
@testable import BlueZ

/// What a pairing answers: bluetoothd 5.66 answers a `Pair` that had to connect before it has
/// resolved the new link's services (in the lab ServicesResolved came about 0.1 s after the
/// reply; the simulator's `servicesResolvedAfterPairingMs` does the same).
@Suite(.serialized) struct PairingTests {
    static let secure = BluetoothAddress("F0:00:00:00:00:03")!  // Just Works

    /// The device, not connected, with `fault`: the Pair connects, as after a refused read.
    private func disconnected(_ fault: String) async throws -> CentralRig {
        let rig = try await CentralRig.connected([Self.secure])
        _ = try await rig.control("SetFault", [.string(Self.secure.description), .string(fault)])
        _ = try await rig.central.disconnect(Self.secure)
        return rig
    }

    @Test func aPairingAnswersOnceTheLinkItMadeIsReady() async throws {
        let rig = try await disconnected(#"{"servicesResolvedAfterPairingMs": 300}"#)
        defer { rig.close() }
        let started = ContinuousClock.now
        let paired = try await rig.central.pair(Self.secure, answer: nil, timeout: .seconds(10))
        #expect(paired.paired && paired.state == .connected)
        #expect(ContinuousClock.now - started >= .milliseconds(250))
        // An operation sent on the answer meets a ready device.
        #expect(try await rig.central.services(Self.secure).isEmpty == false)
        let encrypted = BluetoothUUID("12345678-1234-5678-1234-56789abc0001")!
        #expect(try await rig.central.readValue(Self.secure, CharacteristicRef(.uuid(encrypted)), offset: 0).value == Array("secret-jw".utf8))
    }

    @Test func theWaitForTheServicesEndsWithThePairingsTimeout() async throws {
        let rig = try await disconnected(#"{"servicesResolvedAfterPairingMs": 60000}"#)
        defer { rig.close() }
        let started = ContinuousClock.now
        let paired = try await rig.central.pair(Self.secure, answer: nil, timeout: .seconds(1))
        // Waited for the services until the pairing's timeout, not longer; the pairing itself
        // succeeded: answered as the device is.
        let waited = ContinuousClock.now - started
        #expect(waited >= .milliseconds(900) && waited < .seconds(3), "\(waited)")
        #expect(paired.paired && paired.state == .connected)
        await #expect(throws: BLEError.self) { try await rig.central.services(Self.secure) }
    }
}
