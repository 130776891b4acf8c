import BLE

extension SimulatorConfiguration {
    /// The default peripherals (gateway tests depend on these addresses and names):
    /// - F0:00:00:00:00:01 "Sim Heart Rate": heart rate (2A37 notify every 1 s, 2A38 read, 2A39
    ///   write accepting only 01 else ATT 0x80), battery 2A19 (read/notify, 100 down 1 per 5 s),
    ///   device information; manufacturer data 0xFFFF "HR" + an advertisement counter.
    /// - F0:00:00:00:00:02 "Sim Serial": HM-10 style FFE0/FFE1 (read, write, write without
    ///   response, notify; echoes writes), MTU 185, and two Device Information services.
    /// - F0:00:00:00:00:03 "Sim Secure": 12345678-…-0001 encrypt-read "secret-jw" (Just Works
    ///   pairing happens by itself), …-0002 encrypt-authenticated-read "secret-mitm" (fails with
    ///   ATT 0x0e and drops the link).
    /// - F0:00:00:00:00:04 (no name): a non-connectable iBeacon.
    /// - F0:00:00:00:00:05 "Sim Eddystone": a non-connectable Eddystone-URL beacon.
    /// - F0:00:00:00:00:06...0D: sensors, one per format (BTHome and MiBeacon also encrypted),
    ///   each measuring anew every 2 to 3 s (`sensors`).
    /// - F0:00:00:00:00:0E "Sim Lock": pairs as KeyboardDisplay with passkey 123456; its state
    ///   (…-0011, "locked") needs an authenticated pairing to be read or written.
    /// - F0:00:00:00:00:0F "Sim NUS", F0:00:00:00:00:10 "Sim MCHP", F0:00:00:00:00:11 "Sim HM-10":
    ///   serial ports over BLE (`uartModules`), echoing through the UART model.
    public static let builtIn = SimulatorConfiguration(devices: [heartRate, serial, secure, iBeacon, eddystone] + sensors + [lock]
                                                           + uartModules)

    private static func uuid(_ text: String) -> BluetoothUUID { BluetoothUUID(text)! }

    private static func text(_ uuid: String, _ value: String) -> Characteristic {
        Characteristic(uuid: self.uuid(uuid), flags: ["read"], value: HexBytes(Array(value.utf8)))
    }

    private static func deviceInformation(_ characteristics: [Characteristic]) -> Service {
        Service(uuid: uuid("180A"), characteristics: characteristics)
    }

    /// The Generic Attribute service a BlueZ peripheral exposes first (as the realbluez VM's
    /// RB-Periph does): Service Changed, Client/Server Supported Features, Database Hash.
    private static let genericAttribute = Service(uuid: uuid("1801"), characteristics: [
        Characteristic(uuid: uuid("2A05"), flags: ["indicate"]),
        Characteristic(uuid: uuid("2B29"), flags: ["read", "write"], value: [0x00]),
        Characteristic(uuid: uuid("2B2A"), flags: ["read"], value: HexBytes(Array(repeating: 0x5A, count: 16))),
        Characteristic(uuid: uuid("2B3A"), flags: ["read"], value: [0x00]),
    ])

    /// bluetoothd's own Device Information service on a peripheral: only the PnP ID (so a
    /// device with its own 180A has two, as RB-Periph has).
    private static let bluetoothdDeviceInformation = deviceInformation([
        Characteristic(uuid: uuid("2A50"), flags: ["read"], value: [0x02, 0x6B, 0x1D, 0x46, 0x02, 0x42, 0x05]),
    ])

