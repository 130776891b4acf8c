/// A UART peripheral's serial side at work (`SimulatorConfiguration.UART`, `UARTState`): writes
/// to rx fill the receive buffer, steps every 10 ms drain it (echoed on tx in pieces of MTU-3
/// bytes, over whichever link the peripheral has) and send the stream; a write request whose
/// bytes do not fit is answered only once they are in, which is the flow control a central can
/// rely on. The steps run only while there is something to do.
extension Engine {
    static let uartStepMs = 10

    /// The peripheral took a write to `written` over entry `d`'s link; if that is the UART's rx,
    /// the UART has it: a command's bytes go in as far as they fit, a request (`pending`, on the
    /// cached characteristic `c`) is answered once all of its bytes are in. False: not the
    /// UART's, the caller answers as for any characteristic.
    func uartReceive(_ d: Int, _ written: AttributeTable.Attribute, _ data: [UInt8],
                     request: (c: Int, pending: PendingCall)?) -> Bool {
        let p = devices[d].peer
        guard case .value(let pc) = written, let settings = peripherals[p].uart.settings,
              peripherals[p].server.table.characteristics[pc].uuid == settings.rx else { return false }
        if let (c, pending) = request {
            let n = peripherals[p].uart.take(data[...])
            if n == data.count {
                reply(pending.call)
            } else {
                // bluetoothd sends no other write on the characteristic meanwhile (InProgress).
                devices[d].gatt.characteristics[c].state.write = pending
                peripherals[p].uart.held = UARTState.HeldWrite(device: d, characteristic: c, id: pending.id, remaining: data[n...],
                                                               deadline: .now + .milliseconds(adapterConfig(d).attTimeoutMs))
            }
        } else {
            peripherals[p].uart.takeCommand(data)
        }
        startUART(p)
        return true
    }

    /// Starts the steps if the UART has something to do and they are not running.
    func startUART(_ p: Int) {
        guard peripherals[p].uart.pump == nil, peripherals[p].uart.busy || uartStreaming(p) else { return }
        let pump = makeID()
        peripherals[p].uart.pump = pump
        peripherals[p].uart.lastStep = .now
        tasks.every(milliseconds: Engine.uartStepMs) { await self.stepUART(p, pump: pump) }
    }

    /// `SetUART`: new settings (nil: no UART any more, a held write answered, the buffer emptied);
    /// the buffer's bytes, the counters and the stream's line number stay.
    func setUART(_ p: Int, _ settings: SimulatorConfiguration.UART?) {
        peripherals[p].uart.settings = settings
        if settings == nil {
            if let held = peripherals[p].uart.held, let pending = heldWrite(held) {
                devices[held.device].gatt.characteristics[held.characteristic].state.write = nil
                reply(pending.call)
            }
            peripherals[p].uart.clear()
        }
        startUART(p)
    }

    /// The characteristic of the peripheral's table the UART notifies on.
    private func uartTX(_ p: Int) -> Int? {
        guard let settings = peripherals[p].uart.settings else { return nil }
        return peripherals[p].server.table.characteristics.firstIndex { $0.uuid == settings.tx }
    }

    /// The stream runs while bluetoothd has tx subscribed over a link.
    private func uartStreaming(_ p: Int) -> Bool {
        guard (peripherals[p].uart.settings?.streamBytesPerSecond ?? 0) > 0, let d = linked(p), let tx = uartTX(p) else { return false }
        return subscribedCharacteristic(d, tx) != nil
    }

    /// The held write's pending call, if bluetoothd still waits for it (not failed with the link).
    private func heldWrite(_ held: UARTState.HeldWrite) -> PendingCall? {
        guard let pending = devices[held.device].gatt.characteristics[held.characteristic].state.write, pending.id == held.id else {
            return nil
        }
        return pending
    }

    /// One step: drain, echo, stream, let the held write in. False (the steps end) once there is
    /// nothing left to do.
    private func stepUART(_ p: Int, pump: Int) -> Bool {
        guard peripherals[p].uart.pump == pump else { return false }
        let now = ContinuousClock.now
        let seconds = min(1, (now - peripherals[p].uart.lastStep) / .seconds(1))
        peripherals[p].uart.lastStep = now
        let (drained, streamed) = peripherals[p].uart.step(seconds: seconds, streaming: uartStreaming(p))
        if peripherals[p].uart.settings?.echo == true {
            peripherals[p].uart.counters.echoed += UInt64(sendOnTX(p, drained))
        }
        peripherals[p].uart.counters.streamed += UInt64(sendOnTX(p, streamed))
        if let held = peripherals[p].uart.held {
            if let pending = heldWrite(held) {
                if peripherals[p].uart.feedHeld() {
                    peripherals[p].uart.held = nil
                    devices[held.device].gatt.characteristics[held.characteristic].state.write = nil
                    reply(pending.call)
                } else if now >= held.deadline {
                    // ATT's transaction timeout: the central gives the link up (shared/att.c).
                    log("\(describe(held.device)): no write response within \(adapterConfig(held.device).attTimeoutMs) ms (ATT timeout)")
                    peripherals[p].uart.held = nil
                    linkDown(held.device)
                }
            } else {
                peripherals[p].uart.held = nil  // it failed with the link
            }
        }
        guard peripherals[p].uart.busy || uartStreaming(p) else {
            peripherals[p].uart.pump = nil
            return false
        }
        return true
    }

    /// Notifies `bytes` on tx in pieces of at most MTU-3 bytes over the peripheral's link;
    /// returns how many were sent (none without a link or a subscription).
    private func sendOnTX(_ p: Int, _ bytes: [UInt8]) -> Int {
        guard !bytes.isEmpty, let tx = uartTX(p), let d = linked(p) else { return 0 }
        let size = devices[d].mtu - 3
        var sent = 0
        for start in stride(from: 0, to: bytes.count, by: size) {
            let piece = Array(bytes[start..<min(start + size, bytes.count)])
            if notify(d, tx, piece) { sent += piece.count }
        }
        return sent
    }
}
