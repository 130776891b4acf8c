import BLE

/// The central as clients may use it under the GATT blocklist: hidden attributes are left out
/// of the tree and refused when addressed, excluded reads (notifications too) and writes are
/// refused (`uuidNotAllowed`, 403), and values of characteristics clients may not read are not
/// passed on as events. The gateway reaches the device only through this, so every door's
/// requests, event streams, stream commands and restored holds all keep the same list.
///
/// Subscribing is a read: BlueZ writes the Client Characteristic Configuration itself
/// (StartNotify), so the default `2902 exclude-writes` refuses only writing that descriptor
/// directly, as Web Bluetooth's `startNotifications()` works beside the same entry.
///
/// Operations the device refuses until it is paired go through `autoPairing` (the pairing keys
/// file): with a key for the device, they pair and are tried once more; what reads such a
/// device's tree first waits for the operations (and the pairing) before it.
package struct BlocklistedCentral: Central {
    package let base: Central
    package let blocklist: Blocklist
    package var autoPairing = AutoPairing()

    package func setEventHandler(_ handler: @escaping @Sendable (CentralEvent) -> Void) {
        base.setEventHandler { [blocklist, base] event in
            if case .value(let update) = event,
               !blocklist.allows(.read, path: [update.serviceUUID, update.characteristicUUID]) {
                return
            }
            if case .resubscribed(let id, let handle, let uuids?, nil) = event,
               !blocklist.allows(.read, path: [uuids.service, uuids.characteristic]) {
                // A wish kept from before (restored from the state file while its device was
                // away) on a characteristic clients may not read: ended, and said so.
                Task { _ = try? await base.setNotifyValue(false, id, characteristic: handle) }
                let refused = BLEError(.uuidNotAllowed, "subscribing to characteristic \(uuids.characteristic) is not allowed: it is in the GATT blocklist")
                return handler(.resubscribed(id: id, characteristic: handle, uuids: uuids, error: refused))
            }
            handler(event)
        }
    }

    package func services(_ id: BluetoothAddress) async throws(BLEError) -> [GATTService] {
        await autoPairing.waitForTurn(id)
        return blocklist.visible(try await base.services(id))
    }

    /// The service `selector` names (no `Central` requirement: the gateway picks services itself).
    package func service(_ id: BluetoothAddress, _ selector: AttributeSelector) async throws(BLEError) -> GATTService {
        await autoPairing.waitForTurn(id)
        return try blocklist.service(selector, in: try await base.services(id))
    }

    package func characteristic(_ id: BluetoothAddress, _ ref: CharacteristicRef) async throws(BLEError) -> GATTCharacteristic {
        await autoPairing.waitForTurn(id)
        return try blocklist.characteristic(ref, in: try await base.services(id), for: .discovery)
    }

    // Each operation goes on by the handle the check resolved, so the backend acts on exactly
    // the attribute that was checked. The check is inside the pairing's turn: an operation that
    // waited for a device's pairing resolves against the device as it is after it.

    package func readValue(_ id: BluetoothAddress, _ ref: CharacteristicRef, offset: Int) async throws(BLEError) -> AttributeValue {
        try await autoPairing.retrying(id, "read of \(ref)", on: base) { () async throws(BLEError) in
            let c = try blocklist.characteristic(ref, in: try await base.services(id), for: .read)
            return try await base.readValue(id, .handle(c.handle), offset: offset)
        }
    }

    package func writeValue(_ id: BluetoothAddress, _ ref: CharacteristicRef, _ value: [UInt8], type: WriteType,
                    fragment: Bool) async throws(BLEError) -> WriteOutcome {
        try await autoPairing.retrying(id, "write of \(ref)", on: base) { () async throws(BLEError) in
            let c = try blocklist.characteristic(ref, in: try await base.services(id), for: .write)
            return try await base.writeValue(id, .handle(c.handle), value, type: type, fragment: fragment)
        }
    }

    package func readDescriptor(_ id: BluetoothAddress, _ ref: DescriptorRef, offset: Int) async throws(BLEError) -> AttributeValue {
        try await autoPairing.retrying(id, "read of \(ref)", on: base) { () async throws(BLEError) in
            let d = try blocklist.descriptor(ref, in: try await base.services(id), for: .read)
            return try await base.readDescriptor(id, .handle(d.handle), offset: offset)
        }
    }

    package func writeDescriptor(_ id: BluetoothAddress, _ ref: DescriptorRef, _ value: [UInt8]) async throws(BLEError) -> WriteOutcome {
        try await autoPairing.retrying(id, "write of \(ref)", on: base) { () async throws(BLEError) in
            let d = try blocklist.descriptor(ref, in: try await base.services(id), for: .write)
            return try await base.writeDescriptor(id, .handle(d.handle), value)
        }
    }

    /// The device's tree as the backend has it now, for the value cache to keep.
    package func snapshot(_ id: BluetoothAddress) async throws(BLEError) -> GATTSnapshot {
        await autoPairing.waitForTurn(id)
        return GATTSnapshot(services: try await base.services(id))
    }

    /// The attribute `target` names in `snapshot`, if clients may read it: a kept value is
    /// answered under the same list as a read.
    package func readable(_ target: ValueTarget, in snapshot: GATTSnapshot) throws(BLEError) -> (handle: UInt16, uuid: BluetoothUUID) {
        switch target {
        case .characteristic(let ref):
            let c = try blocklist.characteristic(ref, in: snapshot.services, for: .read)
            return (c.handle, c.uuid)
        case .descriptor(let ref):
            let d = try blocklist.descriptor(ref, in: snapshot.services, for: .read)
            return (d.handle, d.uuid)
        }
    }

    /// Starting is checked as a read; stopping never is, so that a release always goes through.
    package func setNotifyValue(_ enabled: Bool, _ id: BluetoothAddress, characteristic: UInt16) async throws(BLEError) -> Bool {
        guard enabled else { return try await base.setNotifyValue(false, id, characteristic: characteristic) }
        return try await autoPairing.retrying(id, "subscription to \(handleText(characteristic))", on: base) { () async throws(BLEError) in
            _ = try blocklist.characteristic(.handle(characteristic), in: try await base.services(id), for: .read)
            return try await base.setNotifyValue(true, id, characteristic: characteristic)
        }
    }

    // The rest is not about attributes. Advertised service UUIDs stay in device lists, as Web
    // Bluetooth leaves them: anyone in radio range receives them anyway.

    /// A wish restored from the state file: what it is for is known once the device is there, so
    /// the blocklist is applied to its outcome (the event handler above).
    package func keepNotifying(_ id: BluetoothAddress, characteristic: UInt16) async {
        await base.keepNotifying(id, characteristic: characteristic)
    }

    /// Without an answer given, the pairing keys file's key for the device, if any.
    package func pair(_ id: BluetoothAddress, answer: PairingAnswer?, timeout: Duration) async throws(BLEError) -> PeripheralInfo {
        try await base.pair(id, answer: answer ?? autoPairing.key(id), timeout: timeout)
    }
    package func answerPairing(_ id: BluetoothAddress, _ answer: PairingAnswer) async throws(BLEError) {
        try await base.answerPairing(id, answer)
    }
    package func pairingRequest(_ id: BluetoothAddress) async -> PairingRequest? { await base.pairingRequest(id) }
    package func removeBond(_ id: BluetoothAddress) async throws(BLEError) { try await base.removeBond(id) }
    package func setTrusted(_ trusted: Bool, _ id: BluetoothAddress) async throws(BLEError) -> PeripheralInfo {
        try await base.setTrusted(trusted, id)
    }
    /// The refreshed tree as clients may see it.
    package func refreshGATT(_ id: BluetoothAddress, dropBond: Bool) async throws(BLEError) -> [GATTService] {
        blocklist.visible(try await base.refreshGATT(id, dropBond: dropBond))
    }

    package func status() async -> ManagerStatus { await base.status() }
    package func adapters() async throws(BLEError) -> [AdapterInfo] { try await base.adapters() }
    package func startScan(_ options: ScanOptions) async throws(BLEError) -> ScanStatus { try await base.startScan(options) }
    package func stopScan() async throws(BLEError) -> ScanStatus { try await base.stopScan() }
    package func scanStatus() async -> ScanStatus { await base.scanStatus() }
    package func startWatch(_ options: WatchOptions) async throws(BLEError) -> WatchStatus { try await base.startWatch(options) }
    package func stopWatch() async throws(BLEError) -> WatchStatus { try await base.stopWatch() }
    package func watchStatus() async -> WatchStatus { await base.watchStatus() }
    package func watched() async -> [PeripheralInfo] { await base.watched() }
    package func peripherals() async -> [PeripheralInfo] { await base.peripherals() }
    package var peripheralsVersion: UInt64? { base.peripheralsVersion }
    package func peripheral(_ id: BluetoothAddress) async throws(BLEError) -> PeripheralInfo { try await base.peripheral(id) }
    package func connect(_ id: BluetoothAddress, timeout: Duration, autoReconnect: Bool) async throws(BLEError) -> PeripheralInfo {
        try await base.connect(id, timeout: timeout, autoReconnect: autoReconnect)
    }
    package func connect(_ id: BluetoothAddress, timeout: Duration, autoReconnect: Bool, adapter: String?) async throws(BLEError) -> PeripheralInfo {
        try await base.connect(id, timeout: timeout, autoReconnect: autoReconnect, adapter: adapter)
    }
    package func connectWhenHeard(_ id: BluetoothAddress, timeout: Duration, listening: Duration) async throws(BLEError) -> PeripheralInfo {
        try await base.connectWhenHeard(id, timeout: timeout, listening: listening)
    }
    package func disconnect(_ id: BluetoothAddress) async throws(BLEError) -> PeripheralInfo { try await base.disconnect(id) }
    package func diagnostics() -> [CentralMetric] { base.diagnostics() }
}

/// A device's whole GATT tree, hidden attributes included, kept while the device is not
/// connected. Opaque: only `BlocklistedCentral.readable` looks inside, under the blocklist.
package struct GATTSnapshot: Sendable {
    fileprivate let services: [GATTService]
}

/// The attribute a value route reads.
package enum ValueTarget: Sendable {
    case characteristic(CharacteristicRef)
    case descriptor(DescriptorRef)
}
