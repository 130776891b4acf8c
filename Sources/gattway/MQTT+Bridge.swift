import GatewayCore
import Glibc
import Launch
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

/// The MQTT door (`--mqtt`): the client, with the bridge's availability as its last will, the
/// bridge and the exposer of `--mqtt-expose`'s characteristics.
struct MQTTDoor {
    let client: MQTTClient
    let bridge: Bridge
    let exposer: CharacteristicExposer?

    /// Started; an error when the options cannot be used (the client's TLS files, say).
    static func start(_ options: Options, url: BrokerURL, gateway: Gateway, exposed: [ExposedCharacteristic]) throws(StartFailure) -> MQTTDoor {
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
            return MQTTDoor(client: client, bridge: bridge, exposer: exposer)
        } catch {
            throw StartFailure("--mqtt: \(error)", status: 2)
        }
    }

    /// Offline by choice: said before leaving, so the last will is not needed.
    func stop() async {
        await exposer?.stop()
        await bridge.stop()
        client.stop(after: (bridge.topics.availability, BridgeTopics.offline, true))
    }
}

func hostName() -> String {
    var buffer = [CChar](repeating: 0, count: 256)
    guard gethostname(&buffer, buffer.count - 1) == 0 else { return "gattway" }
    return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
