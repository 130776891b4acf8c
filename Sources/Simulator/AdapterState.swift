import BLE
import DBus
import Management

/// One local controller as bluetoothd serves it (`/org/bluez/hciN`, Adapter1): its settings,
/// and discovery, which bluetoothd runs per adapter and per D-Bus client.
struct AdapterState: Sendable {
    let config: SimulatorConfiguration.Adapter
    let path: ObjectPath
    /// The kernel's index of the controller (hci1 is 1), which its management events carry.
    let controller: ControllerIndex?
    /// Plugged in: the kernel has the controller and bluetoothd serves it (`RemoveAdapter` unplugs it).
    var present = true
    var powered: Bool
    var alias: String?
    var discoverable = false
    var discoverableTimeout: UInt32 = 180
    var pairable = true
    var pairableTimeout: UInt32 = 0
    var discovering = false
    /// The kernel's advertisement monitors on the controller (their handles), which management
    /// clients added: while there is one and no discovery runs, the controller scans passively.
    var monitors: [UInt16] = []
    /// Discovery sessions and pre-set filters, by D-Bus sender.
    var discoveryClients: [String: DiscoveryClient] = [:]
    /// Devices reported during the current discovery (their RSSI is invalidated when it stops).
    var discoveryFound: Set<Int> = []
    /// GattManager1's applications and LEAdvertisingManager1's advertisements, in registration order.
    var applications: [GattApplication] = []
    var advertisements: [LEAdvertisement] = []
    /// The adapter as a device in the room (`Engine.peripherals`), once it advertised or
    /// connected to another adapter's advertisement.
    var asPeripheral: Int?

    init(_ config: SimulatorConfiguration.Adapter) {
        self.config = config
        path = ObjectPath(trusted: "/org/bluez/" + config.id)
        controller = ControllerIndex(adapterName: config.id)
        powered = config.powered
    }

    /// Serving, and the controller on: it can scan and connect.
    var usable: Bool { present && powered }
}
