import AESCCM
import BLE

/// The advertisement payload of a measurement, in each format as its specification lays it out
/// (the same documents the gateway's decoders follow; see `Sensors`).
enum SensorEncoder {
    /// `advertisingIntervalMs` is the device's: Eddystone-TLM counts the advertisements sent.
    static func payload(_ sensor: SimulatorConfiguration.Sensor, address: BluetoothAddress, climate: Climate,
                        advertisingIntervalMs: Int) -> [UInt8] {
        switch sensor.format {
        case .bthome:
            let objects = bthomeObjects(climate)
            guard let key = sensor.bindKey?.bytes else { return [BTHomeInfo.cleartext] + objects }
            return bthomeSealed(objects, address: address, key: key, counter: climate.counter)
        case .atc1441: return atc1441(climate, address: address)
        case .pvvx: return pvvx(climate, address: address)
        case .mibeacon:
            guard let key = sensor.bindKey?.bytes else { return mibeacon(climate, address: address) }
            return mibeaconSealed(climate, address: address, key: key)
        case .ruuviRAWv2: return ruuviRAWv2(climate, address: address)
        case .eddystoneTLM:
            return eddystoneTLM(climate, uptimeMs: Int(climate.measurements) * sensor.intervalMs,
                                advertisingIntervalMs: advertisingIntervalMs)
        }
    }

    /// BTHome's device information byte: version 2 in the top three bits, bit 0 = encrypted.
    enum BTHomeInfo {
        static let cleartext: UInt8 = 2 << 5
        static let encrypted: UInt8 = cleartext | 0x01
    }

    /// BTHome v2 objects (bthome.io/format), in id order as the format asks: packet id (0x00),
    /// battery % (0x01), temperature 0.01 °C (0x02), humidity 0.01 % (0x03), pressure 0.01 hPa
    /// (0x04), voltage mV (0x0C).
    static func bthomeObjects(_ climate: Climate) -> [UInt8] {
        [0x00, UInt8(truncatingIfNeeded: climate.counter)]
            + [0x01, UInt8(climate.battery)]
            + [0x02] + littleEndian(climate.centidegrees, 2)
            + [0x03] + littleEndian(climate.humidity, 2)
            + [0x04] + littleEndian(climate.pressure, 3)
            + [0x0C] + littleEndian(climate.millivolts, 2)
    }

    /// An encrypted BTHome payload (bthome.io/encryption): the device information byte, the
    /// AES-CCM ciphertext of `objects`, the 4-byte counter and the 4-byte tag, sealed with the
    /// nonce MAC ‖ UUID 0xFCD2 little-endian ‖ device information ‖ counter.
    static func bthomeSealed(_ objects: [UInt8], address: BluetoothAddress, key: [UInt8], counter: UInt32) -> [UInt8] {
        let counterBytes = littleEndian(Int(counter), 4)
        let nonce = address.bytes + [0xD2, 0xFC, BTHomeInfo.encrypted] + counterBytes
        // The key was checked to be 16 bytes and the nonce is 13: seal cannot refuse them.
        let sealed = AESCCM.seal(objects, key: key, nonce: nonce, tagLength: 4)!
        return [BTHomeInfo.encrypted] + sealed.dropLast(4) + counterBytes + sealed.suffix(4)
    }

    /// atc1441's format, big-endian: MAC, temperature 0.1 °C, humidity %, battery %, battery mV,
    /// frame counter.
    static func atc1441(_ climate: Climate, address: BluetoothAddress) -> [UInt8] {
        address.bytes + bigEndian(climate.centidegrees / 10, 2) + [UInt8(climate.humidity / 100), UInt8(climate.battery)]
            + bigEndian(climate.millivolts, 2) + [UInt8(truncatingIfNeeded: climate.counter)]
    }

    /// pvvx's custom format, little-endian: MAC (least significant byte first), temperature
    /// 0.01 °C, humidity 0.01 %, battery mV, battery %, measurement counter, flags (none set).
    static func pvvx(_ climate: Climate, address: BluetoothAddress) -> [UInt8] {
        address.bytes.reversed() + littleEndian(climate.centidegrees, 2) + littleEndian(climate.humidity, 2)
            + littleEndian(climate.millivolts, 2) + [UInt8(climate.battery), UInt8(truncatingIfNeeded: climate.counter), 0x00]
    }

