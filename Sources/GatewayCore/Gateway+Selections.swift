import BLE

/// What stream clients select (a stream's query, or a `subscribe` command), and the
/// notification hold a selection of one characteristic takes.
extension Gateway {
    /// `?types=notification,connection&device=...&characteristic=2a37&format=hex&everyPacket=true`.
    package static func selection(types: String?, device: String?, characteristic: String?, format: String?,
                          everyPacket: Bool?) throws(BLEError) -> Selection {
        var selection = Selection()
        selection.everyPacket = everyPacket ?? false
        if let types {
            var set = EventTypes()
            for name in try Parse.list(types, field: "types") {
                guard let type = EventType(rawValue: name) else {
                    throw BLEError(.invalidParameters, "unknown event type \"\(name)\"; types are \(EventType.names)")
                }
                set.insert(EventTypes(type))
            }
            selection.types = set
        }
        if let device { selection.device = try Parse.address(device) }
        if let characteristic {
            guard selection.device != nil else {
                throw BLEError(.invalidParameters, "characteristic needs a device")
            }
            selection.characteristic = try Parse.selector(characteristic)
            if types == nil { selection.types = EventTypes(.notification) }
        }
        selection.format = try Parse.format(format)
        return selection
    }

    /// The characteristic a selection subscribes to (resolved to its handle, so that a UUID
    /// stands for one attribute), or nil when it selects no single characteristic.
    package func resolveHold(_ selection: Selection) async throws(BLEError) -> NotificationHolds.Key? {
        guard let device = selection.device, let selector = selection.characteristic, selection.types.contains(.notification) else {
            return nil
        }
        let c = try await central.characteristic(device, CharacteristicRef(selector))
        try c.requireNotifiable()
        return NotificationHolds.Key(device: device, characteristic: c.handle)
    }
}