    private static let heartRate = Device(
        address: BluetoothAddress("F0:00:00:00:00:01")!, name: "Sim Heart Rate", rssi: -55, txPower: 4,
        advertisingIntervalMs: 1000, uuids: [uuid("180D"), uuid("180F")],
        manufacturerData: [0xFFFF: [0x48, 0x52, 0x00]], advertisingCounter: true,
        services: [
            genericAttribute,
            Service(uuid: uuid("180D"), characteristics: [
                Characteristic(uuid: uuid("2A37"), flags: ["notify"], value: [0x06, 72], generator: .heartRate, notifyIntervalMs: 1000),
                Characteristic(uuid: uuid("2A38"), flags: ["read"], value: [0x01]),
                Characteristic(uuid: uuid("2A39"), flags: ["write"], accept: [[0x01]], rejectCode: 0x80),
            ]),
            Service(uuid: uuid("180F"), characteristics: [
                Characteristic(uuid: uuid("2A19"), flags: ["read", "notify"], value: [100], generator: .batteryDrain, notifyIntervalMs: 5000),
            ]),
            deviceInformation([
                text("2A29", "gattway simulator"), text("2A24", "SIM-HR-1"), text("2A25", "SIM0001"), text("2A26", "1.0.0"),
            ]),
        ])

    private static let serial = Device(
        address: BluetoothAddress("F0:00:00:00:00:02")!, name: "Sim Serial", rssi: -62, advertisingIntervalMs: 1000,
        uuids: [uuid("FFE0")], mtu: 185,
        services: [
            genericAttribute,
            Service(uuid: uuid("FFE0"), characteristics: [
                Characteristic(uuid: uuid("FFE1"), flags: ["read", "write", "write-without-response", "notify"], echo: true,
                               descriptors: [Descriptor(uuid: uuid("2901"), value: HexBytes(Array("Serial".utf8)))]),
            ]),
            // Two 180A services, as on real BlueZ peripherals: bluetoothd's own and the device's.
            // A UUID alone is then ambiguous.
            bluetoothdDeviceInformation,
            deviceInformation([text("2A29", "gattway simulator"), text("2A24", "SIM-SERIAL-1")]),
        ])

    private static let secureService = uuid("12345678-1234-5678-1234-56789abc0000")

    private static let secure = Device(
        address: BluetoothAddress("F0:00:00:00:00:03")!, name: "Sim Secure", rssi: -66, advertisingIntervalMs: 1000,
        uuids: [secureService],
        services: [
            genericAttribute,
            Service(uuid: secureService, characteristics: [
                Characteristic(uuid: uuid("12345678-1234-5678-1234-56789abc0001"), flags: ["encrypt-read"],
                               value: HexBytes(Array("secret-jw".utf8))),
                Characteristic(uuid: uuid("12345678-1234-5678-1234-56789abc0002"), flags: ["encrypt-authenticated-read"],
                               value: HexBytes(Array("secret-mitm".utf8))),
            ]),
        ])

    private static let lockService = uuid("12345678-1234-5678-1234-56789abc0010")

    /// A smart lock with a keypad and a display: the central's agent decides the method (a
    /// KeyboardOnly agent enters 123456, a DisplayOnly one displays what the lock's user types,
    /// DisplayYesNo and KeyboardDisplay compare numbers, none: Just Works, which is not enough).
    private static let lock = Device(
        address: BluetoothAddress("F0:00:00:00:00:0E")!, name: "Sim Lock", rssi: -64, advertisingIntervalMs: 1000,
        uuids: [lockService], pairing: Pairing(io: .keyboardDisplay, passkey: 123_456),
        services: [
            genericAttribute,
            Service(uuid: lockService, characteristics: [
                Characteristic(uuid: uuid("12345678-1234-5678-1234-56789abc0011"),
                               flags: ["encrypt-authenticated-read", "encrypt-authenticated-write"],
                               value: HexBytes(Array("locked".utf8)),
                               accept: [HexBytes(Array("locked".utf8)), HexBytes(Array("unlocked".utf8))]),
            ]),
            deviceInformation([text("2A29", "gattway simulator"), text("2A26", "1.0.0")]),
        ])