    /// An unencrypted MiBeacon frame as a Xiaomi MJ_HT_V1 thermometer sends it: frame control
    /// 0x2050 (version 2, MAC and object included), product id 0x01AA, frame counter, MAC
    /// (least significant byte first), then objects id (2) ‖ length (1) ‖ value, little-endian:
    /// 0x100D temperature and humidity in 0.1 units, 0x100A battery %.
    static func mibeacon(_ climate: Climate, address: BluetoothAddress) -> [UInt8] {
        littleEndian(0x2050, 2) + littleEndian(0x01AA, 2) + [UInt8(truncatingIfNeeded: climate.counter)]
            + address.bytes.reversed()
            + littleEndian(0x100D, 2) + [4] + littleEndian(climate.centidegrees / 10, 2) + littleEndian(climate.humidity / 10, 2)
            + littleEndian(0x100A, 2) + [1, UInt8(climate.battery)]
    }

    /// An encrypted MiBeacon v5 frame as a LYWSD03MMC with Xiaomi's firmware sends it, without its
    /// MAC: frame control 0x5948 (version 5, standard authentication, registered, object included,
    /// encrypted), product id 0x055B, frame counter (the low byte of the 32-bit counter), the
    /// AES-CCM ciphertext of object 0x100D (temperature and humidity in 0.1 units), the counter's
    /// top 3 bytes and a 4-byte tag; nonce MAC (least significant byte first) ‖ product id ‖
    /// counter, associated data 0x11. One object, as version 5 allows per frame.
    static func mibeaconSealed(_ climate: Climate, address: BluetoothAddress, key: [UInt8]) -> [UInt8] {
        let counter = littleEndian(Int(climate.counter), 4)
        let header = littleEndian(0x5948, 2) + littleEndian(0x055B, 2) + [counter[0]]
        let objects = littleEndian(0x100D, 2) + [4] + littleEndian(climate.centidegrees / 10, 2) + littleEndian(climate.humidity / 10, 2)
        let nonce: [UInt8] = address.bytes.reversed() + header.suffix(3) + counter.suffix(3)
        // A 16-byte key and a 12-byte nonce: seal cannot refuse them.
        let sealed = AESCCM.seal(objects, key: key, nonce: nonce, associatedData: [0x11], tagLength: 4)!
        return header + sealed.dropLast(4) + counter.suffix(3) + sealed.suffix(4)
    }

    /// An unencrypted Eddystone-TLM frame (version 0), big-endian: battery mV, temperature in
    /// signed 8.8 fixed point, advertisements sent and time since power-on in 0.1 s.
    static func eddystoneTLM(_ climate: Climate, uptimeMs: Int, advertisingIntervalMs: Int) -> [UInt8] {
        [0x20, 0x00] + bigEndian(climate.millivolts, 2) + bigEndian(climate.centidegrees * 256 / 100, 2)
            + bigEndian(uptimeMs / advertisingIntervalMs + 1, 4) + bigEndian(uptimeMs / 100, 4)
    }

    /// RuuviTag data format 5, big-endian: temperature 0.005 °C, humidity 0.0025 %, pressure
    /// − 50 000 Pa, acceleration mG, battery mV − 1600 (11 bits) with TX power (+4 dBm) in 2 dBm
    /// steps above −40 (5 bits), movement counter, measurement sequence (0xFFFF means "not
    /// available", so it counts 0...0xFFFE), and the MAC (most significant byte first).
    static func ruuviRAWv2(_ climate: Climate, address: BluetoothAddress) -> [UInt8] {
        let power = (climate.millivolts - 1600) << 5 | (4 + 40) / 2
        return [5] + bigEndian(climate.centidegrees * 2, 2) + bigEndian(climate.humidity * 4, 2)
            + bigEndian(climate.pressure - 50_000, 2) + climate.acceleration.flatMap { bigEndian($0, 2) }
            + bigEndian(power, 2) + [0] + bigEndian(Int(climate.counter % 0xFFFF), 2) + address.bytes
    }

    /// The low `count` bytes of `value` (two's complement for negatives), least significant first.
    static func littleEndian(_ value: Int, _ count: Int) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: value >> (8 * $0)) }
    }

    static func bigEndian(_ value: Int, _ count: Int) -> [UInt8] {
        littleEndian(value, count).reversed()
    }
}
