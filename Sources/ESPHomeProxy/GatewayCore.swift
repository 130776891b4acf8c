import BLE

/// All the door takes from gattway's core, in this one file: today the `Central` that main
/// hands over (BLE's protocol, nothing of Gateway's); when the gateway splits into a core and its
/// doors, this file's import and types change and the rest of the door does not.
///
/// The Bluetooth increment (advertisements, connections, GATT) reaches the devices through
/// here too, and must then take the core's central as REST clients get it (the GATT blocklist
/// applied), not the raw one.
public struct GatewayCore: Sendable {
    let central: any Central

    public init(central: any Central) {
        self.central = central
    }

    /// The address of the adapter gattway uses, nil while there is none.
    func adapterAddress() async -> MACAddress? {
        guard let adapters = try? await central.adapters(),
              let address = adapters.first(where: \.selected)?.address else { return nil }
        return MACAddress(bytes: address.bytes)
    }
}
