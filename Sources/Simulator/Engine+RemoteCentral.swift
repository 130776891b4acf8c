import BLE
import DBus

/// The control interface's remote central: a test acts as a phone on one adapter (`central`)
/// towards a device it hears (a simulated peripheral, or another adapter's advertisement and
/// applications) without a BlueZ client of its own. Each call goes the way the same call on
/// that adapter's Device1 and GATT objects goes, and is answered as that one would be.
extension Engine {
    /// The D-Bus "sender" of the control interface's notify sessions: not a client's unique
    /// name, so no client leaving the bus ends them.
    static let controlSender = "io.gattway.Simulator1"
    /// Notified values kept for `CentralNotifications`.
    static let controlValuesKept = 64

    func remoteCentralCall(_ call: Message, member: String) {
        let args = call.body.map(\.string)
        guard let a = adapter(call, args[0]) else { return }
        // Another adapter is a device too (heard while it advertises).
        guard let address = BluetoothAddress(args[1] ?? ""),
              let p = peripherals.firstIndex(where: { $0.address == address && !$0.retired })
                ?? adapters.firstIndex(where: { $0.config.address == address && $0.present }).map(adapterPeripheral) else {
            return fail(call, Engine.controlError("UnknownDevice", "no device \"\(args[1] ?? "")\" around \(adapters[a].config.id)"))
        }
        let d = peripherals[p].entries[a]
        if member == "CentralConnect" {
            // A phone connects to what it scanned: heard now, if it advertises within range.
            if !devices[d].exported {
                guard heardNow(p, by: a) else {
                    return fail(call, Engine.controlError("NotHeard", "\(adapters[a].config.id) does not hear \(address)"))
                }
            }
            return deviceCall(asked(call, []), member: "Connect", device: d, sender: Engine.controlSender)
        }
        guard devices[d].exported else {
            return fail(call, Engine.controlError("NotHeard", "\(adapters[a].config.id) has not heard \(address)"))
        }
        if member == "CentralDisconnect" { return deviceCall(asked(call, []), member: "Disconnect", device: d, sender: Engine.controlSender) }
        guard devices[d].hasGATT else { return fail(call, Engine.controlError("NotConnected", "\(address) is not connected to \(adapters[a].config.id)")) }
        guard let uuid = BluetoothUUID(args[2] ?? ""), let c = devices[d].gatt.present.lazy.flatMap({ self.devices[d].gatt.services[$0].characteristics })
            .first(where: { self.devices[d].gatt.characteristics[$0].uuid == uuid }) else {
            return fail(call, Engine.controlError("InvalidArguments", "\(address) has no characteristic \(args[2] ?? "")"))
        }
        let none = Value.emptyDictionary(key: "s", value: "v")
        switch member {
        case "CentralRead":
            characteristicCall(asked(call, [none]), member: "ReadValue", device: d, characteristic: c, sender: Engine.controlSender)
        case "CentralWrite":
            let type = Value.stringVariantDictionary([("type", .string(call.body[4].bool == true ? "request" : "command"))])
            characteristicCall(asked(call, [call.body[3], type]), member: "WriteValue", device: d, characteristic: c, sender: Engine.controlSender)
        case "CentralSubscribe":
            let on = call.body[3].bool == true
            if on { devices[d].gatt.characteristics[c].state.controlValues = [] }
            characteristicCall(asked(call, []), member: on ? "StartNotify" : "StopNotify", device: d, characteristic: c,
                               sender: Engine.controlSender)
        default:  // CentralNotifications
            let values = devices[d].gatt.characteristics[c].state.controlValues
            devices[d].gatt.characteristics[c].state.controlValues = []
            reply(call, [.array(element: Signature("ay")!, values.map { .bytes($0) })])
        }
    }

    /// The control call, carrying the arguments of the BlueZ call it stands for: its answer
    /// goes to the control call's caller.
    private func asked(_ call: Message, _ body: [Value]) -> Message {
        var stand = call
        stand.body = body
        return stand
    }

    /// Adapter `a` hears peripheral `p` now (one advertisement), if `p` advertises within its range.
    private func heardNow(_ p: Int, by a: Int) -> Bool {
        let peripheral = peripherals[p]
        guard adapters[a].usable, !peripheral.faults.outOfRange, linked(p) == nil, let rssi = peripheral.rssi[a], takeTurn(p) else {
            return false
        }
        var ad = nextAdvertisement(p)
        ad.rssi = rssi
        firstHeard(peripheral.entries[a], ad)
        return true
    }
}
