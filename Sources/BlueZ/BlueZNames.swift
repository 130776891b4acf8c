/// Every BlueZ name gattway uses, in one place.
enum BlueZ {
    static let service = "org.bluez"
    static let adapterInterface = "org.bluez.Adapter1"
    static let deviceInterface = "org.bluez.Device1"
    static let gattServiceInterface = "org.bluez.GattService1"
    static let gattCharacteristicInterface = "org.bluez.GattCharacteristic1"
    static let gattDescriptorInterface = "org.bluez.GattDescriptor1"

    static let busService = "org.freedesktop.DBus"
    static let errorPrefix = "org.bluez.Error."
}
