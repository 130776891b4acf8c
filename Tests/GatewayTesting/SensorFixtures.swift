import BLE
import Foundation
import Sensors

/// BTHome advertisements for sensor tests.
package let thermometer = BluetoothAddress("A4:C1:38:00:00:01")!
/// bthome.io/encryption's example device and key.
package let encrypted = BluetoothAddress("54:48:E6:8F:80:A5")!
package let exampleKey = SensorKeys([encrypted: Array(Data(hexString: "231d39c1d7cc1ab1aee224cd096db932"))])

/// A device advertising BTHome service data (`hex`), heard at `lastSeen`.
package func bthome(_ id: BluetoothAddress, _ hex: String, lastSeen: Date = Date(), rssi: Int = -60) -> PeripheralInfo {
    PeripheralInfo(id: id, addressType: "public", name: "Sensor", rssi: rssi, lastSeen: lastSeen, state: .disconnected,
                   paired: false, advertisement: AdvertisementData(serviceData: [BluetoothUUID(uint16: 0xFCD2): Array(Data(hexString: hex))]))
}

extension Data {
    package init(hexString: String) {
        let digits = Array(hexString.filter { !$0.isWhitespace })
        self.init(stride(from: 0, to: digits.count, by: 2).map { UInt8(String(digits[$0...$0 + 1]), radix: 16)! })
    }
}
