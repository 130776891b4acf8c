import BLE
import GatewayCore

/// How a device's UART is reached over GATT: the characteristic the central writes (`rx`, the
/// device receives) and the one that notifies what the device sends (`tx`), in a service.
package struct SerialProfile: Sendable, Equatable {
    package var name: String
    package var service: BluetoothUUID?
    package var rx: BluetoothUUID
    package var tx: BluetoothUUID

    package init(name: String, service: BluetoothUUID?, rx: BluetoothUUID, tx: BluetoothUUID) {
        self.name = name
        self.service = service
        self.rx = rx
        self.tx = tx
    }

    /// The modules people put on microcontrollers: an HM-10 (and its clones: one characteristic,
    /// written and notifying), Nordic's UART service, Microchip's transparent UART.
    package static let known: [SerialProfile] = [
        SerialProfile(name: "hm10", service: uuid("ffe0"), rx: uuid("ffe1"), tx: uuid("ffe1")),
        SerialProfile(name: "nordic", service: uuid("6e400001-b5a3-f393-e0a9-e50e24dcca9e"),
                      rx: uuid("6e400002-b5a3-f393-e0a9-e50e24dcca9e"), tx: uuid("6e400003-b5a3-f393-e0a9-e50e24dcca9e")),
        SerialProfile(name: "microchip", service: uuid("49535343-fe7d-4ae5-8fa9-9fafd205e455"),
                      rx: uuid("49535343-8841-43f4-a8d4-ecbe34729bb3"), tx: uuid("49535343-1e4d-4bd9-ba61-23c647249616")),
    ]

    /// "hm10, nordic, microchip", for messages.
    package static let names = known.map(\.name).joined(separator: ", ")

    private static func uuid(_ text: String) -> BluetoothUUID { BluetoothUUID(text)! }

    /// The characteristics a profile names on a device, resolved to handles, with what `rx`
    /// allows (with or without response).
    package struct Resolved: Sendable, Equatable {
        package var profile: SerialProfile
        package var rx: GATTCharacteristic
        package var tx: GATTCharacteristic
    }

    /// Finds the profile among `services`: the one named (`hm10`, `nordic`, `microchip`), a custom
    /// one (`custom`), or else the first known one the device has.
    package static func resolve(_ requested: SerialProfile?, in services: [GATTService],
                                device: BluetoothAddress) throws(BLEError) -> Resolved {
        let candidates = requested.map { [$0] } ?? known
        for profile in candidates {
            let inService = services.filter { profile.service == nil || $0.uuid == profile.service }
            let characteristics = inService.flatMap(\.characteristics)
            guard let rx = characteristics.first(where: { $0.uuid == profile.rx && ($0.properties.contains(.write) || $0.properties.contains(.writeWithoutResponse)) }),
                  let tx = characteristics.first(where: { $0.uuid == profile.tx && ($0.properties.contains(.notify) || $0.properties.contains(.indicate)) })
            else { continue }
            return Resolved(profile: profile, rx: rx, tx: tx)
        }
        if let requested {
            throw BLEError(.invalidHandle, "\(device) has no \(requested.name) UART (service \(requested.service?.uuidString ?? "any"),"
                           + " rx \(requested.rx.uuidString) written, tx \(requested.tx.uuidString) notifying)")
        }
        throw BLEError(.invalidHandle, "\(device) has none of the serial profiles gattway knows (\(names)); name its service, rx and tx")
    }

    /// A known profile by name, a custom one (`rx` and `tx`, and optionally `service`; `name`
    /// nil or "custom"), or nil (neither): the first known one the device has.
    package static func named(_ name: String?, service: String?, rx: String?, tx: String?) throws(BLEError) -> SerialProfile? {
        if rx != nil || tx != nil || service != nil {
            guard name == nil || name == "custom" else {
                throw BLEError(.invalidParameters, "service, rx and tx name a custom profile: leave the profile out, or say custom")
            }
            guard let rx, let tx else { throw BLEError(.invalidParameters, "a custom profile needs rx and tx (and may name its service)") }
            return SerialProfile(name: "custom", service: try service.map { text throws(BLEError) in try Parse.uuid(text, field: "service") },
                                 rx: try Parse.uuid(rx, field: "rx"), tx: try Parse.uuid(tx, field: "tx"))
        }
        guard let name else { return nil }
        guard let known = known.first(where: { $0.name == name }) else {
            throw BLEError(.invalidParameters, "the profile is one of \(names), or custom with rx and tx, not \"\(name)\"")
        }
        return known
    }
}
