/// The blocklist applied to a device's GATT tree, as Web Bluetooth applies it: what an entry
/// excludes entirely is hidden from discovery and refused when addressed (`uuidNotAllowed`),
/// so that clients cannot tell a hidden attribute from one behind a refused operation; excluded
/// reads and writes are refused.
extension Blocklist {
    public func allows(_ operation: Operation, path: [BluetoothUUID]) -> Bool {
        entry(forbidding: operation, path: path) == nil
    }

    /// The tree as clients see it. Whatever is hidden takes what it contains with it, so each
    /// level only needs its own UUID checked.
    public func visible(_ services: [GATTService]) -> [GATTService] {
        services.filter { allows(.discovery, path: [$0.uuid]) }.map { service in
            var service = service
            service.characteristics = service.characteristics.filter { allows(.discovery, path: [$0.uuid]) }.map { c in
                var c = c
                c.descriptors = c.descriptors.filter { allows(.discovery, path: [$0.uuid]) }
                return c
            }
            return service
        }
    }

    /// The service `selector` names among those clients see.
    public func service(_ selector: AttributeSelector, in services: [GATTService]) throws(BLEError) -> GATTService {
        try pickVisible(in: services, "service \(selector)") { tree throws(BLEError) in
            try selector.pick(tree, kind: "service", handle: \.handle, uuid: \.uuid)
        }
    }

    /// The characteristic `ref` names among those clients see, if they may `operation` it.
    public func characteristic(_ ref: CharacteristicRef, in services: [GATTService],
                               for operation: Operation) throws(BLEError) -> GATTCharacteristic {
        let c = try pickVisible(in: services, "characteristic \(ref)") { tree throws(BLEError) in try ref.pick(in: tree) }
        let service = services.first { $0.handle == c.serviceHandle }
        try require(operation, "characteristic", c.label, path: [service?.uuid, c.uuid].compactMap { $0 })
        return c
    }

    /// The descriptor `ref` names among those clients see, if they may `operation` it.
    public func descriptor(_ ref: DescriptorRef, in services: [GATTService], for operation: Operation) throws(BLEError) -> GATTDescriptor {
        let d = try pickVisible(in: services, "descriptor \(ref)") { tree throws(BLEError) in try ref.pick(in: tree) }
        let path = services.lazy.compactMap { s in
            s.characteristics.first { $0.descriptors.contains(d) }.map { [s.uuid, $0.uuid, d.uuid] }
        }.first ?? [d.uuid]
        try require(operation, "descriptor", d.label, path: path)
        return d
    }

    /// `pick` among the attributes clients see. One that is not there but in the whole tree is
    /// hidden from them: `uuidNotAllowed`, whether the whole tree has one or several.
    private func pickVisible<T>(in services: [GATTService], _ named: String,
                                _ pick: ([GATTService]) throws(BLEError) -> T) throws(BLEError) -> T {
        do throws(BLEError) {
            return try pick(visible(services))
        } catch where error.code == .cb(.invalidHandle) {
            do throws(BLEError) {
                _ = try pick(services)
            } catch where error.code == .cb(.invalidHandle) {
                throw error
            } catch {}
            throw BLEError(.uuidNotAllowed, "\(named) is in the GATT blocklist: it is hidden from clients")
        }
    }

    private func require(_ operation: Operation, _ kind: String, _ label: String, path: [BluetoothUUID]) throws(BLEError) {
        guard let entry = entry(forbidding: operation, path: path) else { return }
        let verb = switch operation {
        case .discovery: "using"
        case .read: kind == "characteristic" ? "reading (or subscribing to)" : "reading"
        case .write: "writing"
        }
        throw BLEError(.uuidNotAllowed, "\(verb) \(kind) \(label) is not allowed: the GATT blocklist has \(entry.label)")
    }
}
