import BLE
import DBus
import Testing
@testable import BlueZ

/// Notifications held on a device come back after a reconnection even when BlueZ exports its GATT
/// table late and in pieces (seen on real bluetoothd after a restart: "connected, 2 services",
/// then the others): a wish is never dropped by a failed restore.
@Suite(.serialized) struct RestoreTests {
    static let hr = CentralRig.hr
    /// The GATT objects come in two pieces after each (re)connection: the Generic Attribute
    /// service with the link and ServicesResolved, the heart rate and battery services later.
    static func inPieces(after ms: Int) -> Value {
        .string(#"{"lateServices": {"first": 1, "restAfterMs": \#(ms), "resolved": "between"}, "forgetGATT": true}"#)
    }

    enum Fault: String, CaseIterable { case linkLoss, bluetoothdRestart }

    private func inject(_ fault: Fault, _ rig: CentralRig) async throws {
        switch fault {
        case .linkLoss: try await rig.control("DropLink", [.string(Self.hr.description)])
        case .bluetoothdRestart: try await rig.control("Restart", [.uint32(300)])
        }
    }

    private func handle(_ rig: CentralRig, _ uuid: String) async throws -> UInt16 {
        try await rig.central.characteristic(Self.hr, CharacteristicRef(.uuid(BluetoothUUID(uuid)!))).handle
    }

    /// The peripheral notifies `uuid` every 50 ms until the central hears one, for at most `deadline`.
    private func expectNotifications(_ rig: CentralRig, _ uuid: String, within deadline: Duration = .seconds(10)) async throws {
        let end = ContinuousClock.now + deadline
        var n: UInt8 = 0
        while ContinuousClock.now < end {
            n &+= 1
            let since = rig.events.recorded
            let bytes: [UInt8] = [0xD0, n]
            try await rig.notify(Self.hr, uuid, bytes)
            let heard = try? await rig.events.wait(since: since, timeout: .milliseconds(50), what: "a notification of \(uuid)") {
                if case .value(let v) = $0 { v.value == bytes && v.characteristicUUID == BluetoothUUID(uuid)! } else { false }
            }
            if heard != nil { return }
        }
        Issue.record("no notification of \(uuid) within \(deadline)")
    }

    private static func resubscribed(_ handle: UInt16, failed: Bool) -> EventLog.Match {
        { if case .resubscribed(hr, handle, _, let error) = $0 { (error != nil) == failed } else { false } }
    }

    @Test(arguments: Fault.allCases)
    func twoHoldsComeBackWhenTheTableIsExportedInPieces(_ fault: Fault) async throws {
        let rig = try await CentralRig.connected([Self.hr], autoReconnect: true)
        defer { rig.close() }
        let heartRate = try await handle(rig, "2a37"), battery = try await handle(rig, "2a19")
        for h in [heartRate, battery] { #expect(try await rig.central.setNotifyValue(true, Self.hr, characteristic: h)) }
        try await rig.control("SetFault", [.string(Self.hr.description), Self.inPieces(after: 800)])
        let since = rig.events.recorded
        try await inject(fault, rig)
        _ = try await rig.events.wait(since: since, timeout: .seconds(20), what: "connected") {
            if case .connection(Self.hr, .connected, _) = $0 { true } else { false }
        }
        // No client does anything: both come back by themselves, once their objects are there.
        for h in [heartRate, battery] {
            _ = try await rig.events.wait(since: since, timeout: .seconds(10), what: "\(h) restored", Self.resubscribed(h, failed: false))
        }
        try await expectNotifications(rig, "2a37")
        try await expectNotifications(rig, "2a19")
        #expect(rig.events.count(Self.resubscribed(heartRate, failed: true)) == 0)
        #expect(rig.central.diagnostics().filter { $0.name == "gattway_notifications_unrestored" }.map(\.value) == [0, 0])
    }

    /// bluetoothd 5.66 loses a kept session when re-enabling it on the new link fails (a link
    /// lost while its services were resolved, in the lab) and leaves Notifying true: the restore
    /// starts it again all the same, and the notifications come.
    @Test func aSessionBlueZLostWithoutAWordIsStartedAgain() async throws {
        let rig = try await CentralRig.connected([Self.hr], autoReconnect: true)
        defer { rig.close() }
        let heartRate = try await handle(rig, "2a37")
        #expect(try await rig.central.setNotifyValue(true, Self.hr, characteristic: heartRate))
        try await rig.control("SetFault", [.string(Self.hr.description), .string(#"{"keptSessionsLost": true}"#)])
        let since = rig.events.recorded
        try await inject(.linkLoss, rig)
        _ = try await rig.events.wait(since: since, timeout: .seconds(20), what: "connected") {
            if case .connection(Self.hr, .connected, _) = $0 { true } else { false }
        }
        _ = try await rig.events.wait(since: since, timeout: .seconds(10), what: "restored", Self.resubscribed(heartRate, failed: false))
        try await expectNotifications(rig, "2a37")
    }

    @Test func aHoldNotBackInTimeIsReportedKeptAndRestoredWhenItsObjectComes() async throws {
        let rig = try await CentralRig.connected([Self.hr], autoReconnect: true, restoreDeadline: .milliseconds(500))
        defer { rig.close() }
        let battery = try await handle(rig, "2a19")
        #expect(try await rig.central.setNotifyValue(true, Self.hr, characteristic: battery))
        try await rig.control("SetFault", [.string(Self.hr.description), Self.inPieces(after: 2500)])
        let since = rig.events.recorded
        try await inject(.linkLoss, rig)
        let failed = try await rig.events.wait(since: since, timeout: .seconds(10), what: "the failure reported", Self.resubscribed(battery, failed: true))
        guard case .resubscribed(_, _, let uuids, let error?) = failed else { return }
        #expect(error.code == .cb(.invalidHandle), "\(error)")
        #expect(uuids == CharacteristicUUIDs(service: BluetoothUUID("180f")!, characteristic: BluetoothUUID("2a19")!),
                "the wish remembers what it was for")
        let failedGauge = rig.central.diagnostics().first { $0.name == "gattway_notifications_unrestored" && $0.labels.first?.1 == "failed" }
        #expect(failedGauge?.value == 1)
        // Kept: when the battery service is exported, the hold is taken again.
        _ = try await rig.events.wait(since: since, timeout: .seconds(10), what: "restored later", Self.resubscribed(battery, failed: false))
        try await expectNotifications(rig, "2a19")
    }

    @Test func aWishMadeWhileDisconnectedStartsAtTheConnectionAndALetGoEndsIt() async throws {
        let rig = try await CentralRig.connected([Self.hr])
        defer { rig.close() }
        let heartRate = try await handle(rig, "2a37"), battery = try await handle(rig, "2a19")
        _ = try await rig.central.disconnect(Self.hr)
        // As state restoration asks at start: the device is not connected.
        await rig.central.keepNotifying(Self.hr, characteristic: heartRate)
        await rig.central.keepNotifying(Self.hr, characteristic: battery)
        _ = try await rig.central.setNotifyValue(false, Self.hr, characteristic: battery)
        let since = rig.events.recorded
        _ = try await rig.central.connect(Self.hr, timeout: .seconds(10), autoReconnect: false)
        _ = try await rig.events.wait(since: since, what: "2a37 started", Self.resubscribed(heartRate, failed: false))
        try await expectNotifications(rig, "2a37")
        #expect(rig.events.count { if case .resubscribed(_, battery, _, _) = $0 { true } else { false } } == 0, "let go of: not asked for")
    }
}
