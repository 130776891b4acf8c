import Glibc
import Synchronization
import Testing

@testable import ESPHomeAPI

/// A door that answers hello and ping, and writes down what it got and why clients ended.
private final class Recorder: APIHandler {
    let received = Mutex<[ClientMessage]>([])
    let ended = Mutex<[String]>([])
    let clients = Mutex<[APIClient]>([])

    func received(_ message: ClientMessage, from client: APIClient) {
        received.withLock { $0.append(message) }
        clients.withLock { if !$0.contains(client) { $0.append(client) } }
        switch message {
        case .hello: client.send(HelloResponse(apiVersionMajor: 1, apiVersionMinor: 10, serverInfo: "test", name: "test"))
        case .ping: client.send(PingResponse())
        case .disconnect:
            client.send(DisconnectResponse())
            client.close(reason: "disconnected")
        default: break
        }
    }

    func ended(_ client: APIClient, reason: String) {
        ended.withLock { $0.append(reason) }
    }
}

private final class Log: Sendable {
    let lines = Mutex<[String]>([])
    func callAsFunction(_ line: String) { lines.withLock { $0.append(line) } }
    func contains(_ text: String) -> Bool { lines.withLock { $0.contains { $0.contains(text) } } }
}

/// Polls until `condition` holds or `seconds` pass.
private func eventually(_ seconds: Double = 5, _ condition: () -> Bool) -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
    while !condition() {
        if ContinuousClock.now > deadline { return false }
        usleep(10_000)
    }
    return true
}

private func makeServer(_ configure: (inout APIServer.Configuration) -> Void = { _ in })
    -> (APIServer, Recorder, Log) {
    var configuration = APIServer.Configuration(host: "127.0.0.1", port: 0)
    configure(&configuration)
    let recorder = Recorder()
    let log = Log()
    let server = try! APIServer(configuration, identity: .init(name: "kitchen-gw", macAddress: "aabbccddeeff"),
                                handler: recorder, log: { log($0) })
    return (server, recorder, log)
}

private let hello = HelloRequest(clientInfo: "tests", apiVersionMajor: 1, apiVersionMinor: 10)

@Suite(.serialized)
struct ServerTests {
    @Test func answersAPlaintextClient() throws {
        let (server, recorder, _) = makeServer()
        defer { server.stop() }
        let client = RawClient(port: server.port)
        client.send(plaintextFrame(hello) + plaintextFrame(PingRequest()))
        let first = try #require(client.readPlaintext())
        #expect(first.type == HelloResponse.id)
        #expect(try HelloResponse(serialized: first.payload).serverInfo == "test")
        #expect(client.readPlaintext()?.type == PingResponse.id)
        #expect(recorder.received.withLock { $0 } == [.hello(hello), .ping])
        #expect(recorder.clients.withLock { $0.first?.info } == "tests")
    }

