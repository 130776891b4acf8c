import Glibc
import Sensors

extension Options {
    /// The bind keys of `--sensor-keys FILE` (none without it). A file that cannot be read or has a
    /// bad line is an error ("FILE:LINE: why"): at start-up gattway stops, on SIGHUP it keeps the
    /// keys in force.
    func sensorKeys() throws(UsageError) -> SensorKeys {
        guard let file = sensorKeysFile else { return SensorKeys() }
        guard let text = readFile(file) else {
            throw UsageError("\(file): cannot read it (\(String(cString: strerror(errno))))")
        }
        do {
            return try SensorKeys(parsing: text, source: file)
        } catch {
            throw UsageError("\(error)")
        }
    }
}