    /// Apple iBeacon: 02 15, proximity UUID, major 1, minor 2, measured power -59 dBm.
    private static let iBeacon = Device(
        address: BluetoothAddress("F0:00:00:00:00:04")!, name: nil, rssi: -70, connectable: false, advertisingIntervalMs: 1000,
        manufacturerData: [0x004C: HexBytes([0x02, 0x15] + uuid("E2C56DB5-DFFB-48D2-B060-D0F5A71096E0").bytes + [0x00, 0x01, 0x00, 0x02, 0xC5])])

    /// Eddystone-URL frame for https://example.com (scheme 0x03, ".com" 0x07), TX power -18 dBm.
    private static let eddystone = Device(
        address: BluetoothAddress("F0:00:00:00:00:05")!, name: "Sim Eddystone", rssi: -74, connectable: false,
        advertisingIntervalMs: 1000, uuids: [uuid("FEAA")],
        serviceData: [uuid("FEAA"): HexBytes([0x10, 0xEE, 0x03] + Array("example".utf8) + [0x07])])
}

extension SimulatorConfiguration {
    /// Thermometers as they are sold, advertising temperature, humidity and battery (BTHome and
    /// Ruuvi also pressure) that drift from one measurement to the next:
    /// - F0:00:00:00:00:06 "Sim BTHome": BTHome v2 in the clear, every 2 s, non-connectable (as
    ///   battery-powered BTHome devices advertise outside their configuration mode).
    /// - F0:00:00:00:00:07 "Sim BTHome Enc": the same, encrypted with `Sensor.demoBindKey`, every 3 s.
    /// - F0:00:00:00:00:08 "Sim ATC1441", F0:00:00:00:00:09 "Sim PVVX": the custom thermometer
    ///   firmwares, every 2.5 s; connectable (the firmwares keep a GATT server for their settings).
    /// - F0:00:00:00:00:0A "Sim MiBeacon": a Xiaomi MJ_HT_V1 thermometer, unencrypted, every 3 s; connectable.
    /// - F0:00:00:00:00:0B "Sim Ruuvi": a RuuviTag, data format 5, every 2 s; non-connectable,
    ///   with a random static address (as the stock firmware advertises).
    /// - F0:00:00:00:00:0C "Sim MiBeacon Enc": a LYWSD03MMC with Xiaomi's firmware, MiBeacon v5
    ///   encrypted with `Sensor.demoBindKey`, temperature and humidity every 3 s; connectable.
    /// - F0:00:00:00:00:0D "Sim TLM": an Eddystone beacon's telemetry (TLM), every 2 s: battery
    ///   voltage, temperature, advertisements sent, uptime; non-connectable.
    static let sensors = [
        sensor("06", "Sim BTHome", Sensor(format: .bthome, intervalMs: 2000), rssi: -64, connectable: false),
        sensor("07", "Sim BTHome Enc", Sensor(format: .bthome, intervalMs: 3000, bindKey: Sensor.demoBindKey), rssi: -68,
               connectable: false),
        sensor("08", "Sim ATC1441", Sensor(format: .atc1441, intervalMs: 2500), rssi: -71, model: "LYWSD03MMC atc1441"),
        sensor("09", "Sim PVVX", Sensor(format: .pvvx, intervalMs: 2500), rssi: -58, model: "LYWSD03MMC pvvx"),
        sensor("0A", "Sim MiBeacon", Sensor(format: .mibeacon, intervalMs: 3000), rssi: -77, model: "MJ_HT_V1"),
        sensor("0B", "Sim Ruuvi", Sensor(format: .ruuviRAWv2, intervalMs: 2000), rssi: -73, addressType: "random",
               connectable: false),
        sensor("0C", "Sim MiBeacon Enc", Sensor(format: .mibeacon, intervalMs: 3000, bindKey: Sensor.demoBindKey), rssi: -69,
               model: "LYWSD03MMC"),
        sensor("0D", "Sim TLM", Sensor(format: .eddystoneTLM, intervalMs: 2000), rssi: -75, connectable: false),
    ]

