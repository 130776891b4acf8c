import BLE
import DBus

/// Properties of the objects bluetoothd serves, and Properties.Get, GetAll and Set as gdbus answers them.
extension Engine {
    /// The properties an object's interface has now (nil: no such interface).
    func properties(_ ref: ObjectRef, _ interface: String) -> [(String, Value)]? {
        guard interfaces(of: ref).contains(interface) else { return nil }
        switch (ref, interface) {
        case (.adapter(let a), Interface.adapter): return adapterProperties(a)
        case (.adapter(let a), Interface.advertisingManager): return advertisingManagerProperties(a)
        case (.device(let d), Interface.device): return deviceProperties(d)
        case (.service(let d, let s), Interface.service): return serviceProperties(d, s)
        case (.characteristic(let d, let c), Interface.characteristic): return characteristicProperties(d, c)
        case (.descriptor(let d, let x), Interface.descriptor): return descriptorProperties(d, x)
        default: return []
        }
    }

    private func adapterProperties(_ a: Int) -> [(String, Value)] {
        let adapter = adapters[a]
        return [
            ("Address", .string(adapter.config.address.description)),
            ("AddressType", .string("public")),
            ("Name", .string(adapter.config.name)),
            ("Alias", .string(adapter.alias ?? adapter.config.name)),
            ("Class", .uint32(0)),
            ("Powered", .bool(adapter.powered)),
            ("Discoverable", .bool(adapter.discoverable)),
            ("DiscoverableTimeout", .uint32(adapter.discoverableTimeout)),
            ("Pairable", .bool(adapter.pairable)),
            ("PairableTimeout", .uint32(adapter.pairableTimeout)),
            ("Discovering", .bool(adapter.discovering)),
            ("UUIDs", .strings([0x1800, 0x1801, 0x180A].map { BluetoothUUID(uint16: $0).uuidString })),
            ("Modalias", .string("usb:v1D6Bp0246d0542")),
            ("Roles", .strings(["central", "peripheral"])),
        ]
    }

    private func deviceProperties(_ d: Int) -> [(String, Value)] {
        let device = devices[d]
        var p: [(String, Value)] = [
            ("Address", .string(device.address.description)),
            ("AddressType", .string(device.config.addressType)),
        ]
        if let name = device.name { p.append(("Name", .string(name))) }
        p += [
            ("Alias", .string(device.displayAlias)),
            ("Paired", .bool(device.paired)),
            ("Bonded", .bool(device.bonded)),
            ("Trusted", .bool(device.trusted)),
            ("Blocked", .bool(device.blocked)),
            ("LegacyPairing", .bool(false)),
        ]
        if let rssi = device.rssi { p.append(("RSSI", .int16(Int16(clamping: rssi)))) }
        p += [
            ("Connected", .bool(device.connected)),
            ("UUIDs", .strings(device.uuids.map(\.uuidString))),
            ("Adapter", .objectPath(adapters[device.adapter].path)),
        ]
        if !device.manufacturerData.isEmpty {
            p.append(("ManufacturerData", .dictionary(key: Types.q, value: Types.v, device.manufacturerData.sorted { $0.key < $1.key }.map {
                .init(.uint16($0.key), .variant(.bytes($0.value)))
            })))
        }
        if !device.serviceData.isEmpty {
            p.append(("ServiceData", .dictionary(key: Types.s, value: Types.v, device.serviceData.sorted { $0.key < $1.key }.map {
                .init(.string($0.key.uuidString), .variant(.bytes($0.value)))
            })))
        }
        if let tx = device.txPower { p.append(("TxPower", .int16(Int16(clamping: tx)))) }
        p.append(("ServicesResolved", .bool(device.servicesResolved)))
        if adapterConfig(d).experimental, let flags = device.advertisingFlags { p.append(("AdvertisingFlags", .bytes(flags))) }
        return p
    }

    private func serviceProperties(_ d: Int, _ s: Int) -> [(String, Value)] {
        let service = devices[d].gatt.services[s]
        return [
            ("UUID", .string(service.uuid.uuidString)),
            ("Device", .objectPath(devices[d].path)),
            ("Primary", .bool(service.primary)),
            ("Includes", .objectPaths([])),
        ]
    }

