import BLE

/// Per-device bind keys for encrypted advertisements, from a text file (`--sensor-keys FILE`):
///
///     # kitchen thermometer
///     54:48:E6:8F:80:A5 231d39c1d7cc1ab1aee224cd096db932
///
/// One device a line: its address and its 16-byte AES key as 32 hex digits, separated by spaces or
/// tabs. `#` starts a comment; blank lines are ignored. An address listed twice is an error, not
/// a silent override.
public struct SensorKeys: Sendable, Equatable {
    private var keys: [BluetoothAddress: [UInt8]] = [:]

    /// No keys: encrypted payloads stay undecoded (`Encryption.missingKey`).
    public init() {}

    /// Keys given directly; each must be 16 bytes (others are dropped, as a file would refuse them).
    public init(_ keys: [BluetoothAddress: [UInt8]]) {
        self.keys = keys.filter { $0.value.count == 16 }
    }

    /// Parses a key file's text; `source` names it in errors ("keys.txt:3: ...").
    public init(parsing text: String, source: String) throws(SensorKeysError) {
        var lines: [BluetoothAddress: Int] = [:]
        for (line, words) in configurationLines(text) {
            func fail(_ message: String) -> SensorKeysError {
                SensorKeysError(source: source, line: line, message: message)
            }
            guard words.count == 2 else {
                throw fail("expected \"AA:BB:CC:DD:EE:FF\" and a 32-hex-digit key, got \(words.count) word(s)")
            }
            guard let address = BluetoothAddress(String(words[0])) else {
                throw fail("\"\(words[0])\" is not a Bluetooth address (AA:BB:CC:DD:EE:FF)")
            }
            guard words[1].utf8.count == 32, let key = Hex.bytes(words[1].utf8) else {
                throw fail("the key of \(address) is not 32 hex digits")
            }
            if let first = lines[address] {
                throw fail("\(address) already has a key at line \(first)")
            }
            lines[address] = line
            keys[address] = key
        }
    }

    /// The key of the device at `address`.
    public subscript(address: BluetoothAddress) -> [UInt8]? { keys[address] }

    public var count: Int { keys.count }
}

/// A key file line that is not a key.
public typealias SensorKeysError = LineError
