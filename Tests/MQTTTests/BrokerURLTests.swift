import MQTT
import Testing

@Suite struct BrokerURLTests {
    @Test(arguments: [
        ("mqtt://broker.lan", BrokerURL(host: "broker.lan", port: 1883)),
        ("mqtt://broker.lan:1884", BrokerURL(host: "broker.lan", port: 1884)),
        ("mqtts://broker.lan", BrokerURL(host: "broker.lan", port: 8883, tls: true)),
        ("mqtt://user:secret@10.0.0.2:1883/", BrokerURL(host: "10.0.0.2", user: "user", password: "secret")),
        ("mqtt://user@broker", BrokerURL(host: "broker", user: "user")),
        ("mqtt://us%40er:p%3Aw%2F@broker", BrokerURL(host: "broker", user: "us@er", password: "p:w/")),
        ("mqtt://user:p@ss@broker", BrokerURL(host: "broker", user: "user", password: "p@ss")),
        ("mqtts://[::1]:8884", BrokerURL(host: "::1", port: 8884, tls: true)),
        ("mqtt://[fe80::1]", BrokerURL(host: "fe80::1")),
    ])
    func parses(_ text: String, _ expected: BrokerURL) throws {
        #expect(try BrokerURL(parsing: text) == expected)
    }

    @Test(arguments: [
        "http://broker", "broker:1883", "mqtt://", "mqtt://:1883", "mqtt://broker:0", "mqtt://broker:65536",
        "mqtt://broker:x", "mqtt://broker/topic", "mqtt://broker?x=1", "mqtt://@broker", "mqtt://[::1", "mqtt://[::1]x",
        "mqtt://us%4:pw@broker",
    ])
    func refuses(_ text: String) {
        #expect(throws: BrokerURL.Invalid.self) { try BrokerURL(parsing: text) }
    }

    @Test func theDescriptionHidesThePassword() throws {
        #expect(try BrokerURL(parsing: "mqtts://me:secret@[::1]").description == "mqtts://me:***@[::1]:8883")
        #expect(try BrokerURL(parsing: "mqtt://broker").description == "mqtt://broker:1883")
    }
}
