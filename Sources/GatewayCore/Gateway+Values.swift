import BLE

/// Reading values for every door: reads keep whole values (`ValueCache`) for later `maxAge`
/// answers, and a device's tree is kept for while it is not connected.
extension Gateway {
    /// Reads from the device, keeping a whole value for later `maxAge` requests (every door's
    /// reads alike, so that no read's value event is taken for a notification).
    package func readNow(_ id: BluetoothAddress, _ target: ValueTarget, offset: Int) async throws(BLEError) -> AttributeValue {
        let (handle, _) = try central.readable(target, in: try await tree(id))
        return try await values.reading(.init(device: id, handle: handle), whole: offset == 0) { () async throws(BLEError) in
            switch target {
            case .characteristic: try await central.readValue(id, .handle(handle), offset: offset)
            case .descriptor: try await central.readDescriptor(id, .handle(handle), offset: offset)
            }
        }
    }

    /// The value kept for `target` if it is at most `maxAge` old. Attributes are named in the
    /// tree as it is, or, while the device is not connected, as it was last seen.
    package func keptValue(_ id: BluetoothAddress, _ target: ValueTarget, maxAge: Duration) async throws(BLEError) -> ValueCache.Entry? {
        let snapshot: GATTSnapshot
        do {
            snapshot = try await tree(id)
        } catch where error.code == .cb(.notConnected) {
            guard let kept = values.tree(id) else { throw error }
            snapshot = kept
        }
        let (handle, uuid) = try central.readable(target, in: snapshot)
        return values.entry(.init(device: id, handle: handle), uuid: uuid, maxAge: maxAge)
    }

    /// A connected device's tree, kept for when it is not.
    package func tree(_ id: BluetoothAddress) async throws(BLEError) -> GATTSnapshot {
        let snapshot = try await central.snapshot(id)
        values.keep(snapshot, for: id)
        return snapshot
    }
}
