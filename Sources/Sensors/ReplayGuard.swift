import BLE

/// Refuses replayed encrypted readings: BTHome's counter, and MiBeacon's frame counter with its
/// random number, must grow from one advertisement to the next (bthome.io/encryption leaves that
/// check to receivers; Xiaomi's gateways make it). Feed it each decoded reading of a
/// device, in arrival order. The same advertisement heard again (same counter, same bytes) is
/// passed: devices repeat each advertisement to make up for losses. An older counter, or the same
/// counter with other bytes, becomes `Encryption.replayed` without measurements.
///
/// It remembers one counter per device that decrypted, so it holds at most one entry per bind key.
/// A device that restarts its counter (after a battery change) is refused until its counter passes
/// the remembered one, or until the gateway restarts: the price of refusing replays.
public struct ReplayGuard: Sendable {
    private var latest: [BluetoothAddress: ReplayToken] = [:]

    public init() {}

    /// `reading` as it may be used: unchanged, or marked replayed.
    public mutating func admit(_ reading: SensorReading, from address: BluetoothAddress) -> SensorReading {
        guard let token = reading.replayToken else { return reading }
        if let last = latest[address], token.counter < last.counter || (token.counter == last.counter && token != last) {
            return SensorReading(format: reading.format, encryption: .replayed)
        }
        latest[address] = token
        return reading
    }
}
