import BLE
import FoundationEssentials
import Synchronization
import Threading

/// A central with fixed answers that records what the gateway asked of it.
package final class FakeCentral: Central {
    package init() {}
    package let lastScan = Mutex<ScanOptions?>(nil)
    package let device = PeripheralInfo(
        id: BluetoothAddress("F0:00:00:00:00:01")!, addressType: "public", name: "Sim Heart Rate", rssi: -55,
        lastSeen: Date(timeIntervalSince1970: 1_800_000_000), state: .disconnected, paired: false,
        advertisement: AdvertisementData(localName: "Sim Heart Rate", serviceUUIDs: [BluetoothUUID("180d")!],
                                         manufacturerData: [0xFFFF: [0x48, 0x52]], serviceData: [BluetoothUUID("feaa")!: [0x10]],
                                         txPowerLevel: 4))

    package let handler = HandlerSlot<CentralEvent>()
    package func setEventHandler(_ handler: @escaping @Sendable (CentralEvent) -> Void) { self.handler.set(handler) }
    package func status() async -> ManagerStatus { ManagerStatus(state: .poweredOn, adapter: "hci0") }
    package func adapters() async throws(BLEError) -> [AdapterInfo] {
        [AdapterInfo(id: "hci0", address: BluetoothAddress("00:AA:00:00:00:01"), name: "sim", alias: "sim", powered: true,
                     discovering: false, selected: true)]
    }
    package func startScan(_ options: ScanOptions) async throws(BLEError) -> ScanStatus {
        try options.validate()
        lastScan.withLock { $0 = options }
        return ScanStatus(scanning: true, options: options, startedAt: Date(), stopsAt: nil, discovered: 0)
    }
    package func stopScan() async throws(BLEError) -> ScanStatus { ScanStatus(scanning: false, options: nil, startedAt: nil, stopsAt: nil, discovered: 0) }
    package func scanStatus() async -> ScanStatus { ScanStatus(scanning: false, options: nil, startedAt: nil, stopsAt: nil, discovered: 0) }
    /// What `peripherals()` lists besides `device`, and how often a test changed it.
    package let others = Mutex<(devices: [PeripheralInfo], version: UInt64)>(([], 1))
    package func list(_ devices: [PeripheralInfo]) { others.withLock { $0 = (devices, $0.version + 1) } }
    package func peripherals() async -> [PeripheralInfo] { [device] + others.withLock { $0.devices } }
    /// The list changes only when a test changes it, so the gateway may keep its encoding until then.
    package var peripheralsVersion: UInt64? { others.withLock { $0.version } }
    package func peripheral(_ id: BluetoothAddress) async throws(BLEError) -> PeripheralInfo {
        if let other = others.withLock({ $0.devices.first { $0.id == id } }) { return other }
        guard id == device.id else { throw BLEError(.unknownDevice, "no device \(id)") }
        var connected = device
        connected.state = .connected
        connected.mtu = 185
        return connected
    }

    // A connected device with two 0x180A services (as real devices have) and a serial characteristic.
    package let tree: [GATTService] = [
        GATTService(handle: 0x0010, uuid: BluetoothUUID("180a")!, isPrimary: true, characteristics: [
            GATTCharacteristic(handle: 0x0012, uuid: BluetoothUUID("2a29")!, serviceHandle: 0x0010, properties: [.read], flags: ["read"], isNotifying: false, descriptors: []),
        ]),
        GATTService(handle: 0x0020, uuid: BluetoothUUID("180a")!, isPrimary: true, characteristics: [
            GATTCharacteristic(handle: 0x0022, uuid: BluetoothUUID("2a29")!, serviceHandle: 0x0020, properties: [.read], flags: ["read"], isNotifying: false, descriptors: []),
        ]),
        GATTService(handle: 0x0030, uuid: BluetoothUUID("ffe0")!, isPrimary: true, characteristics: [
            GATTCharacteristic(handle: 0x0032, uuid: BluetoothUUID("ffe1")!, serviceHandle: 0x0030,
                               properties: [.read, .write, .writeWithoutResponse, .notify], flags: ["read", "write", "write-without-response", "notify"],
                               isNotifying: false, descriptors: [GATTDescriptor(handle: 0x0034, uuid: BluetoothUUID("2902")!)]),
        ]),
    ]
    package let writes = Mutex<[(UInt16, [UInt8], WriteType)]>([])

    package func connect(_ id: BluetoothAddress, timeout: Duration, autoReconnect: Bool) async throws(BLEError) -> PeripheralInfo { try await peripheral(id) }
    package func disconnect(_ id: BluetoothAddress) async throws(BLEError) -> PeripheralInfo { device }
    package func services(_ id: BluetoothAddress) async throws(BLEError) -> [GATTService] {
        _ = try await peripheral(id)
        return tree
    }
    // What a backend does with a reference, with the BLE model's own resolution and checks.
    package func characteristic(_ id: BluetoothAddress, _ ref: CharacteristicRef) async throws(BLEError) -> GATTCharacteristic {
        try ref.pick(in: try await services(id))
    }
    package func readValue(_ id: BluetoothAddress, _ ref: CharacteristicRef, offset: Int) async throws(BLEError) -> AttributeValue {
        let c = try await characteristic(id, ref)
        try c.requireReadable()
        return AttributeValue(handle: c.handle, uuid: c.uuid, value: Array("hi \(c.handle)".utf8))
    }
    package func writeValue(_ id: BluetoothAddress, _ ref: CharacteristicRef, _ value: [UInt8], type: WriteType,
                    fragment: Bool) async throws(BLEError) -> WriteOutcome {
        let c = try await characteristic(id, ref)
        try c.requireWritable(type)
        let plan = try WritePlan(length: value.count, type: type, mtu: try await peripheral(id).mtu, fragment: fragment)
        writes.withLock { $0.append((c.handle, value, type)) }
        return WriteOutcome(handle: c.handle, uuid: c.uuid, type: type, written: value.count, writes: plan.writes)
    }
    package func readDescriptor(_ id: BluetoothAddress, _ ref: DescriptorRef, offset: Int) async throws(BLEError) -> AttributeValue {
        let d = try ref.pick(in: try await services(id))
        return AttributeValue(handle: d.handle, uuid: d.uuid, value: [1, 0])
    }
    package func writeDescriptor(_ id: BluetoothAddress, _ ref: DescriptorRef, _ value: [UInt8]) async throws(BLEError) -> WriteOutcome {
        let d = try ref.pick(in: try await services(id))
        return WriteOutcome(handle: d.handle, uuid: d.uuid, type: .withResponse, written: value.count, writes: 1)
    }
    package let notify = NotifyCalls()
    package func setNotifyValue(_ enabled: Bool, _ id: BluetoothAddress, characteristic: UInt16) async throws(BLEError) -> Bool {
        try await notify.call(enabled, id, characteristic: characteristic)
    }
    package func keepNotifying(_ id: BluetoothAddress, characteristic: UInt16) async {
        _ = try? await setNotifyValue(true, id, characteristic: characteristic)
    }
    /// What `pair` and `answerPairing` were given, and the question `pairingRequest` answers.
    package let pairings = Mutex<(pairs: [PairingAnswer?], answers: [PairingAnswer], waiting: PairingRequest?)>(([], [], nil))
    package func pair(_ id: BluetoothAddress, answer: PairingAnswer?, timeout: Duration) async throws(BLEError) -> PeripheralInfo {
        var paired = try await peripheral(id)
        pairings.withLock { $0.pairs.append(answer) }
        (paired.paired, paired.bonded) = (true, true)
        return paired
    }
    package func answerPairing(_ id: BluetoothAddress, _ answer: PairingAnswer) async throws(BLEError) {
        try pairings.withLock { p throws(BLEError) in
            guard let waiting = p.waiting, answer.answers(waiting) else {
                throw BLEError(.invalidParameters, "no pairing request of \(id) is waiting for an answer")
            }
            p.answers.append(answer)
            p.waiting = nil
        }
    }
    package func pairingRequest(_ id: BluetoothAddress) async -> PairingRequest? { pairings.withLock { $0.waiting } }
    package func removeBond(_ id: BluetoothAddress) async throws(BLEError) { throw BLEError(.operationNotSupported, "the fake keeps no bonds") }
    package func setTrusted(_ trusted: Bool, _ id: BluetoothAddress) async throws(BLEError) -> PeripheralInfo {
        throw BLEError(.operationNotSupported, "the fake trusts no one")
    }
    package func refreshGATT(_ id: BluetoothAddress, dropBond: Bool) async throws(BLEError) -> [GATTService] {
        throw BLEError(.operationNotSupported, "the fake has no cache")
    }
}


