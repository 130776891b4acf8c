import MQTT
import Testing

@Suite struct MQTTClientTests {
    /// Not started, so never connected: every message waits, and the queue keeps the newest.
    @Test func whileDisconnectedAtMostOfflineLimitMessagesWaitTheOldestDroppedFirst() throws {
        var configuration = MQTTClient.Configuration(url: BrokerURL(host: "127.0.0.1", port: 9), clientID: "test-offline")
        configuration.offlineLimit = 10
        let client = try MQTTClient(configuration)
        for n in 0..<25 { client.publish("t", Array("\(n)".utf8)) }
        #expect(!client.isConnected)
        #expect(client.dropped == 15)
        #expect(client.protocolVersion == 5)
    }

    /// libmosquitto checks the TLS files when they are set: the client is not made, and says why.
    @Test func aCAFileThatCannotBeReadIsRefused() {
        var configuration = MQTTClient.Configuration(url: BrokerURL(host: "127.0.0.1", tls: true), clientID: "test-ca")
        configuration.caFile = "/nonexistent/ca.pem"
        #expect {
            try MQTTClient(configuration)
        } throws: { error in
            (error as? MQTTError)?.description.hasPrefix("TLS: ") == true
        }
    }

    @Test func anEmptyClientIDIsRefused() {
        #expect(throws: MQTTError.self) { try MQTTClient(.init(url: BrokerURL(host: "localhost"), clientID: "")) }
    }
}
