import BLE
import GatewayCore

/// What the door uses of gattway's core, in one place: the central as clients may use it (the
/// GATT blocklist applied). The Bluetooth increment (advertisements, connections, GATT) reaches
/// the devices through here too, with the core's holds and kept connections.
struct Core: Sendable {
    let gateway: Gateway

    /// The address of the adapter gattway uses, nil while there is none.
    func adapterAddress() async -> MACAddress? {
        guard let adapters = try? await gateway.central.adapters(),
              let address = adapters.first(where: \.selected)?.address else { return nil }
        return MACAddress(bytes: address.bytes)
    }
}
