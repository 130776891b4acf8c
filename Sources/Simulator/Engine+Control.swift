import BLE
import DBus

/// `io.gattway.Simulator1` at /io/gattway/simulator: faults and counters at run time, for tests.
extension Engine {
    static func controlError(_ name: String, _ message: String) -> BusError {
        BusError(name: "io.gattway.Simulator1.Error." + name, message: message)
    }

    func controlCall(_ call: Message, member: String) {
        let args = call.body.map(\.string)
        switch member {
        case "SetFault":
            guard let p = peripheral(call, args[0]) else { return }
            do {
                let faults = try SimulatorConfiguration.Faults.parse(args[1] ?? "")
                log("\(peripherals[p].address): faults set to \(args[1] ?? "")")
                reply(call)
                setFaults(p, faults)
            } catch {
                fail(call, Engine.controlError("InvalidArguments", "fault: \(error.message)"))
            }
        case "ClearFaults":
            let targets: [Int]
            if args[0] == "" { targets = Array(peripherals.indices) } else {
                guard let p = peripheral(call, args[0]) else { return }
                targets = [p]
            }
            for p in targets {
                peripherals[p].faults = SimulatorConfiguration.Faults()
                peripherals[p].connectFailuresLeft = nil
                for d in peripherals[p].entries { devices[d].staleLink = false }
            }
            reply(call)
        case "DropLink":
            guard let p = peripheral(call, args[0]) else { return }
            guard let d = linked(p) else {
                return fail(call, Engine.controlError("NotConnected", "\(peripherals[p].address) is not connected"))
            }
            log("\(describe(d)): link lost (DropLink)")
            reply(call)
            linkDown(d, reason: .timeout)
        case "CallCount":
            let member = args[0] ?? "", path = args[1] ?? ""
            var total: UInt32 = 0
            for (key, count) in callCounts {
                let parts = key.split(separator: " ", maxSplits: 1).map(String.init)
                if (member.isEmpty || parts[0] == member) && (path.isEmpty || parts[1] == path) { total &+= count }
            }
            reply(call, [.uint32(total)])
        case "ResetCounters":
            callCounts = [:]
            reply(call)
        case "SetValue":
            guard let p = peripheral(call, args[0]) else { return }
            guard let uuid = BluetoothUUID(args[1] ?? ""),
                  let c = peripherals[p].server.table.characteristics.firstIndex(where: { $0.uuid == uuid }) else {
                return fail(call, Engine.controlError("InvalidArguments", "\(peripherals[p].address) has no characteristic \(args[1] ?? "")"))
            }
            let value = call.body[2].bytes ?? []
            peripherals[p].server.values[c] = value
            reply(call)
            if call.body[3].bool == true, let d = linked(p) { notify(d, c, value) }
        case "SetServices":
            guard let p = peripheral(call, args[0]) else { return }
            do {
                let services = try SimulatorConfiguration.parseServices(args[1] ?? "")
                installFirmware(p, services, indicate: call.body[2].bool ?? false)
                reply(call)
            } catch {
                fail(call, Engine.controlError("InvalidArguments", "services: \(error.message)"))
            }
        case "SetPairing":
            guard let p = peripheral(call, args[0]) else { return }
            do {
                peripherals[p].pairingConfig = try SimulatorConfiguration.Pairing.parse(args[1] ?? "")
                log("\(peripherals[p].address): pairing set to \(args[1] ?? "")")
                reply(call)
            } catch {
                fail(call, Engine.controlError("InvalidArguments", "pairing: \(error.message)"))
            }
        case "DisplayedPasskey":
            guard let p = peripheral(call, args[0]) else { return }
            guard let passkey = peripherals[p].entries.lazy.compactMap({ self.devices[$0].pairing?.displayedPasskey }).first else {
                return fail(call, Engine.controlError("NotPairing", "\(peripherals[p].address) displays no passkey"))
            }
            reply(call, [.uint32(passkey)])
        case "SetUART":
            guard let p = peripheral(call, args[0]) else { return }
            let json = args[1] ?? ""
            do {
                let settings = try json.isEmpty ? nil : SimulatorConfiguration.UART.parse(json)
                try settings?.validate(against: peripherals[p].server.table.characteristics.map(\.configuration), at: "")
                log("\(peripherals[p].address): uart set to \(json.isEmpty ? "none" : json)")
                reply(call)
                setUART(p, settings)
            } catch {
                fail(call, Engine.controlError("InvalidArguments", "uart: \(error.message)"))
            }
        case "UARTStats", "ResetUARTStats":
            guard let p = peripheral(call, args[0]) else { return }
            guard peripherals[p].uart.settings != nil else {
                return fail(call, Engine.controlError("NoUART", "\(peripherals[p].address) has no UART"))
            }
            if member == "ResetUARTStats" {
                peripherals[p].uart.counters = UARTState.Counters()
                return reply(call)
            }
            let counters = peripherals[p].uart.counters
            reply(call, [.uint64(counters.received), .uint64(counters.dropped), .uint64(counters.echoed), .uint64(counters.streamed)])
        case "SetServiceData":
            guard let p = peripheral(call, args[0]) else { return }
            guard let uuid = BluetoothUUID(args[1] ?? "") else {
                return fail(call, Engine.controlError("InvalidArguments", "\"\(args[1] ?? "")\" is not a UUID"))
            }
            peripherals[p].advertisedServiceData[uuid] = call.body[2].bytes ?? []
            reply(call)
        case "SetRSSI":
            guard let p = peripheral(call, args[0]), let a = adapter(call, args[1], present: false) else { return }
            guard case .int16(let rssi) = call.body[2], rssi == Engine.notHeard || (-127...20).contains(rssi) else {
                return fail(call, Engine.controlError("InvalidArguments", "an RSSI is -127...20, or 127: not heard"))
            }
            reply(call)
            setRSSI(p, a, rssi == Engine.notHeard ? nil : Int(rssi))
        case "Restart":
            let downMs = call.body.first?.integer ?? 0
            log("bluetoothd exits; back in \(downMs) ms (Restart)")
            reply(call)
            exitBluetoothd()
            let connection = connection
            tasks.spawn {
                try? await connection.releaseName("org.bluez")
                if downMs > 0 { do { try await Task.sleep(for: .milliseconds(downMs)) } catch { return } }
                await self.startBluetoothd()
            }
        case "SetPowered", "SetAdapterPowered":
            let on = call.body.last?.bool ?? true
            guard let a = member == "SetPowered" ? adapter(call, adapters[0].config.id) : adapter(call, args[0]) else { return }
            setPowered(a, on, call: call)
        case "RemoveAdapter":
            guard let a = adapter(call, args[0]) else { return }
            reply(call)
            unplug(a)
        case "AddAdapter":
            guard let a = adapter(call, args[0], present: false) else { return }
            guard !adapters[a].present else {
                return fail(call, Engine.controlError("AlreadyPresent", "\(adapters[a].config.id) is plugged in"))
            }
            reply(call)
            plugIn(a)
        case "CentralConnect", "CentralDisconnect", "CentralRead", "CentralWrite", "CentralSubscribe", "CentralNotifications":
            remoteCentralCall(call, member: member)
        case "EndDiscovery":
            log("discovery ends by itself (EndDiscovery)")
            reply(call)
            for a in adapters.indices { endDiscovery(a) }
        default:
            fail(call, DBusError.unknownMethod(call))
        }
    }