    @Test func garbageEndsThatClientOnlyAndSaysWhy() throws {
        let (server, recorder, log) = makeServer()
        defer { server.stop() }
        let before = RawClient(port: server.port)
        before.send(plaintextFrame(hello))
        #expect(before.readPlaintext()?.type == HelloResponse.id)

        let rude = RawClient(port: server.port)
        rude.send(Array("GET / HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
        #expect(rude.readToEnd() == [0x00] + Array("Bad indicator byte".utf8))
        #expect(eventually { log.contains("sent a frame beginning with 0x47, not 0x00") })
        #expect(recorder.ended.withLock { $0 } == ["sent a frame beginning with 0x47, not 0x00"])

        // The client from before and a new one are served.
        before.send(plaintextFrame(PingRequest()))
        #expect(before.readPlaintext()?.type == PingResponse.id)
        let after = RawClient(port: server.port)
        after.send(plaintextFrame(hello))
        #expect(after.readPlaintext()?.type == HelloResponse.id)
    }

    @Test func aMessageThatIsNotProtobufEndsTheClient() {
        let (server, _, log) = makeServer()
        defer { server.stop() }
        let client = RawClient(port: server.port)
        client.send([0x00, 0x02, 0x01, 0x0A, 0x05])  // a HelloRequest whose string runs past its end
        #expect(client.readToEnd().isEmpty)
        #expect(eventually { log.contains("sent a message of type 1 that is not protobuf (the message ends inside a field)") })
    }

    @Test func aFrameOverTheLimitEndsTheClient() {
        let (server, _, log) = makeServer { $0.maxPayload = 1000 }
        defer { server.stop() }
        let client = RawClient(port: server.port)
        client.send([0x00, 0x88, 0x27, 0x01])  // 5000 bytes announced
        #expect(client.readToEnd().isEmpty)
        #expect(eventually { log.contains("sent a frame of 5000 bytes (at most 1000 are taken)") })
    }

    @Test func aClientThatSaysNothingIsEndedAfterTheHandshakeTimeout() {
        let (server, recorder, log) = makeServer { $0.handshakeTimeout = .milliseconds(300) }
        defer { server.stop() }
        let client = RawClient(port: server.port)
        let start = ContinuousClock.now
        #expect(client.readToEnd().isEmpty)
        let waited = ContinuousClock.now - start
        #expect(waited >= .milliseconds(250) && waited < .seconds(3))
        #expect(eventually { log.contains("sent no message within 0.3 seconds") })
        #expect(recorder.received.withLock { $0 }.isEmpty)
    }

    @Test func aQuietClientIsPingedThenEndedWhenItDoesNotAnswer() {
        let (server, _, log) = makeServer { $0.pingInterval = .milliseconds(300) }
        defer { server.stop() }
        let client = RawClient(port: server.port)
        client.send(plaintextFrame(hello))
        #expect(client.readPlaintext()?.type == HelloResponse.id)
        #expect(client.readPlaintext()?.type == PingRequest.id)
        #expect(client.readToEnd().isEmpty)
        #expect(eventually { log.contains("silent for 0.6 seconds, a ping unanswered") })
    }

    @Test func aClientThatDoesNotReadIsEndedWhenItsBufferIsFull() throws {
        let (server, recorder, log) = makeServer { $0.maxBuffered = 256 * 1024 }
        defer { server.stop() }
        let client = RawClient(port: server.port, receiveBuffer: 4096)
        client.send(plaintextFrame(hello))
        #expect(eventually { recorder.clients.withLock { !$0.isEmpty } })
        let door = try #require(recorder.clients.withLock { $0.first })
        let big = BluetoothGATTReadResponse(address: 1, handle: 1, data: [UInt8](repeating: 0x55, count: 60_000))
        var sent = 0
        while door.send(big) {
            sent += 1
            #expect(sent < 2000, "the buffer never filled")
            if sent >= 2000 { break }
        }
        #expect(eventually { log.contains("does not read what it is sent") })
        #expect(recorder.ended.withLock { $0.first?.hasPrefix("does not read what it is sent") } == true)
        #expect(!door.send(PingRequest()))
    }

    @Test func closeWritesWhatWasSentFirst() throws {
        let (server, recorder, log) = makeServer()
        defer { server.stop() }
        let client = RawClient(port: server.port)
        client.send(plaintextFrame(hello) + plaintextFrame(DisconnectRequest()))
        #expect(client.readPlaintext()?.type == HelloResponse.id)
        #expect(client.readPlaintext()?.type == DisconnectResponse.id)
        #expect(client.readToEnd().isEmpty)
        #expect(eventually { log.contains("127.0.0.1:") && log.contains(" (tests): disconnected") })
        #expect(recorder.ended.withLock { $0 } == ["disconnected"])
    }

    @Test func clientsBeyondTheLimitAreRefused() {
        let (server, _, log) = makeServer { $0.maxClients = 2 }
        defer { server.stop() }
        let clients = (0..<2).map { _ in RawClient(port: server.port) }
        for client in clients {
            client.send(plaintextFrame(hello))
            #expect(client.readPlaintext()?.type == HelloResponse.id)
        }
        let third = RawClient(port: server.port)
        #expect(third.readToEnd().isEmpty)
        #expect(eventually { log.contains("refused: 2 clients are connected already") })
    }

    @Test func stoppingTellsEachClient() {
        // On a loopback address of its own: the tests running beside this one listen on
        // 127.0.0.1 (or every address), and any of them may take the port this server frees.
        let (server, _, _) = makeServer { $0.host = "127.0.0.36" }
        let client = RawClient(port: server.port, host: 0x7F00_0024)
        client.send(plaintextFrame(hello))
        #expect(client.readPlaintext()?.type == HelloResponse.id)
        #expect(RawClient.isListening(port: server.port, host: 0x7F00_0024))
        server.stop()
        #expect(client.readPlaintext()?.type == DisconnectRequest.id)
        #expect(client.readToEnd().isEmpty)
        // Nothing listens on the address once stop returns.
        #expect(!RawClient.isListening(port: server.port, host: 0x7F00_0024))
    }

    @Test func aNoiseClientWithTheKeyIsServed() throws {
        let key = EncryptionKey(bytes: NoiseVector.psk)
        let (server, recorder, _) = makeServer { $0.key = key }
        defer { server.stop() }
        let client = RawClient(port: server.port)
        var initiator = NoiseInitiator(psk: NoiseVector.psk)
        client.send([0x01, 0x00, 0x00] + noiseFrame([0x00] + initiator.first()))
        #expect(client.readNoise() == [0x01] + Array("kitchen-gw".utf8) + [0] + Array("aabbccddeeff".utf8) + [0])
        let handshake = try #require(client.readNoise())
        #expect(handshake.first == 0x00)
        let transport = initiator.read(Array(handshake.dropFirst()))
        var (send, receive) = try #require(transport)
        let payload = hello.serialized()
        client.send(noiseFrame(send.seal(bigEndian16(1) + bigEndian16(payload.count) + payload)!))
        let frame = try #require(client.readNoise())
        let opened = receive.open(frame[...])
        let reply = try #require(opened)
        #expect(reply.prefix(2) == [0, UInt8(HelloResponse.id)])
        #expect(try HelloResponse(serialized: Array(reply.dropFirst(4))).name == "test")
        #expect(recorder.received.withLock { $0 } == [.hello(hello)])
    }

    @Test func aNoiseClientWithAnotherKeyIsToldAndTheNextOneServed() throws {
        let (server, recorder, log) = makeServer { $0.key = EncryptionKey(bytes: NoiseVector.psk) }
        defer { server.stop() }
        let wrong = RawClient(port: server.port)
        var stranger = NoiseInitiator(psk: [UInt8](repeating: 1, count: 32))
        wrong.send([0x01, 0x00, 0x00] + noiseFrame([0x00] + stranger.first()))
        #expect(wrong.readNoise()?.first == 0x01)  // the server hello
        #expect(wrong.readNoise() == [0x01] + Array("Handshake MAC failure".utf8))
        #expect(wrong.readToEnd().isEmpty)
        #expect(eventually { log.contains("has another encryption key") })

        let plain = RawClient(port: server.port)
        plain.send(plaintextFrame(hello))
        #expect(plain.readNoise() == [0x01] + Array("Bad indicator byte".utf8))

        let right = RawClient(port: server.port)
        var initiator = NoiseInitiator(psk: NoiseVector.psk)
        right.send([0x01, 0x00, 0x00] + noiseFrame([0x00] + initiator.first()))
        _ = right.readNoise()
        let handshake = try #require(right.readNoise())
        let transport = initiator.read(Array(handshake.dropFirst()))
        #expect(transport != nil)
        #expect(recorder.ended.withLock { $0.count } == 2)
    }
}
