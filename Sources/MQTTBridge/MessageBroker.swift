/// What the MQTT bridge needs of a broker connection; the executable adapts its MQTT client to it,
/// tests give a recording one.
public protocol MessageBroker: Sendable {
    /// Publishes now, or queues (bounded) while disconnected. `responseTopic` and
    /// `correlationData` are MQTT 5 properties, left out where the connection has no MQTT 5.
    func publish(_ topic: String, _ payload: [UInt8], qos: Int, retain: Bool, responseTopic: String?, correlationData: [UInt8]?)
    /// Subscribes now and again on every later connection.
    func subscribe(_ filter: String, qos: Int)
}

extension MessageBroker {
    func publish(_ topic: String, _ payload: [UInt8], qos: Int = 0, retain: Bool = false) {
        publish(topic, payload, qos: qos, retain: retain, responseTopic: nil, correlationData: nil)
    }
}

/// A message the broker delivered to the bridge.
public struct BrokerMessage: Sendable {
    public var topic: String
    public var payload: [UInt8]
    public var responseTopic: String?
    public var correlationData: [UInt8]?

    public init(topic: String, payload: [UInt8], responseTopic: String? = nil, correlationData: [UInt8]? = nil) {
        self.topic = topic
        self.payload = payload
        self.responseTopic = responseTopic
        self.correlationData = correlationData
    }
}
