import BLE
import ESPHomeAPI
import MQTT
import SerialBridge

/// The table's options of the doors beside the HTTP API: MQTT, the ESPHome API, serial ports.
extension Options {
    static let mqttSection = OptionSection(title: "MQTT and Home Assistant", options: [
        .value("--mqtt", "URL", environment: "GATTWAY_MQTT", """
            also publish to an MQTT broker and take commands from it: mqtt://[user:password@]host[:port] \
            (default port 1883), or mqtts://... (TLS, default port 8883). Availability (retained, with a \
            last will), sensors, devices, events, Home Assistant discovery; commands on PREFIX/ID/command. \
            MQTT 5, or 3.1.1 when the broker has no 5. Reconnects with backoff (1-30 s); while away at \
            most 1024 messages wait, the oldest dropped first. See docs/mqtt.md
            """) { options, text, source throws(UsageError) in
            do throws(BrokerURL.Invalid) {
                options.mqtt = try BrokerURL(parsing: text)
            } catch {
                throw UsageError("\(source): \(error.description)")
            }
        },
        .value("--mqtt-ca", "FILE", """
            mqtts: the CA certificates (PEM) that sign the broker's (default: the system's)
            """) { options, text, _ in options.mqttCA = text },
        .value("--mqtt-cert", "FILE", """
            mqtts: a client certificate (PEM), with the key of --mqtt-key; both or neither
            """) { options, text, _ in options.mqttCertificate = text },
        .value("--mqtt-key", "FILE", """
            mqtts: the unencrypted key (PEM) of --mqtt-cert's certificate
            """) { options, text, _ in options.mqttKey = text },
        .value("--gateway-id", "ID", environment: "GATTWAY_GATEWAY_ID", """
            this gateway's name in topics and in Home Assistant: 1-64 letters, digits, -, _ or . \
            (default: the host name)
            """) { options, text, _ in options.gatewayID = text },
        .value("--mqtt-prefix", "P", """
            the topic levels the gateway publishes under (default gattway): P/ID/availability, \
            P/ID/sensors/ADDRESS, ...
            """) { options, text, _ in options.mqttPrefix = text },
        .value("--mqtt-expose", "FILE", environment: "GATTWAY_MQTT_EXPOSE", """
            GATT characteristics to publish as Home Assistant sensors, a JSON array: [{"device": \
            "F0:00:00:00:00:01", "service": "180d", "characteristic": "2a37", "name": "Heart rate", \
            "decode": "uint8", "offset": 1, "unit": "bpm", "stateClass": "measurement", "notify": true}, \
            ...]. decode: uint8, sint8, uint16le/be, sint16le/be, (u|s)int24le/be, (u|s)int32le/be, \
            float32le/be, float64le/be, medfloat16, medfloat32 (IEEE 11073 SFLOAT, FLOAT), utf8; "scale": \
            0.01 multiplies; "mask": 6, "shift": 1 take bits of an unsigned integer (before the scale); \
            deviceClass as Home Assistant names it. "notify": true keeps the device connected and holds \
            its notifications; "poll": SECONDS reads it that often, connecting as connect=auto does. \
            Values on P/ID/values/ADDRESS/SERVICE/CHARACTERISTIC (retained). A bad file stops gattway \
            (exit 2). See docs/mqtt.md
            """) { options, text, _ in options.mqttExposeFile = text },
        .value("--mqtt-expire-after", "SECONDS", """
            Home Assistant shows a sensor unavailable after this long without a message (default 600, 0: \
            never); a sensor still heard has its unchanged reading published again after half of it. \
            Polled characteristics: at least 3 polls; notified ones: their own "expireAfter" only
            """) { options, text, source throws(UsageError) in
            options.mqttExpireAfter = try Parse.number(text, source, (0...604_800).contains,
                                                       "takes whole seconds, from 0 (never) to 604800")
        },
    ])

    static let esphomeSection = OptionSection(title: "The ESPHome native API (a Bluetooth proxy for Home Assistant)", options: [
        .value("--esphome-api", "[HOST:]PORT", environment: "GATTWAY_ESPHOME_API", """
            also serve the ESPHome native API, as a Bluetooth proxy for Home Assistant (its usual port is \
            6053; default host 127.0.0.1; port 0 picks a free port, printed at start): advertisements (the \
            watch's, which it starts if none runs), connections, GATT, notifications, pairing, through the \
            same core as the REST API. See docs/esphome-proxy.md
            """) { options, text, source throws(UsageError) in
            guard let (host, port) = Parse.hostAndPort(text), host?.isEmpty != true else {
                throw UsageError("\(source) takes [HOST:]PORT, e.g. 6053 or 0.0.0.0:6053, not \"\(text)\"")
            }
            if let host { options.esphomeHost = host }
            options.esphomePort = port
        },
        .value("--esphome-key", "BASE64", environment: "GATTWAY_ESPHOME_KEY", """
            the API's encryption key, as ESPHome's `api: encryption: key:`: 32 random bytes in base64 \
            (head -c 32 /dev/urandom | base64). Clients must then speak Noise with the same key; without \
            it the API is plaintext, and gattway refuses to serve it beyond loopback unless --no-auth
            """) { options, text, source throws(UsageError) in
            guard let key = EncryptionKey(base64: text) else {
                throw UsageError("\(source) takes 32 bytes in base64, as ESPHome's api: encryption: key: (head -c 32 /dev/urandom | base64)")
            }
            options.esphomeKey = key
        },
        .value("--esphome-connections", "N", environment: "GATTWAY_ESPHOME_CONNECTIONS", """
            devices the API's clients may have connected at once (default 3, as an ESPHome proxy; 1 to \
            16): the free slots Home Assistant sees; fewer when the adapters in use take fewer links
            """) { options, text, source throws(UsageError) in
            options.esphomeConnections = try Parse.number(text, source, (1...16).contains,
                                                          "takes a number of connection slots from 1 to 16, not \"\(text)\"")
            options.esphomeConnectionsGiven = true
        },
    ])

    static let serialSection = OptionSection(title: "Serial ports", options: [
        .value("--serial", "HOST:PORT=ADDRESS[,OPTION]...", repeatable: true, """
            serve the device's UART (HM-10, Nordic UART, Microchip transparent UART, or a custom pair) as \
            a raw TCP port, as ser2net serves a serial line: socat, nc and pyserial's socket://HOST:PORT \
            open it. The device is connected while a client is attached. OPTIONs: hm10 | nordic | \
            microchip (default: the first it has), or service=UUID,rx=UUID,tx=UUID; hold (stay attached \
            through a link loss, connecting again) or close (the default: the client is disconnected); \
            mode=auto|response|command, rate=BYTES_PER_SECOND (pacing of writes without response). \
            Repeatable; more at runtime with POST /v1/serial-ports. Beyond loopback, anyone who reaches \
            the port uses the device: gattway refuses that unless --no-auth
            """) { options, text, _ throws(UsageError) in
            do throws(BLEError) {
                options.serialPorts.append(try SerialPort.Configuration(parsing: text))
            } catch {
                throw UsageError(error.message)
            }
        },
    ])
}