    private func characteristicProperties(_ d: Int, _ c: Int) -> [(String, Value)] {
        let info = devices[d].gatt.characteristics[c]
        let state = info.state
        var p: [(String, Value)] = [
            ("UUID", .string(info.uuid.uuidString)),
            ("Service", .objectPath(devices[d].gatt.services[info.service].path)),
        ]
        if let cached = state.cached, !cached.isEmpty { p.append(("Value", .bytes(cached))) }
        if info.canNotify { p.append(("Notifying", .bool(state.notifying))) }
        p.append(("Flags", .strings(info.flags)))
        if info.hasWriteWithoutResponse { p.append(("WriteAcquired", .bool(false))) }
        if info.flags.contains("notify") { p.append(("NotifyAcquired", .bool(false))) }
        if devices[d].hasGATT { p.append(("MTU", .uint16(UInt16(devices[d].mtu)))) }
        return p
    }

    private func descriptorProperties(_ d: Int, _ x: Int) -> [(String, Value)] {
        let info = devices[d].gatt.descriptors[x]
        var p: [(String, Value)] = [
            ("UUID", .string(info.uuid.uuidString)),
            ("Characteristic", .objectPath(devices[d].gatt.characteristics[info.characteristic].path)),
        ]
        if let cached = info.state.cached, !cached.isEmpty { p.append(("Value", .bytes(cached))) }
        return p
    }

    /// Properties.Get, GetAll and Set, with gdbus's errors.
    func propertiesCall(_ call: Message, _ ref: ObjectRef) {
        guard let interface = call.body.first?.string else { return fail(call, DBusError.invalidArgs("No arguments given")) }
        guard let current = properties(ref, interface) else {
            return fail(call, DBusError.invalidArgs("No such interface '\(interface)'"))
        }
        switch call.member {
        case "GetAll":
            reply(call, [.stringVariantDictionary(current)])
        case "Get":
            let name = call.body[1].string ?? ""
            guard let value = current.first(where: { $0.0 == name })?.1 else {
                return fail(call, DBusError.invalidArgs("No such property '\(name)'"))
            }
            reply(call, [.variant(value)])
        default:
            let name = call.body[1].string ?? ""
            guard let declared = Interface.property(interface, name) else {
                return fail(call, BusError(name: "org.freedesktop.DBus.Error.UnknownProperty", message: "No such property '\(name)'"))
            }
            guard declared.writable else {
                return fail(call, BusError(name: "org.freedesktop.DBus.Error.PropertyReadOnly", message: "Property '\(name)' is not writable"))
            }
            let value = call.body[2].unwrapped
            guard value.signature.rawValue == declared.type else {
                return fail(call, BusError(name: "org.freedesktop.DBus.Error.InvalidSignature", message: "Invalid signature for '\(name)'"))
            }
            setProperty(call, ref, name, value)
        }
    }

    /// Properties.Set: gdbus answers at once and signals the change afterwards.
    private func setProperty(_ call: Message, _ ref: ObjectRef, _ name: String, _ value: Value) {
        var changed: [String] = []
        switch (ref, name) {
        case (.adapter(let a), "Powered"):
            return setPowered(a, value.bool ?? true, call: call)
        case (.adapter(let a), "Alias"):
            let alias = value.string ?? ""
            adapters[a].alias = alias.isEmpty ? nil : alias
            changed = [name]
        case (.adapter(let a), "Discoverable"):
            adapters[a].discoverable = value.bool ?? false
            changed = [name]
        case (.adapter(let a), "Pairable"):
            adapters[a].pairable = value.bool ?? false
            changed = [name]
        case (.adapter(let a), "DiscoverableTimeout"):
            adapters[a].discoverableTimeout = UInt32(value.integer ?? 0)
            changed = [name]
        case (.adapter(let a), "PairableTimeout"):
            adapters[a].pairableTimeout = UInt32(value.integer ?? 0)
            changed = [name]
        case (.device(let d), "Alias"):
            let alias = value.string ?? ""
            let new: String? = alias.isEmpty ? nil : alias
            if new != devices[d].alias {
                devices[d].alias = new
                changed = [name]
            }
        case (.device(let d), "Trusted"):
            let trusted = value.bool ?? false
            if trusted != devices[d].trusted {
                devices[d].trusted = trusted
                changed = [name]
            }
        case (.device(let d), "Blocked"):
            reply(call)
            return setBlocked(d, value.bool ?? false)
        default:
            return fail(call, BusError(name: "org.freedesktop.DBus.Error.UnknownProperty", message: "No such property '\(name)'"))
        }
        reply(call)
        guard !changed.isEmpty else { return }
        if case .adapter = ref { propertiesChanged(ref, Interface.adapter, changed) } else { propertiesChanged(ref, Interface.device, changed) }
    }
}