    /// `SetRSSI`'s value for "out of range" (HCI's 0x7F, RSSI not available).
    static let notHeard: Int16 = 127

    /// `SetFault`: the peripheral's new faults. A link is lost when it goes out of range or its
    /// adapter's kernel keeps a stale one (`staleLink` applies to the adapter that holds the
    /// link, or to every adapter when none does; any other fault set ends it everywhere).
    private func setFaults(_ p: Int, _ faults: SimulatorConfiguration.Faults) {
        peripherals[p].faults = faults
        peripherals[p].connectFailuresLeft = faults.connectError?.count
        let link = linked(p)
        for d in peripherals[p].entries { devices[d].staleLink = faults.staleLink && (link == nil || link == d) }
        if let link, faults.outOfRange || faults.staleLink { linkDown(link, reason: .timeout) }
    }

    /// `SetRSSI`: the peripheral moved; out of an adapter's range (nil) it loses its link there.
    private func setRSSI(_ p: Int, _ a: Int, _ rssi: Int?) {
        log("\(peripherals[p].address) at \(adapters[a].config.id): \(rssi.map { "RSSI \($0)" } ?? "out of range")")
        peripherals[p].rssi[a] = rssi
        let d = peripherals[p].entries[a]
        if rssi == nil, devices[d].hasGATT { linkDown(d, reason: .timeout) }
    }

    /// The peripheral an address argument names; answers the call with an error if there is none.
    private func peripheral(_ call: Message, _ text: String?) -> Int? {
        guard let address = BluetoothAddress(text ?? ""), let p = peripherals.firstIndex(where: { $0.address == address }) else {
            fail(call, Engine.controlError("UnknownDevice", "no simulated device \"\(text ?? "")\""))
            return nil
        }
        return p
    }

    /// The adapter a name argument names (plugged in, unless `present` is false); answers the
    /// call with an error if there is none.
    func adapter(_ call: Message, _ text: String?, present: Bool = true) -> Int? {
        guard let a = adapters.firstIndex(where: { $0.config.id == text }) else {
            let names = adapters.map(\.config.id).joined(separator: ", ")
            fail(call, Engine.controlError("UnknownAdapter", "no simulated adapter \"\(text ?? "")\" (adapters: \(names))"))
            return nil
        }
        guard adapters[a].present || !present else {
            fail(call, Engine.controlError("NotPresent", "\(adapters[a].config.id) is unplugged"))
            return nil
        }
        return a
    }
}