/// `setNotifyValue` as `FakeCentral` answers it: every call recorded in order, and the next call
/// can be told to fail, or to wait at a gate until the test opens it.
package final class NotifyCalls: Sendable {
    package struct Call: Equatable, Sendable, CustomStringConvertible {
        package var enabled: Bool
        package var device: BluetoothAddress
        package var characteristic: UInt16
        package init(enabled: Bool, device: BluetoothAddress, characteristic: UInt16) {
            self.enabled = enabled
            self.device = device
            self.characteristic = characteristic
        }
        package var description: String { "\(enabled ? "on" : "off") \(device) \(AttributeSelector.format(characteristic))" }
    }

    private struct State {
        var calls: [Call] = []
        var failNext: BLEError?
        var gateNext = false
        var parked: [CheckedContinuation<Void, Never>] = []
    }
    private let state = Mutex(State())

    package init() {}

    /// Every call so far, in the order they were made (recorded as they start).
    package var all: [Call] { state.withLock { $0.calls } }
    /// Calls waiting at the gate.
    package var atGate: Int { state.withLock { $0.parked.count } }

    /// The next call fails with `error` (it is still recorded).
    package func failNextCall(with error: BLEError) { state.withLock { $0.failNext = error } }
    /// The next call waits, once recorded, until `openGate()`.
    package func gateNextCall() { state.withLock { $0.gateNext = true } }
    package func openGate() {
        for continuation in state.withLock({ s in defer { s.parked = [] }; return s.parked }) { continuation.resume() }
    }

    package func call(_ enabled: Bool, _ device: BluetoothAddress, characteristic: UInt16) async throws(BLEError) -> Bool {
        let (gated, failure) = state.withLock { s -> (Bool, BLEError?) in
            s.calls.append(Call(enabled: enabled, device: device, characteristic: characteristic))
            defer { (s.gateNext, s.failNext) = (false, nil) }
            return (s.gateNext, s.failNext)
        }
        if gated {
            await withCheckedContinuation { continuation in state.withLock { $0.parked.append(continuation) } }
        }
        if let failure { throw failure }
        return enabled
    }
}

/// Polls `condition` (yielding, then every millisecond) until it holds or `timeout` passes; returns
/// whether it held. For states that have no event to wait for.
package func eventually(within timeout: Duration = .seconds(5), _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while !condition() {
        if ContinuousClock.now >= deadline { return false }
        await Task.yield()
        try? await Task.sleep(for: .milliseconds(1))
    }
    return true
}

