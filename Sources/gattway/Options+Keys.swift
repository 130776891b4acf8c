import BLE
import GatewayCore
import Glibc
import Launch
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

func reloadSensorKeys(_ options: Options, _ gateway: Gateway) {
    reloadKeys("sensors", "bind key(s)", options.sensorKeysFile, read: options.sensorKeys, count: \.count,
               inForce: gateway.sensorKeyCount, replace: gateway.replaceSensorKeys)
}

func reloadPairingKeys(_ options: Options, _ gateway: Gateway) {
    reloadKeys("pairing", "key(s)", options.pairingKeysFile, read: options.pairingKeys, count: \.count,
               inForce: gateway.pairingKeyCount, replace: gateway.replacePairingKeys)
}

/// A keys file read again on SIGHUP: put in force, or, when it cannot be used, the keys in force
/// kept (the log says why).
private func reloadKeys<Keys>(_ topic: String, _ noun: String, _ file: String?, read: () throws(UsageError) -> Keys,
                              count: (Keys) -> Int, inForce: Int, replace: (Keys) -> Void) {
    do {
        let keys = try read()
        replace(keys)
        log("\(topic): SIGHUP: \(count(keys)) \(noun) from \(file ?? "")")
    } catch {
        log("\(topic): SIGHUP: \(error.message); keeping the \(inForce) \(noun) in force", .warning)
    }
}
