import BLE
import FoundationEssentials

extension SimulatorConfiguration {
    /// A serial port behind two characteristics, as BLE-UART modules (HM-10, Nordic UART,
    /// Microchip transparent UART) have it: what the central writes to `rx` goes into a receive
    /// buffer that the module's UART drains at a fixed rate; with `echo` the drained bytes come
    /// back as notifications on `tx` (a loopback on the serial side), and with a stream rate the
    /// serial side also sends lines of its own.
    ///
    /// JSON (`rx` and `tx` required): `{ "rx": "6E400002-…", "tx": "6E400003-…", "echo": true,
    /// "bufferBytes": 4096, "drainBytesPerSecond": 20000, "streamBytesPerSecond": 0 }`.
    /// rx and tx may be one characteristic (HM-10's FFE1).
    public struct UART: Codable, Sendable, Equatable {
        /// The characteristic the central writes (write and/or write-without-response).
        public var rx: BluetoothUUID
        /// The characteristic that notifies (notify or indicate).
        public var tx: BluetoothUUID
        /// What drains is sent back on `tx`.
        public var echo: Bool
        /// The receive buffer: a write without response that does not fit loses the bytes
        /// that do not; a write with response is answered once all its bytes are in.
        public var bufferBytes: Int
        public var drainBytesPerSecond: Int
        /// Lines ("uart 000123 abc…z\n") sent on `tx` at this rate while notifications are on; 0: none.
        public var streamBytesPerSecond: Int

        public init(rx: BluetoothUUID, tx: BluetoothUUID, echo: Bool = true, bufferBytes: Int = 4096,
                    drainBytesPerSecond: Int = 20_000, streamBytesPerSecond: Int = 0) {
            self.rx = rx
            self.tx = tx
            self.echo = echo
            self.bufferBytes = bufferBytes
            self.drainBytesPerSecond = drainBytesPerSecond
            self.streamBytesPerSecond = streamBytesPerSecond
        }

        enum CodingKeys: String, CodingKey, CaseIterable { case rx, tx, echo, bufferBytes, drainBytesPerSecond, streamBytesPerSecond }

        public init(from decoder: any Decoder) throws {
            try decoder.rejectUnknownKeys(CodingKeys.self)
            let c = try decoder.container(keyedBy: CodingKeys.self)
            let d = UART(rx: try c.decode(BluetoothUUID.self, forKey: .rx), tx: try c.decode(BluetoothUUID.self, forKey: .tx))
            self.init(rx: d.rx, tx: d.tx, echo: try c.decode(.echo, default: d.echo),
                      bufferBytes: try c.decodeInt(.bufferBytes, default: d.bufferBytes, in: 1...1_048_576)!,
                      drainBytesPerSecond: try c.decodeInt(.drainBytesPerSecond, default: d.drainBytesPerSecond, in: 1...10_000_000)!,
                      streamBytesPerSecond: try c.decodeInt(.streamBytesPerSecond, default: d.streamBytesPerSecond, in: 0...10_000_000)!)
        }

        /// Parses the JSON given to `SetUART`.
        public static func parse(_ json: String) throws(ConfigurationError) -> UART {
            try SimulatorConfiguration.decodeJSON(Data(json.utf8))
        }

        /// Checks that the device's `characteristics` have the two, rx writable and tx able to
        /// notify; `place` starts the messages ("devices[0].uart.").
        func validate(against characteristics: [Characteristic], at place: String) throws(ConfigurationError) {
            func flags(_ uuid: BluetoothUUID) -> Set<String>? { characteristics.first { $0.uuid == uuid }.map { Set($0.flags) } }
            guard let rxFlags = flags(rx) else { throw ConfigurationError("\(place)rx: the device has no characteristic \(rx)") }
            guard !AttributeTable.remoteFlags(rxFlags).filter({ $0.hasPrefix("write") }).isEmpty else {
                throw ConfigurationError("\(place)rx: \(rx) can be written neither with nor without response")
            }
            guard let txFlags = flags(tx) else { throw ConfigurationError("\(place)tx: the device has no characteristic \(tx)") }
            guard AttributeTable.remoteFlags(txFlags).contains(where: { $0 == "notify" || $0 == "indicate" }) else {
                throw ConfigurationError("\(place)tx: \(tx) can neither notify nor indicate")
            }
        }
    }
}
