import BLE
import Simulator
import Testing
@testable import BlueZ

/// What a call that changes a device answered, the device and the list say as soon as it returns
/// (issue 35).
@Suite(.serialized) struct ReadYourWritesTests {
    static let secure = BluetoothAddress("F0:00:00:00:00:03")!  // Just Works

    /// BlueZ forgets a device whose bond is removed. The scan's device stays listed, as last seen,
    /// until it is heard again: without the pairing, the bond and the trust it had when last seen.
    @Test func aRemovedBondIsGoneFromWhatIsKeptOfTheDevice() async throws {
        let rig = try await CentralRig.start()
        defer { rig.close() }
        _ = try await rig.central.startScan(ScanOptions())
        _ = try await rig.events.wait(what: "the device") { if case .advertisement(let p) = $0 { p.id == Self.secure } else { false } }
        let paired = try await rig.central.pair(Self.secure, answer: nil, timeout: .seconds(10))
        let trusted = try await rig.central.setTrusted(true, Self.secure)
        #expect(paired.paired && paired.bonded && trusted.trusted)
        // No discovery from here: nothing hears the device again, what is kept of it is what shows.
        _ = try await rig.central.stopScan()

        try await rig.central.removeBond(Self.secure)

        let device = try await rig.central.peripheral(Self.secure)
        #expect(device.stale && !device.paired && !device.bonded && !device.trusted, "\(device)")
        let listed = try #require(await rig.central.peripherals().first { $0.id == Self.secure })
        #expect(listed == device)
    }
}
