import BLE
import DBus

/// GattManager1 on each adapter (src/gatt-database.c): RegisterApplication reads the client's
/// objects with GetManagedObjects, gives them handles (told with Properties.Set "Handle") and
/// serves them as the adapter's GATT server; UnregisterApplication, or the client leaving the
/// bus, takes them away. Centrals on other adapters reach them through `LocalServer`.
extension Engine {
    func gattManagerCall(_ call: Message, member: String, adapter a: Int, sender: String) {
        guard let path = call.body.first?.objectPath else { return fail(call, BlueZError.invalidArguments()) }
        let index = adapters[a].applications.firstIndex { $0.owner == sender && $0.path == path }
        switch member {
        case "RegisterApplication":
            guard index == nil else { return fail(call, BlueZError.alreadyExists) }
            adapters[a].applications.append(GattApplication(owner: sender, path: path))
            watch(sender)
            callClient(.methodCall(destination: sender, path: path, interface: Interface.objectManager, member: "GetManagedObjects")) {
                engine, result in engine.applicationRead(call, adapter: a, owner: sender, path: path, try? result.get().first)
            }
        case "UnregisterApplication":
            guard let index else { return fail(call, BlueZError.doesNotExist) }
            adapters[a].applications.remove(at: index)
            log("\(adapters[a].config.id): application \(path) of \(sender) unregistered")
            reply(call)
            serverChanged(a)
        default:
            fail(call, DBusError.unknownMethod(call))
        }
    }

    /// GetManagedObjects answered (nil: it failed): the services are placed in the adapter's
    /// database, their handles told, then the registration answered.
    private func applicationRead(_ call: Message, adapter a: Int, owner: String, path: ObjectPath, _ answer: Value?) {
        // It may have gone meanwhile (its owner left, the adapter was removed).
        guard let i = adapters[a].applications.firstIndex(where: { $0.owner == owner && $0.path == path && $0.services.isEmpty }) else {
            return fail(call, BlueZError.failed("Failed to create entry in database"))
        }
        let services: [AppService]
        do throws(ApplicationError) {
            guard let answer else { throw ApplicationError.noObject }
            services = try place(GattApplication.parse(answer, root: path), on: a)
        } catch {
            adapters[a].applications.remove(at: i)
            log("\(adapters[a].config.id): application \(path) of \(owner) refused: \(error.busError.message)")
            return fail(call, error.busError)
        }
        adapters[a].applications[i].services = services
        // bluetoothd sets Handle while it adds the attributes, before it answers, on the objects
        // that asked for none (write_handle); errors are ignored.
        for s in services {
            if s.tellsHandle { setHandle(owner, s.path, Interface.service, s.handle) }
            for c in s.characteristics {
                if c.tellsHandle { setHandle(owner, c.path, Interface.characteristic, c.handle) }
                for x in c.descriptors where x.tellsHandle { setHandle(owner, x.path, Interface.descriptor, x.handle) }
            }
        }
        log("\(adapters[a].config.id): application \(path) of \(owner) registered, \(services.count) services")
        reply(call)
        serverChanged(a)
    }

    private func setHandle(_ owner: String, _ path: ObjectPath, _ interface: String, _ handle: UInt16) {
        var message = Message.methodCall(destination: owner, path: path, interface: Interface.properties, member: "Set",
                                         [.string(interface), .string("Handle"), .variant(.uint16(handle))])
        message.noReplyExpected = true
        send(message)
    }

    /// Handles for the services, as gatt_db gives them: BlueZ's own GAP and GATT services hold
    /// 0x0001-0x0009; a service that asks for a handle gets it if its range is free, the others
    /// follow the highest handle in use. Fails as bluetoothd does when a range is taken.
    private func place(_ services: [AppService], on a: Int) throws(ApplicationError) -> [AppService] {
        var used: [ClosedRange<Int>] = [1...(AttributeTable.firstHandle - 1)]
        for app in adapters[a].applications { used += app.services.map { Int($0.handle)...Int($0.end) } }
        var out = services
        for pass in [true, false] {
            for i in out.indices where (services[i].handle != 0) == pass {
                let start = pass ? Int(services[i].handle) : used.map(\.upperBound).max()! + 1
                guard start <= 0xFFFF, let placed = services[i].placed(at: UInt16(start)),
                      !used.contains(where: { $0.overlaps(Int(placed.handle)...Int(placed.end)) }) else { throw .noEntry }
                out[i] = placed
                used.append(Int(placed.handle)...Int(placed.end))
            }
        }
        return out
    }

    /// The adapter's applications changed: its GATT server (if other adapters know it) takes the
    /// new table; a connected central discovers again, as a Service Changed indication makes it.
    func serverChanged(_ a: Int) {
        guard let p = adapters[a].asPeripheral else { return }
        installServer(p)
        if let d = linked(p), rediscover(d) {
            exportGATT(d, devices[d].gatt.present)
            updateUUIDs(d)
        }
    }

    /// The adapter-peripheral's table from its adapter's applications, in handle order, with
    /// the application object behind each attribute.
    func installServer(_ p: Int) {
        guard var local = peripherals[p].local else { return }
        let served = adapters[local.adapter].applications.flatMap { app in app.services.map { (app.owner, $0) } }
            .sorted { $0.1.handle < $1.1.handle }
        let table = AttributeTable(served.map(\.1.configuration), placements: served.map(\.1.placement))
        local.characteristics = []
        local.descriptors = Array(repeating: nil, count: table.descriptors.count)
        for (owner, service) in served {
            for c in service.characteristics {
                let ci = local.characteristics.count
                local.characteristics.append(ServedObject(owner: owner, path: c.path))
                // The application's descriptors come after the ones bluetoothd adds.
                let own = table.characteristics[ci].descriptors.suffix(c.descriptors.count)
                for (x, descriptor) in zip(own, c.descriptors) { local.descriptors[x] = ServedObject(owner: owner, path: descriptor.path) }
            }
        }
        let current = Set(local.characteristics)
        local.notifying = local.notifying.filter(current.contains)
        peripherals[p].local = local
        peripherals[p].server.install(table)
    }

    /// A client left the bus: its applications and advertisements go with it.
    func localClientVanished(_ name: String) {
        for a in adapters.indices {
            let apps = adapters[a].applications.count
            adapters[a].applications.removeAll { $0.owner == name }
            if adapters[a].applications.count != apps {
                log("\(adapters[a].config.id): applications of \(name) unregistered: it left the bus")
                serverChanged(a)
            }
            let ads = adapters[a].advertisements.count
            adapters[a].advertisements.removeAll { $0.owner == name }
            if adapters[a].advertisements.count != ads { advertisementsChanged(a) }
        }
    }
}
