import Testing
@testable import Access

/// No listener beyond loopback without credentials, unless the operator says so (`--no-auth`).
@Suite struct ExposureTests {
    typealias Listener = Exposure.Listener

    @Test(arguments: [
        ("127.0.0.1", true), ("127.5.0.1", true), ("::1", true), ("localhost", true),
        ("0.0.0.0", false), ("::", false), ("192.168.1.20", false), ("fe80::1", false), ("128.0.0.1", false),
    ])
    func loopback(host: String, isLoopback: Bool) {
        #expect(Exposure.isLoopback(host) == isLoopback)
    }

    @Test(arguments: [
        // Loopback, or guarded: served.
        ([Listener(host: "127.0.0.1", port: 8080, door: .http(tokens: false))], nil),
        ([Listener(host: "0.0.0.0", port: 8080, door: .http(tokens: true))], nil),
        ([Listener(host: "::", port: 6053, door: .esphome(key: true))], nil),
        ([Listener(host: "::1", port: 6053, door: .esphome(key: false))], nil),
        ([Listener(host: "localhost", port: 7000, door: .serial(device: "F0:00:00:00:00:02"))], nil),
        // Open to others: refused, each with what it would let anyone do and what to give.
        ([Listener(host: "0.0.0.0", port: 8080, door: .http(tokens: false))], """
            --listen 0.0.0.0 without tokens would let anyone who reaches it use every device.
            Give --tokens FILE (or GATTWAY_TOKENS), or --no-auth to do it anyway.
            """),
        ([Listener(host: "::", port: 6053, door: .esphome(key: false))], """
            --esphome-api [::]:6053 without a key would let anyone who reaches it use every device.
            Give --esphome-key BASE64 (or GATTWAY_ESPHOME_KEY), or --no-auth to do it anyway.
            """),
        // A serial port has no credentials to give: beyond loopback it is always open.
        ([Listener(host: "192.168.1.20", port: 7000, door: .serial(device: "F0:00:00:00:00:02"))], """
            --serial 192.168.1.20:7000 would let anyone who reaches it use F0:00:00:00:00:02 (a raw TCP port has no tokens).
            Serve it on 127.0.0.1 (and tunnel it), or give --no-auth to do it anyway.
            """),
        // The first open one is the one named.
        ([Listener(host: "127.0.0.1", port: 8080, door: .http(tokens: false)),
          Listener(host: "0.0.0.0", port: 7001, door: .serial(device: "F0:00:00:00:00:03")),
          Listener(host: "0.0.0.0", port: 6053, door: .esphome(key: false))],
         """
            --serial 0.0.0.0:7001 would let anyone who reaches it use F0:00:00:00:00:03 (a raw TCP port has no tokens).
            Serve it on 127.0.0.1 (and tunnel it), or give --no-auth to do it anyway.
            """),
    ] as [([Listener], String?)])
    func refusal(listeners: [Listener], refusal: String?) {
        #expect(Exposure.refusal(listeners, servedAnyway: false) == refusal)
        // The operator may serve any of them anyway.
        #expect(Exposure.refusal(listeners, servedAnyway: true) == nil)
    }

    @Test func noListenersNothingToRefuse() {
        #expect(Exposure.refusal([], servedAnyway: false) == nil)
    }
}
