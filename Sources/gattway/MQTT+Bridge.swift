import GatewayCore
import Glibc
import MQTT
import MQTTBridge

/// The MQTT client is the bridge's broker: the same calls, under the protocol's names.
extension MQTTClient: MessageBroker {}

/// `--mqtt-expose FILE`: its characteristics (none without it). A file that cannot be read or has a
/// bad entry is an error ("FILE: [i]: why"): gattway does not start.
func exposedCharacteristics(_ options: Options) throws(UsageError) -> [ExposedCharacteristic] {
    guard let file = options.mqttExposeFile else { return [] }
    guard let text = readFile(file) else {
        throw UsageError("--mqtt-expose: \(file): cannot read it (\(String(cString: strerror(errno))))")
    }
    do {
        return try ExposedCharacteristic.parse(text, source: file)
    } catch {
        throw UsageError("--mqtt-expose: \(error.description)")
    }
}

/// `--mqtt`: the client (with the bridge's availability as its last will), the bridge and the
/// exposer of `exposed` (nil when there are none), started; nil and a logged reason when the
/// options cannot be used.
func startBridge(_ options: Options, gateway: Gateway, exposed: [ExposedCharacteristic])
    -> (bridge: Bridge, exposer: CharacteristicExposer?, client: MQTTClient)? {
    guard let url = options.mqtt else { return nil }
    do {
        let topics = try options.bridgeTopics(hostName: hostName())
        var configuration = MQTTClient.Configuration(url: url, clientID: "gattway-\(topics.gatewayID)")
        configuration.will = .init(topic: topics.availability, payload: BridgeTopics.offline, retain: true)
        configuration.caFile = options.mqttCA
        configuration.certificateFile = options.mqttCertificate
        configuration.keyFile = options.mqttKey
        let client = try MQTTClient(configuration)
        let bridge = Bridge(gateway: gateway, broker: client, topics: topics, forgetAfter: options.forgetAfter,
                            expireAfter: options.mqttExpireAfter == 0 ? nil : options.mqttExpireAfter, log: log)
        bridge.start()
        let exposer = exposed.isEmpty ? nil : CharacteristicExposer(bridge: bridge, exposed: exposed)
        exposer?.start()
        if !exposed.isEmpty { log("mqtt: exposing \(exposed.count) characteristic(s) from \(options.mqttExposeFile ?? "")") }
        client.start(MQTTClient.Handlers(
            connected: { version in
                log("mqtt: connected to \(url) (MQTT \(version == 5 ? "5" : "3.1.1")) as \(topics.base)")
                bridge.brokerConnected()
            },
            disconnected: { reason in
                bridge.brokerDisconnected()
                log("mqtt: \(url): \(reason)")
            },
            message: { message in
                bridge.received(BrokerMessage(topic: message.topic, payload: message.payload,
                                              responseTopic: message.responseTopic, correlationData: message.correlationData))
            }))
        return (bridge, exposer, client)
    } catch {
        log("gattway: --mqtt: \(error)", .error)
        return nil
    }
}

func hostName() -> String {
    var buffer = [CChar](repeating: 0, count: 256)
    guard gethostname(&buffer, buffer.count - 1) == 0 else { return "gattway" }
    return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
