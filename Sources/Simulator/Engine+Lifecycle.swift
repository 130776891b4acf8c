import BLE
import DBus

/// bluetoothd and the controllers coming and going: bluetoothd exits and starts again
/// (`Restart`), an adapter is unplugged and plugged in again (`RemoveAdapter`, `AddAdapter`).
extension Engine {
    /// bluetoothd stops: its links, discovery sessions, notify sessions and agents (told with
    /// Release()) go with it, pending calls are answered as the bus answers for a peer that
    /// left, and (the caller) gives up org.bluez without signalling anything. Paired devices
    /// and their GATT caches are kept, as its storage keeps them.
    func exitBluetoothd() {
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
        for a in adapters.indices {
            adapters[a].discoveryClients = [:]
            adapters[a].discovering = false
            adapters[a].discoveryFound = []
        }
        releaseAgents()
        // Registered applications and advertisements go with bluetoothd (their clients register again).
        for a in adapters.indices {
            adapters[a].applications = []
            adapters[a].advertisements = []
            if let p = adapters[a].asPeripheral { installServer(p) }
        }
        objects = objects.filter { entry in
            switch entry.value {
            case .root, .node, .control: return true
            default: return false
            }
        }
    }

    /// bluetoothd starts again: takes org.bluez back and announces the adapters and the devices
    /// it has stored.
    func startBluetoothd() async {
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
        announce()
        for d in devices.indices where devices[d].exported && adapters[devices[d].adapter].present { export(.device(d)) }
    }

    /// The controller is gone (a dongle pulled out): bluetoothd drops the adapter with every
    /// device under it. The links end without the usual signals, as the objects go with them:
    /// calls waiting on them fail, the objects are withdrawn (GATT objects first, then the
    /// devices, then the adapter). Bonded devices stay in its storage for when it comes back.
    func unplug(_ a: Int) {
        log("\(adapters[a].config.id) removed")
        streamIndex(a, added: false)
        localAdapterGone(a)
        adapters[a].discoveryClients = [:]
        adapters[a].discovering = false
        adapters[a].discoveryFound = []
        for p in peripherals.indices {
            let d = peripherals[p].entries[a]
            devices[d].staleLink = false
            abandonLink(d, connect: BlueZError.failed("le-connection-abort-by-local"), pairing: BlueZError.authenticationCanceled)
            if devices[d].gattExported { withdrawGATT(d, keepCache: devices[d].paired) }
            if devices[d].exported { unexport(.device(d)) }
            if devices[d].paired {
                devices[d].rssi = nil
                devices[d].txPower = nil
            } else {
                devices[d].forget()
            }
        }
        unexport(.adapter(a))
        adapters[a].present = false
        adapters[a].monitors = []
    }

    /// The controller is back: bluetoothd announces the adapter, powered off, with the bonded
    /// devices it stored, then powers it on by itself (AutoEnable) if it is configured so.
    func plugIn(_ a: Int) {
        log("\(adapters[a].config.id) added")
        streamIndex(a, added: true)
        adapters[a].present = true
        adapters[a].powered = false
        export(.adapter(a))
        for p in peripherals.indices where devices[peripherals[p].entries[a]].exported {
            export(.device(peripherals[p].entries[a]))
        }
        guard adapters[a].config.powered else { return }
        tasks.after(milliseconds: Engine.autoEnableMs) { await self.autoEnable(a) }
    }

    /// How long the kernel takes to power a controller that was just plugged in.
    static let autoEnableMs = 10

    private func autoEnable(_ a: Int) {
        guard adapters[a].present, !adapters[a].powered else { return }
        setPowered(a, true, call: nil)
    }

    /// The link of entry `d` ends with its objects (the adapter went, or bluetoothd exits): a
    /// pending Connect gets `connect`, a Pair `pairing` (its agent request canceled), pending
    /// requests fail, Disconnect callers are answered, notification sessions end; no property
    /// changes are signalled.
    func abandonLink(_ d: Int, connect error: BusError, pairing pairingError: BusError) {
        if isConnecting(d) {
            devices[d].link = .idle
            if let call = devices[d].connectCall {
                devices[d].connectCall = nil
                fail(call, error)
            }
        }
        if devices[d].hasGATT {
            devices[d].link = .idle
            centralLinkChanged(d, up: false)
            for c in devices[d].gatt.characteristics.indices { failPendingRequests(d, characteristic: c) }
            for x in devices[d].gatt.descriptors.indices { failPendingRequests(d, descriptor: x) }
            for call in devices[d].disconnectCalls { reply(call) }
            devices[d].disconnectCalls = []
        }
        devices[d].connected = false
        devices[d].servicesResolved = false
        devices[d].removeAfterDisconnect = false
        for c in devices[d].gatt.characteristics.indices {
            devices[d].gatt.characteristics[c].state.sessions = [:]
            devices[d].gatt.characteristics[c].state.notifying = false
        }
        if let pairing = devices[d].pairing {
            devices[d].pairing = nil
            if pairing.asking != nil, let agent = pairing.agent { tell(agent, "Cancel") }
            fail(pairing.call, pairingError)
        }
    }
}
