import BLE

/// Parsing of path and body values, each failure naming its field.
package enum Parse {
    /// A value format (`format=`): hex when absent.
    package static func format(_ text: String?) throws(BLEError) -> ValueFormat {
        guard let text else { return .hex }
        guard let format = ValueFormat(rawValue: text) else {
            throw BLEError(.invalidParameters, "format must be hex, base64 or utf8, not \"\(text)\"")
        }
        return format
    }

    package static func uuid(_ text: String, field: String) throws(BLEError) -> BluetoothUUID {
        guard let uuid = BluetoothUUID(text) else {
            throw BLEError(.invalidParameters, "\(field): \"\(text)\" is not a Bluetooth UUID (use 180d, 0x180D, 8 hex digits or the 128-bit form)")
        }
        return uuid
    }

    /// A device id in a path (no field: the message says what it is), or an address in a body's field.
    package static func address(_ text: String, field: String? = nil) throws(BLEError) -> BluetoothAddress {
        guard let address = BluetoothAddress(text) else {
            guard let field else {
                throw BLEError(.invalidParameters, "\"\(text)\" is not a device id; use the address, AA:BB:CC:DD:EE:FF")
            }
            throw BLEError(.invalidParameters, "\(field): \"\(text)\" is not a Bluetooth address (AA:BB:CC:DD:EE:FF)")
        }
        return address
    }

    /// `{service}`, `{char}`, `{desc}` or a stream's `characteristic`: a handle or a UUID.
    package static func selector(_ text: String) throws(BLEError) -> AttributeSelector {
        guard let selector = AttributeSelector(text) else {
            throw BLEError(.invalidParameters, "\"\(text)\" is neither a handle (0x0027) nor a UUID (2a19, or the 128-bit form)")
        }
        return selector
    }

    /// A comma-separated query value, as OpenAPI's `form` style writes an array: `""` is the
    /// empty list, an empty entry is refused (each entry is then parsed as it is, spaces included).
    package static func list(_ text: String, field: String) throws(BLEError) -> [String] {
        guard !text.isEmpty else { return [] }
        let entries = text.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        guard !entries.contains("") else {
            throw BLEError(.invalidParameters, "\(field): an empty entry in \"\(text)\"; separate the entries with single commas")
        }
        return entries
    }

    package static func hex(_ text: String?, field: String) throws(BLEError) -> [UInt8]? {
        guard let text else { return nil }
        do { return try ValueFormat.hex.decode(text) } catch {
            throw BLEError(.invalidParameters, "\(field): \(error.message)")
        }
    }
}
