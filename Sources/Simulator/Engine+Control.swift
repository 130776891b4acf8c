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
            guard let d = device(call, args[0]) else { return }
            do {
                let faults = try SimulatorConfiguration.Faults.parse(args[1] ?? "")
                devices[d].faults = faults
                devices[d].connectFailuresLeft = faults.connectError?.count
                log("\(devices[d].address): faults set to \(args[1] ?? "")")
                reply(call)
                if faults.outOfRange || faults.staleLink {
                    if devices[d].hasGATT { linkDown(d) }
                }
            } catch {
                fail(call, Engine.controlError("InvalidArguments", "fault: \(error.message)"))
            }
        case "ClearFaults":
            let targets: [Int]
            if args[0] == "" { targets = Array(devices.indices) } else {
                guard let d = device(call, args[0]) else { return }
                targets = [d]
            }
            for d in targets {
                devices[d].faults = SimulatorConfiguration.Faults()
                devices[d].connectFailuresLeft = nil
            }
            reply(call)
        case "DropLink":
            guard let d = device(call, args[0]) else { return }
            guard devices[d].hasGATT else {
                return fail(call, Engine.controlError("NotConnected", "\(devices[d].address) is not connected"))
            }
            log("\(devices[d].address): link lost (DropLink)")
            reply(call)
            linkDown(d)
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
            guard let d = device(call, args[0]) else { return }
            guard let uuid = BluetoothUUID(args[1] ?? ""),
                  let c = devices[d].peripheral.table.characteristics.firstIndex(where: { $0.uuid == uuid }) else {
                return fail(call, Engine.controlError("InvalidArguments", "\(devices[d].address) has no characteristic \(args[1] ?? "")"))
            }
            let value = call.body[2].bytes ?? []
            devices[d].peripheral.values[c] = value
            reply(call)
            if call.body[3].bool == true { notify(d, c, value) }
        case "SetServices":
            guard let d = device(call, args[0]) else { return }
            do {
                let services = try SimulatorConfiguration.parseServices(args[1] ?? "")
                installFirmware(d, services, indicate: call.body[2].bool ?? false)
                reply(call)
            } catch {
                fail(call, Engine.controlError("InvalidArguments", "services: \(error.message)"))
            }
        case "SetPairing":
            guard let d = device(call, args[0]) else { return }
            do {
                devices[d].pairingConfig = try SimulatorConfiguration.Pairing.parse(args[1] ?? "")
                log("\(devices[d].address): pairing set to \(args[1] ?? "")")
                reply(call)
            } catch {
                fail(call, Engine.controlError("InvalidArguments", "pairing: \(error.message)"))
            }
        case "DisplayedPasskey":
            guard let d = device(call, args[0]) else { return }
            guard let passkey = devices[d].pairing?.displayedPasskey else {
                return fail(call, Engine.controlError("NotPairing", "\(devices[d].address) displays no passkey"))
            }
            reply(call, [.uint32(passkey)])
        case "SetUART":
            guard let d = device(call, args[0]) else { return }
            let json = args[1] ?? ""
            do {
                let settings = try json.isEmpty ? nil : SimulatorConfiguration.UART.parse(json)
                try settings?.validate(against: devices[d].peripheral.table.characteristics.map(\.configuration), at: "")
                log("\(devices[d].address): uart set to \(json.isEmpty ? "none" : json)")
                reply(call)
                setUART(d, settings)
            } catch {
                fail(call, Engine.controlError("InvalidArguments", "uart: \(error.message)"))
            }
        case "UARTStats", "ResetUARTStats":
            guard let d = device(call, args[0]) else { return }
            guard devices[d].uart.settings != nil else {
                return fail(call, Engine.controlError("NoUART", "\(devices[d].address) has no UART"))
            }
            if member == "ResetUARTStats" {
                devices[d].uart.counters = UARTState.Counters()
                return reply(call)
            }
            let counters = devices[d].uart.counters
            reply(call, [.uint64(counters.received), .uint64(counters.dropped), .uint64(counters.echoed), .uint64(counters.streamed)])
        case "SetServiceData":
            guard let d = device(call, args[0]) else { return }
            guard let uuid = BluetoothUUID(args[1] ?? "") else {
                return fail(call, Engine.controlError("InvalidArguments", "\"\(args[1] ?? "")\" is not a UUID"))
            }
            devices[d].advertisedServiceData[uuid] = call.body[2].bytes ?? []
            reply(call)
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
        case "SetPowered":
            setPowered(call.body.first?.bool ?? true, call: call)
        case "EndDiscovery":
            log("discovery ends by itself (EndDiscovery)")
            reply(call)
            discoveryClients = [:]
            discoveryChanged()
        default:
            fail(call, DBusError.unknownMethod(call))
        }
    }

    /// bluetoothd stops: its links, discovery sessions, notify sessions and agents (told with
    /// Release()) go with it, pending calls are answered as the bus answers for a peer that
    /// left, and (the caller) gives up org.bluez without signalling anything. Paired devices
    /// and their GATT caches are kept, as its storage keeps them.
    private func exitBluetoothd() {
        down = true
        let gone = BusError(name: "org.freedesktop.DBus.Error.NoReply", message: "Message recipient disconnected from message bus without replying")
        for d in devices.indices {
            if isConnecting(d) {
                failConnect(d, gone, linkEstablished: false)
            } else if devices[d].hasGATT {
                linkDown(d)
            }
            devices[d].gattExported = false
            for c in devices[d].gatt.characteristics.indices {
                devices[d].gatt.characteristics[c].state.sessions = [:]
                devices[d].gatt.characteristics[c].state.notifying = false
            }
            if !devices[d].paired {
                devices[d].forget()
            }
        }
        discoveryClients = [:]
        discovering = false
        discoveryFound = []
        releaseAgents()
        objects = objects.filter { entry in
            switch entry.value {
            case .root, .node, .control: return true
            default: return false
            }
        }
    }

    /// bluetoothd starts again: takes org.bluez back and announces the adapter and the devices it
    /// has stored.
    private func startBluetoothd() async {
        guard down else { return }
        down = false
        do {
            try await connection.requestName("org.bluez")
        } catch {
            log("cannot take org.bluez back: \(error)")
            return
        }
        log("bluetoothd is back")
        objects[Engine.bluezPath] = .bluez
        objects[Engine.adapterPath] = .adapter
        announce()
        for d in devices.indices where devices[d].exported { export(.device(d)) }
    }

    /// The device an address argument names; answers the call with an error if there is none.
    private func device(_ call: Message, _ text: String?) -> Int? {
        guard let address = BluetoothAddress(text ?? ""), let d = devices.firstIndex(where: { $0.address == address }) else {
            fail(call, Engine.controlError("UnknownDevice", "no simulated device \"\(text ?? "")\""))
            return nil
        }
        return d
    }

    // MARK: - Timers

    /// Advertising and sensors run for the simulator's lifetime (or until the device takes a new
    /// address), value generators for their firmware's.
    func startTimers() {
        for d in devices.indices { startTimers(d) }
    }

    private func startTimers(_ d: Int) {
        tasks.every(milliseconds: devices[d].config.advertisingIntervalMs) { await self.advertiseWhileCurrent(d) }
        if let sensor = devices[d].config.sensor {
            // The new payload goes out with the next advertisement, as a real sensor's does.
            tasks.every(milliseconds: sensor.intervalMs) { await self.measure(d) }
        }
        if let rotation = devices[d].config.addressRotationMs {
            tasks.every(milliseconds: rotation) { await self.rotateAddress(d) }
        }
        startGenerators(d)
    }

    private func advertiseWhileCurrent(_ d: Int) -> Bool {
        guard !devices[d].retired else { return false }
        advertise(d)
        return true
    }

    /// The device takes a new random address, as a phone's or a tracker's private address
    /// changes: bluetoothd hears a new device from its next advertisement on, and the old
    /// address, heard no more, goes when its TemporaryTimeout ends (a new entry, so that the old
    /// one's object stays as long as bluetoothd keeps it). A connected device keeps its address
    /// while connected. False: this entry is retired, the new one has timers of its own.
    private func rotateAddress(_ d: Int) -> Bool {
        guard !devices[d].retired else { return false }
        guard devices[d].link == .idle else { return true }
        var config = devices[d].config
        repeat {
            // A static random address: the two top bits set.
            var bytes = (0..<6).map { _ in UInt8.random(in: 0...255) }
            bytes[0] |= 0xC0
            config.address = BluetoothAddress(bytes: bytes)!
        } while devices.contains { $0.address == config.address }
        config.addressType = "random"
        devices[d].retired = true
        devices.append(DeviceState(config: config, adapterPath: Engine.adapterPath))
        startTimers(devices.count - 1)
        return false
    }

    /// The value generators of the peripheral's current table.
    func startGenerators(_ d: Int) {
        let firmware = devices[d].peripheral.firmware
        for (c, info) in devices[d].peripheral.table.characteristics.enumerated() {
            let configuration = info.configuration
            let interval: Int
            switch configuration.generator {
            case .heartRate, .counter: interval = configuration.notifyIntervalMs ?? 1000
            case .batteryDrain: interval = configuration.notifyIntervalMs ?? 5000
            case nil:
                guard let ms = configuration.notifyIntervalMs else { continue }
                interval = ms
            }
            tasks.every(milliseconds: interval) { await self.generate(d, c, firmware: firmware) }
        }
    }

    private func measure(_ d: Int) -> Bool {
        guard !devices[d].retired else { return false }
        devices[d].sensor?.measure()
        return true
    }

    /// One tick of a characteristic's generator: a new value, notified. False once the
    /// peripheral has another firmware.
    private func generate(_ d: Int, _ c: Int, firmware: Int) -> Bool {
        guard devices[d].peripheral.firmware == firmware, !devices[d].retired else { return false }
        var value = devices[d].peripheral.values[c]
        switch devices[d].peripheral.table.characteristics[c].configuration.generator {
        case .heartRate:
            let bpm = min(90, max(60, devices[d].peripheral.bpm[c] + Int.random(in: -3...3)))
            devices[d].peripheral.bpm[c] = bpm
            value = [0x06, UInt8(bpm)]
        case .batteryDrain:
            let level = value.first ?? 100
            value = [level == 0 ? 100 : level - 1]
        case .counter:
            let width = value.isEmpty ? 4 : min(value.count, 8)
            var n: UInt64 = 0
            for (i, byte) in value.prefix(width).enumerated() { n |= UInt64(byte) << (8 * UInt64(i)) }
            n &+= 1
            value = (0..<width).map { UInt8(truncatingIfNeeded: n >> (8 * UInt64($0))) }
        case nil:
            break
        }
        devices[d].peripheral.values[c] = value
        notify(d, c, value)
        return true
    }
}
