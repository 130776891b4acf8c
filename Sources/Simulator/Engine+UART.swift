/// A UART peripheral's serial side at work (`SimulatorConfiguration.UART`, `UARTState`): writes
/// to rx fill the receive buffer, steps every 10 ms drain it (echoed on tx in pieces of MTU-3
/// bytes) and send the stream; a write request whose bytes do not fit is answered only once
/// they are in, which is the flow control a central can rely on. The steps run only while there
/// is something to do.
extension Engine {
    static let uartStepMs = 10

    /// The peripheral took a write to `written`; if that is the UART's rx, the UART has it: a
    /// command's bytes go in as far as they fit, a request (`pending`, on the cached
    /// characteristic `c`) is answered once all of its bytes are in. False: not the UART's, the
    /// caller answers as for any characteristic.
    func uartReceive(_ d: Int, _ written: AttributeTable.Attribute, _ data: [UInt8],
                     request: (c: Int, pending: PendingCall)?) -> Bool {
        guard case .value(let pc) = written, let settings = devices[d].uart.settings,
              devices[d].peripheral.table.characteristics[pc].uuid == settings.rx else { return false }
        if let (c, pending) = request {
            let n = devices[d].uart.take(data[...])
            if n == data.count {
                reply(pending.call)
            } else {
                // bluetoothd sends no other write on the characteristic meanwhile (InProgress).
                devices[d].gatt.characteristics[c].state.write = pending
                devices[d].uart.held = UARTState.HeldWrite(characteristic: c, id: pending.id, remaining: data[n...],
                                                           deadline: .now + .milliseconds(adapterConfig.attTimeoutMs))
            }
        } else {
            devices[d].uart.takeCommand(data)
        }
        startUART(d)
        return true
    }

    /// Starts the steps if the UART has something to do and they are not running.
    func startUART(_ d: Int) {
        guard devices[d].uart.pump == nil, devices[d].uart.busy || uartStreaming(d) else { return }
        let pump = makeID()
        devices[d].uart.pump = pump
        devices[d].uart.lastStep = .now
        tasks.every(milliseconds: Engine.uartStepMs) { await self.stepUART(d, pump: pump) }
    }

    /// `SetUART`: new settings (nil: no UART any more, a held write answered, the buffer emptied);
    /// the buffer's bytes, the counters and the stream's line number stay.
    func setUART(_ d: Int, _ settings: SimulatorConfiguration.UART?) {
        devices[d].uart.settings = settings
        if settings == nil {
            if let held = devices[d].uart.held, let pending = heldWrite(d, held) {
                devices[d].gatt.characteristics[held.characteristic].state.write = nil
                reply(pending.call)
            }
            devices[d].uart.clear()
        }
        startUART(d)
    }

    /// The characteristic of the peripheral's table the UART notifies on.
    private func uartTX(_ d: Int) -> Int? {
        guard let settings = devices[d].uart.settings else { return nil }
        return devices[d].peripheral.table.characteristics.firstIndex { $0.uuid == settings.tx }
    }

    /// The stream runs while bluetoothd has tx subscribed over a link.
    private func uartStreaming(_ d: Int) -> Bool {
        guard (devices[d].uart.settings?.streamBytesPerSecond ?? 0) > 0, devices[d].hasGATT, let tx = uartTX(d) else { return false }
        return subscribedCharacteristic(d, tx) != nil
    }

    /// The held write's pending call, if bluetoothd still waits for it (not failed with the link).
    private func heldWrite(_ d: Int, _ held: UARTState.HeldWrite) -> PendingCall? {
        guard let pending = devices[d].gatt.characteristics[held.characteristic].state.write, pending.id == held.id else { return nil }
        return pending
    }

    /// One step: drain, echo, stream, let the held write in. False (the steps end) once there is
    /// nothing left to do.
    private func stepUART(_ d: Int, pump: Int) -> Bool {
        guard devices[d].uart.pump == pump else { return false }
        let now = ContinuousClock.now
        let seconds = min(1, (now - devices[d].uart.lastStep) / .seconds(1))
        devices[d].uart.lastStep = now
        let (drained, streamed) = devices[d].uart.step(seconds: seconds, streaming: uartStreaming(d))
        if devices[d].uart.settings?.echo == true {
            devices[d].uart.counters.echoed += UInt64(sendOnTX(d, drained))
        }
        devices[d].uart.counters.streamed += UInt64(sendOnTX(d, streamed))
        if let held = devices[d].uart.held {
            if let pending = heldWrite(d, held) {
                if devices[d].uart.feedHeld() {
                    devices[d].uart.held = nil
                    devices[d].gatt.characteristics[held.characteristic].state.write = nil
                    reply(pending.call)
                } else if now >= held.deadline {
                    // ATT's transaction timeout: the central gives the link up (shared/att.c).
                    log("\(devices[d].address): no write response within \(adapterConfig.attTimeoutMs) ms (ATT timeout)")
                    devices[d].uart.held = nil
                    linkDown(d)
                }
            } else {
                devices[d].uart.held = nil  // it failed with the link
            }
        }
        guard devices[d].uart.busy || uartStreaming(d) else {
            devices[d].uart.pump = nil
            return false
        }
        return true
    }

    /// Notifies `bytes` on tx in pieces of at most MTU-3 bytes; returns how many were sent
    /// (none without a link or a subscription).
    private func sendOnTX(_ d: Int, _ bytes: [UInt8]) -> Int {
        guard !bytes.isEmpty, let tx = uartTX(d) else { return 0 }
        let size = devices[d].mtu - 3
        var sent = 0
        for start in stride(from: 0, to: bytes.count, by: size) {
            let piece = Array(bytes[start..<min(start + size, bytes.count)])
            if notify(d, tx, piece) { sent += piece.count }
        }
        return sent
    }
}
