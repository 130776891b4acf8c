/// What to answer when a device asks to pair, per device, from a text file (`--pairing-keys FILE`):
/// the passkey printed on a lock or a meter, a legacy PIN code.
///
///     # front door
///     C4:7C:8D:6A:11:02 passkey 123456
///     00:1A:7D:DA:71:13 pin 0000
///
/// One device a line: its address, `passkey` and six digits, or `pin` and 1 to 16 letters or
/// digits. `#` starts a comment; blank lines are ignored. An address listed twice is an error.
public struct PairingKeys: Sendable, Equatable {
    private var keys: [BluetoothAddress: PairingAnswer] = [:]

    /// No keys: pairings are answered by clients only.
    public init() {}

    /// Parses a keys file's text; `source` names it in errors ("keys.txt:3: ...").
    public init(parsing text: String, source: String) throws(LineError) {
        var lines: [BluetoothAddress: Int] = [:]
        for (line, words) in configurationLines(text) {
            func fail(_ message: String) -> LineError { LineError(source: source, line: line, message: message) }
            guard words.count == 3 else {
                throw fail("expected \"AA:BB:CC:DD:EE:FF passkey 123456\" or \"AA:BB:CC:DD:EE:FF pin 0000\", got \(words.count) word(s)")
            }
            guard let address = BluetoothAddress(String(words[0])) else {
                throw fail("\"\(words[0])\" is not a Bluetooth address (AA:BB:CC:DD:EE:FF)")
            }
            let key: PairingAnswer
            switch words[1] {
            case "passkey":
                guard words[2].utf8.count == 6, words[2].allSatisfy({ $0.isASCII && $0.isNumber }), let passkey = UInt32(words[2]) else {
                    throw fail("the passkey of \(address) is not six digits")
                }
                key = .passkey(passkey)
            case "pin":
                guard let pin = PairingAnswer.checkedPINCode(String(words[2])) else {
                    throw fail("the PIN code of \(address) is not 1 to 16 letters or digits")
                }
                key = pin
            default:
                throw fail("\"\(words[1])\" is neither passkey nor pin")
            }
            if let first = lines[address] {
                throw fail("\(address) already has a key at line \(first)")
            }
            lines[address] = line
            keys[address] = key
        }
    }

    /// Keys given directly.
    public init(_ keys: [BluetoothAddress: PairingAnswer]) { self.keys = keys }

    /// The key of the device at `address`.
    public subscript(address: BluetoothAddress) -> PairingAnswer? { keys[address] }

    public var count: Int { keys.count }
}

extension PairingAnswer {
    /// A PIN code as BlueZ takes one (1 to 16 letters or digits), nil for anything else.
    public static func checkedPINCode(_ text: String) -> PairingAnswer? {
        guard (1...16).contains(text.utf8.count), text.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber) }) else { return nil }
        return .pinCode(text)
    }
}
