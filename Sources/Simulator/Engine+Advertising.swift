import BLE
import DBus

/// LEAdvertisingManager1 on each adapter (src/advertising.c): RegisterAdvertisement reads the
/// client's LEAdvertisement1 properties once; the adapter then advertises them to the other
/// adapters, as a device with its own address (`LocalServer`), taking turns between its
/// advertisements as the kernel rotates instances.
extension Engine {
    /// How often an adapter's advertisements go out (BlueZ's default interval is 100 ms or less).
    static let localAdvertisingIntervalMs = 100
    /// What "tx-power" in Includes advertises (the controller's advertising TX power).
    static let localTxPower = 0

    func advertisingManagerCall(_ call: Message, member: String, adapter a: Int, sender: String) {
        guard let path = call.body.first?.objectPath else { return fail(call, BlueZError.invalidArguments()) }
        let index = adapters[a].advertisements.firstIndex { $0.owner == sender && $0.path == path }
        switch member {
        case "RegisterAdvertisement":
            guard index == nil else { return fail(call, BlueZError.alreadyExists) }
            guard adapters[a].advertisements.count < adapters[a].config.advertisingInstances else {
                return fail(call, BlueZError.notPermitted("Maximum advertisements reached"))
            }
            adapters[a].advertisements.append(LEAdvertisement(owner: sender, path: path))
            // bluetoothd's proxy of the object reads its properties with GetAll.
            callClient(.methodCall(destination: sender, path: path, interface: Interface.properties, member: "GetAll",
                                   [.string(Interface.advertisement)])) { engine, result in
                engine.advertisementRead(call, adapter: a, owner: sender, path: path, try? result.get().first?.stringDictionary)
            }
        case "UnregisterAdvertisement":
            guard let index else { return fail(call, BlueZError.doesNotExist) }
            adapters[a].advertisements.remove(at: index)
            log("\(adapters[a].config.id): advertisement \(path) of \(sender) unregistered")
            reply(call)
            advertisementsChanged(a)
        default:
            fail(call, DBusError.unknownMethod(call))
        }
    }

    private func advertisementRead(_ call: Message, adapter a: Int, owner: String, path: ObjectPath, _ properties: [String: Value]?) {
        guard let i = adapters[a].advertisements.firstIndex(where: { $0.owner == owner && $0.path == path && $0.data == nil }) else {
            return fail(call, BlueZError.failed("Failed to parse advertisement."))
        }
        guard let properties, let data = AdvertisingData(properties) else {
            adapters[a].advertisements.remove(at: i)
            return fail(call, BlueZError.failed("Failed to parse advertisement."))
        }
        adapters[a].advertisements[i].data = data
        log("\(adapters[a].config.id): advertising \(path) of \(owner) (\(data.connectable ? "connectable" : "not connectable"))")
        reply(call)
        advertisementsChanged(a)
    }

    /// The adapter's advertisements changed: the instance counts are signalled and what the
    /// other adapters hear follows (connectable while one of them is).
    func advertisementsChanged(_ a: Int) {
        // bluetoothd's property changes go out from an idle callback, after the call's answer.
        tasks.after(milliseconds: 20) { await self.propertiesChanged(.adapter(a), Interface.advertisingManager, ["SupportedInstances", "ActiveInstances"]) }
        let ready = adapters[a].advertisements.compactMap(\.data)
        guard !ready.isEmpty || adapters[a].asPeripheral != nil else { return }
        let p = adapterPeripheral(a)
        var config = peripherals[p].config
        config.connectable = ready.contains { $0.connectable }
        setConfig(p, config)
    }

    /// LEAdvertisingManager1's properties: SupportedInstances counts the instances still free.
    func advertisingManagerProperties(_ a: Int) -> [(String, Value)] {
        let active = adapters[a].advertisements.count
        return [
            ("ActiveInstances", .byte(UInt8(clamping: active))),
            ("SupportedInstances", .byte(UInt8(clamping: adapters[a].config.advertisingInstances - active))),
            ("SupportedIncludes", .strings(AdvertisingData.supportedIncludes)),
        ]
    }

    /// The adapter as a device the others can hear and connect to, made the first time it is needed.
    func adapterPeripheral(_ a: Int) -> Int {
        if let p = adapters[a].asPeripheral { return p }
        let config = SimulatorConfiguration.Device(address: adapters[a].config.address, rssi: -45, rssiJitter: 2, connectable: false,
                                                   advertisingIntervalMs: Engine.localAdvertisingIntervalMs)
        Engine.add(config, to: &peripherals, &devices, adapters: adapters)
        let p = peripherals.count - 1
        peripherals[p].rssi[a] = nil  // it does not hear itself
        peripherals[p].local = LocalServer(adapter: a)
        adapters[a].asPeripheral = p
        installServer(p)
        if started { startTimers(p) }
        return p
    }

    /// Before an adapter-peripheral advertises: the next of its adapter's advertisements becomes
    /// what it sends. False: it sends nothing (none registered, or its adapter is off or gone).
    func takeTurn(_ p: Int) -> Bool {
        guard let local = peripherals[p].local else { return true }
        let a = local.adapter
        let ready = adapters[a].advertisements.compactMap(\.data)
        guard adapters[a].usable, !ready.isEmpty else { return false }
        let turn = (local.turn + 1) % ready.count
        peripherals[p].local?.turn = turn
        let data = ready[turn]
        var config = peripherals[p].config
        config.name = data.localName ?? (data.includes.contains("local-name") ? adapters[a].alias ?? adapters[a].config.name : nil)
        config.uuids = data.serviceUUIDs
        config.manufacturerData = data.manufacturerData.mapValues(HexBytes.init)
        config.serviceData = data.serviceData.mapValues(HexBytes.init)
        config.txPower = data.includes.contains("tx-power") ? Engine.localTxPower : data.txPower
        // LE General Discoverable when the advertisement asks for it, or a connectable one while
        // the adapter is Discoverable (get_adv_flags); otherwise no Flags (the kernel adds none),
        // so that a central's discovery lists it only with a discovery filter set, as BlueZ does.
        let discoverable = data.discoverable == true || (data.connectable && adapters[a].discoverable)
        config.advertisingFlags = discoverable ? [0x06] : []
        setConfig(p, config)
        return true
    }

    private func setConfig(_ p: Int, _ config: SimulatorConfiguration.Device) {
        peripherals[p].config = config
        for d in peripherals[p].entries { devices[d].config = config }
    }

    /// The adapter is gone: bluetoothd calls Release() on each advertisement it drops (its
    /// applications go without a call), and its centrals' links to it end.
    func localAdapterGone(_ a: Int) {
        for ad in adapters[a].advertisements where ad.data != nil {
            var message = Message.methodCall(destination: ad.owner, path: ad.path, interface: Interface.advertisement, member: "Release")
            message.noReplyExpected = true
            send(message)
        }
        adapters[a].advertisements = []
        adapters[a].applications = []
        localLinkEnds(a)
        if let p = adapters[a].asPeripheral { installServer(p) }
    }

    /// Centrals on other adapters connected to this adapter's applications lose the link
    /// (it was powered off or removed).
    func localLinkEnds(_ a: Int) {
        guard let p = adapters[a].asPeripheral, let d = linked(p) else { return }
        linkDown(d, reason: .remoteHost)
    }
}
