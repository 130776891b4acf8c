import BLE

/// The beacon frames this side can send (the peripheral role's presets), made with the same
/// tables the decoders read them with.
public enum BeaconFrames {
    /// An iBeacon's manufacturer data (after Apple's company id 0x004C).
    public static func iBeacon(uuid: BluetoothUUID, major: UInt16, minor: UInt16, measuredPower: Int8) -> [UInt8] {
        IBeacon.header + uuid.bytes + [UInt8(major >> 8), UInt8(major & 0xFF), UInt8(minor >> 8), UInt8(minor & 0xFF),
                                       UInt8(bitPattern: measuredPower)]
    }

    /// An Eddystone-UID frame (service data of 0xFEAA): a 10-byte namespace, a 6-byte instance.
    public static func eddystoneUID(namespace: [UInt8], instance: [UInt8], txPower: Int8) -> [UInt8]? {
        guard namespace.count == 10, instance.count == 6 else { return nil }
        return [Eddystone.FrameType.uid, UInt8(bitPattern: txPower)] + namespace + instance + [0, 0]
    }

    /// An Eddystone-URL frame, or nil when the URL has no scheme the format knows, a character
    /// it cannot carry, or is longer than 17 bytes once encoded.
    public static func eddystoneURL(_ url: String, txPower: Int8) -> [UInt8]? {
        // The longest scheme first ("https://www." before "https://").
        guard let (code, scheme) = Eddystone.schemes.enumerated().filter({ url.hasPrefix($0.element) })
            .max(by: { $0.element.count < $1.element.count }) else { return nil }
        var rest = Substring(url.dropFirst(scheme.count))
        var encoded: [UInt8] = []
        while !rest.isEmpty {
            // The longest expansion that matches here (".com/" before ".com").
            if let (i, text) = Eddystone.expansions.enumerated().filter({ rest.hasPrefix($0.element) })
                .max(by: { $0.element.count < $1.element.count }) {
                encoded.append(UInt8(i))
                rest = rest.dropFirst(text.count)
                continue
            }
            guard let byte = rest.utf8.first, Eddystone.printable.contains(byte) else { return nil }
            encoded.append(byte)
            rest = rest.dropFirst()
        }
        guard encoded.count <= 17 else { return nil }
        return [Eddystone.FrameType.url, UInt8(bitPattern: txPower), UInt8(code)] + encoded
    }
}