    /// A sensor at F0:00:00:00:00:`last`; a connectable one has a GATT server with its model name.
    private static func sensor(_ last: String, _ name: String, _ sensor: Sensor, rssi: Int, addressType: String = "public",
                               connectable: Bool = true, model: String? = nil) -> Device {
        Device(address: BluetoothAddress("F0:00:00:00:00:" + last)!, addressType: addressType, name: name, rssi: rssi,
               connectable: connectable, advertisingIntervalMs: 1000, sensor: sensor,
               services: model.map { [genericAttribute, deviceInformation([text("2A24", $0)])] } ?? [])
    }
}

extension SimulatorConfiguration {
    /// BLE-UART modules as they are sold, each advertising its UART service and echoing what is
    /// written through the UART model (a 4096-byte buffer drained at 20 000 bytes/s), MTU 247:
    /// - F0:00:00:00:00:0F "Sim NUS": Nordic UART Service, RX 6E400002 (write, write without
    ///   response), TX 6E400003 (notify).
    /// - F0:00:00:00:00:10 "Sim MCHP": Microchip's transparent UART (BM70, RN4870), TX
    ///   49535343-1E4D… (notify), RX 49535343-8841… (write, write without response).
    /// - F0:00:00:00:00:11 "Sim HM-10": FFE0/FFE1 (read, write, write without response, notify),
    ///   rx and tx the same characteristic.
    static let uartModules = [
        uartModule("0F", "Sim NUS", model: "SIM-NUS-1", rssi: -59, service: nordicUART, characteristics: [
            Characteristic(uuid: nordicRX, flags: ["write", "write-without-response"]),
            Characteristic(uuid: nordicTX, flags: ["notify"]),
        ], rx: nordicRX, tx: nordicTX),
        uartModule("10", "Sim MCHP", model: "SIM-MCHP-1", rssi: -63, service: microchipUART, characteristics: [
            Characteristic(uuid: microchipTX, flags: ["notify"]),
            Characteristic(uuid: microchipRX, flags: ["write", "write-without-response"]),
        ], rx: microchipRX, tx: microchipTX),
        uartModule("11", "Sim HM-10", model: "SIM-HM10-1", rssi: -61, service: uuid("FFE0"), characteristics: [
            Characteristic(uuid: uuid("FFE1"), flags: ["read", "write", "write-without-response", "notify"]),
        ], rx: uuid("FFE1"), tx: uuid("FFE1")),
    ]

    static let nordicUART = uuid("6E400001-B5A3-F393-E0A9-E50E24DCCA9E")
    static let nordicRX = uuid("6E400002-B5A3-F393-E0A9-E50E24DCCA9E")
    static let nordicTX = uuid("6E400003-B5A3-F393-E0A9-E50E24DCCA9E")
    static let microchipUART = uuid("49535343-FE7D-4AE5-8FA9-9FAFD205E455")
    static let microchipTX = uuid("49535343-1E4D-4BD9-BA61-23C647249616")
    static let microchipRX = uuid("49535343-8841-43F4-A8D4-ECBE34729BB3")

    /// A UART module at F0:00:00:00:00:`last` advertising `service`, with a Device Information service.
    private static func uartModule(_ last: String, _ name: String, model: String, rssi: Int, service: BluetoothUUID,
                                   characteristics: [Characteristic], rx: BluetoothUUID, tx: BluetoothUUID) -> Device {
        Device(address: BluetoothAddress("F0:00:00:00:00:" + last)!, name: name, rssi: rssi, advertisingIntervalMs: 1000,
               uuids: [service], uart: UART(rx: rx, tx: tx),
               services: [
                   genericAttribute,
                   Service(uuid: service, characteristics: characteristics),
                   deviceInformation([text("2A29", "gattway simulator"), text("2A24", model)]),
               ])
    }
}
