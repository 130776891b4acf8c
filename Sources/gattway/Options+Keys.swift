import BLE
import Glibc
import Sensors

extension Options {
    /// The bind keys of `--sensor-keys FILE` (none without it). A file that cannot be read or has a
    /// bad line is an error ("FILE:LINE: why"): at start-up gattway stops, on SIGHUP it keeps the
    /// keys in force.
    func sensorKeys() throws(UsageError) -> SensorKeys {
        try Self.keys(sensorKeysFile, none: SensorKeys(), parse: SensorKeys.init(parsing:source:))
    }

    /// The passkeys and PIN codes of `--pairing-keys FILE`, the same way.
    func pairingKeys() throws(UsageError) -> PairingKeys {
        try Self.keys(pairingKeysFile, none: PairingKeys(), parse: PairingKeys.init(parsing:source:))
    }

    private static func keys<Keys>(_ file: String?, none: Keys, parse: (String, String) throws(LineError) -> Keys) throws(UsageError) -> Keys {
        guard let file else { return none }
        guard let text = readFile(file) else {
            throw UsageError("\(file): cannot read it (\(String(cString: strerror(errno))))")
        }
        do {
            return try parse(text, file)
        } catch {
            throw UsageError("\(error)")
        }
    }
}
