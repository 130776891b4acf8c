import BLE

/// What the peripherals do by themselves: advertise, measure, take new addresses, notify
/// generated values.
extension Engine {
    /// Advertising and sensors run for the simulator's lifetime (or until the device takes a new
    /// address), value generators for their firmware's.
    func startTimers() {
        for p in peripherals.indices { startTimers(p) }
    }

    func startTimers(_ p: Int) {
        let config = peripherals[p].config
        tasks.every(milliseconds: config.advertisingIntervalMs) { await self.advertiseWhileCurrent(p) }
        if let sensor = config.sensor {
            // The new payload goes out with the next advertisement, as a real sensor's does.
            tasks.every(milliseconds: sensor.intervalMs) { await self.measure(p) }
        }
        if let rotation = config.addressRotationMs {
            tasks.every(milliseconds: rotation) { await self.rotateAddress(p) }
        }
        startGenerators(p)
    }

    private func advertiseWhileCurrent(_ p: Int) -> Bool {
        guard !peripherals[p].retired else { return false }
        advertise(p)
        return true
    }

    /// The device takes a new random address, as a phone's or a tracker's private address
    /// changes: bluetoothd hears a new device from its next advertisement on, and the old
    /// address, heard no more, goes when its TemporaryTimeout ends (a new peripheral, so that
    /// the old one's objects stay as long as bluetoothd keeps them). A connected device keeps
    /// its address while connected. False: this one is retired, the new one has timers of its own.
    private func rotateAddress(_ p: Int) -> Bool {
        guard !peripherals[p].retired else { return false }
        guard peripherals[p].entries.allSatisfy({ devices[$0].link == .idle }) else { return true }
        var config = peripherals[p].config
        repeat {
            // A static random address: the two top bits set.
            var bytes = (0..<6).map { _ in UInt8.random(in: 0...255) }
            bytes[0] |= 0xC0
            config.address = BluetoothAddress(bytes: bytes)!
        } while peripherals.contains { $0.address == config.address }
        config.addressType = "random"
        peripherals[p].retired = true
        // Where it is stays: each adapter hears the new address as loud as the old one.
        let rssi = peripherals[p].rssi
        Engine.add(config, to: &peripherals, &devices, adapters: adapters)
        peripherals[peripherals.count - 1].rssi = rssi
        startTimers(peripherals.count - 1)
        return false
    }

    /// The value generators of the peripheral's current table.
    func startGenerators(_ p: Int) {
        let firmware = peripherals[p].server.firmware
        for (c, info) in peripherals[p].server.table.characteristics.enumerated() {
            let configuration = info.configuration
            let interval: Int
            switch configuration.generator {
            case .heartRate, .counter: interval = configuration.notifyIntervalMs ?? 1000
            case .batteryDrain: interval = configuration.notifyIntervalMs ?? 5000
            case nil:
                guard let ms = configuration.notifyIntervalMs else { continue }
                interval = ms
            }
            tasks.every(milliseconds: interval) { await self.generate(p, c, firmware: firmware) }
        }
    }

    private func measure(_ p: Int) -> Bool {
        guard !peripherals[p].retired else { return false }
        peripherals[p].sensor?.measure()
        return true
    }

    /// One tick of a characteristic's generator: a new value, notified over the peripheral's
    /// link. False once the peripheral has another firmware.
    private func generate(_ p: Int, _ c: Int, firmware: Int) -> Bool {
        guard peripherals[p].server.firmware == firmware, !peripherals[p].retired else { return false }
        var value = peripherals[p].server.values[c]
        switch peripherals[p].server.table.characteristics[c].configuration.generator {
        case .heartRate:
            let bpm = min(90, max(60, peripherals[p].server.bpm[c] + Int.random(in: -3...3)))
            peripherals[p].server.bpm[c] = bpm
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
        peripherals[p].server.values[c] = value
        if let d = linked(p) { notify(d, c, value) }
        return true
    }
}
