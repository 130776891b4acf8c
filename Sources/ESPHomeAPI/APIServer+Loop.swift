import CLinux
import Glibc
import Sockets
import Synchronization

extension APIServer {
    /// The server's thread and its state, made on that thread and touched by it only (other
    /// threads reach it through the mailbox).
    final class Loop {
        /// epoll data of the eventfd and of the listening socket; clients' ids count from 2.
        static let wakeToken: UInt64 = 0
        static let listenerToken: UInt64 = 1
        /// Bytes read from one client per turn (edge-triggered: one that sends fast must not
        /// keep the others waiting).
        static let readBudget = 256 * 1024

        /// One client's connection state.
        final class Peer {
            let client: APIClient
            let fd: Int32
            var framing: Framing
            let accepted = ContinuousClock.now
            var lastHeard = ContinuousClock.now
            /// Its first message came (the handshake is over).
            var greeted = false
            var pinged = false
            var reading = true
            var closeDeadline: ContinuousClock.Instant?

            init(client: APIClient, fd: Int32, framing: Framing) {
                self.client = client
                self.fd = fd
                self.framing = framing
            }
        }

        enum Framing {
            case plaintext(PlaintextFraming)
            case noise(NoiseFraming)

            mutating func append(_ bytes: UnsafeRawBufferPointer) {
                switch self {
                case .plaintext(var framing):
                    framing.append(bytes)
                    self = .plaintext(framing)
                case .noise(var framing):
                    framing.append(bytes)
                    self = .noise(framing)
                }
            }

            mutating func next() throws(FramingError) -> FramingEvent? {
                switch self {
                case .plaintext(var framing):
                    defer { self = .plaintext(framing) }
                    return try framing.next()
                case .noise(var framing):
                    defer { self = .noise(framing) }
                    return try framing.next()
                }
            }
        }

        let configuration: APIServer.Configuration
        /// Kept until the thread ends (for the identity of new Noise clients).
        let server: APIServer
        let mailbox: Mailbox
        let listener: Int32
        let epoll: Int32
        let handler: any APIHandler
        let log: @Sendable (String) -> Void
        var peers: [UInt64: Peer] = [:]
        /// Clients that used their read budget with bytes still waiting (no new edge will come).
        var ready: Set<UInt64> = []
        var nextID: UInt64 = 2
        /// Accepting stopped for want of file descriptors; resumed when a client ends.
        var acceptPaused = false
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 1)

        init(configuration: APIServer.Configuration, server: APIServer, listener: Int32, epoll: Int32,
             handler: any APIHandler, log: @escaping @Sendable (String) -> Void) {
            self.configuration = configuration
            self.server = server
            mailbox = server.mailbox
            self.listener = listener
            self.epoll = epoll
            self.handler = handler
            self.log = log
            var event = epoll_event(events: EPOLLIN.rawValue, data: epoll_data_t(u64: Self.wakeToken))
            epoll_ctl(epoll, EPOLL_CTL_ADD, mailbox.wakeFD, &event)
            watchListener(true)
        }

        deinit {
            scratch.deallocate()
            close(epoll)
        }

        func run() {
            var events = [epoll_event](repeating: epoll_event(), count: 64)
            var running = true
            while running {
                let count = epoll_wait(epoll, &events, Int32(events.count), ready.isEmpty ? timeoutMilliseconds() : 0)
                guard count >= 0 else {
                    if errno == EINTR { continue }
                    fatalError("esphome-api: epoll_wait: \(String(cString: strerror(errno)))")
                }
                for event in events[..<Int(count)] {
                    switch event.data.u64 {
                    case Self.wakeToken:
                        running = runCommands()
                    case Self.listenerToken:
                        acceptClients()
                    case let id:
                        guard let peer = peers[id] else { continue }
                        if event.events & (EPOLLIN.rawValue | EPOLLRDHUP.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0 {
                            receive(peer)
                        }
                        if peers[id] != nil && event.events & EPOLLOUT.rawValue != 0 { flush(peer) }
                    }
                    if !running { break }
                }
                guard running else { break }
                for id in ready {
                    if let peer = peers[id] { receive(peer) } else { ready.remove(id) }
                }
                checkTimers()
            }
        }

        /// False once the server stops.
        private func runCommands() -> Bool {
            for command in mailbox.take() {
                switch command {
                case .attend(let id):
                    if let peer = peers[id] { flush(peer) }
                case .shutDown:
                    for peer in Array(peers.values) {
                        if peer.client.isReady { peer.client.send(DisconnectRequest()) }
                        _ = peer.client.flush(to: peer.fd)  // one try: nobody waits for a slow client now
                        end(peer, "gattway is stopping")
                    }
                    close(listener)  // before `stop` returns: the port is free again
                    return false
                }
            }
            return true
        }

        private func watchListener(_ on: Bool) {
            var event = epoll_event(events: EPOLLIN.rawValue, data: epoll_data_t(u64: Self.listenerToken))
            epoll_ctl(epoll, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, listener, &event)
        }

        private func acceptClients() {
            while true {
                let accepted: (fd: Int32, peer: String)
                switch TCPListener.accept(listener) {
                case .accepted(let fd, let name): accepted = (fd, name)
                case .none: return
                case .failed(let code):
                    if code == ECONNABORTED || code == EINTR { continue }
                    // Out of descriptors: the socket stays readable, so it is left alone until a client ends.
                    log("cannot accept a client: \(String(cString: strerror(code))); accepting again when one leaves")
                    acceptPaused = true
                    watchListener(false)
                    return
                }
                guard peers.count < configuration.maxClients else {
                    close(accepted.fd)
                    log("\(accepted.peer): refused: \(configuration.maxClients) clients are connected already")
                    continue
                }
                let id = nextID
                nextID += 1
                let mailbox = self.mailbox
                let client = APIClient(id: id, peer: accepted.peer, maxBuffered: configuration.maxBuffered) {
                    mailbox.post(.attend($0))
                }
                let framing: Framing
                if let key = configuration.key {
                    let identity = server.identity.withLock { $0 }
                    framing = .noise(NoiseFraming(psk: key.bytes, name: identity.name, mac: identity.macAddress,
                                                  maxPayload: configuration.maxPayload))
                } else {
                    framing = .plaintext(PlaintextFraming(maxPayload: configuration.maxPayload))
                    client.queueRaw([], ready: .plaintext)
                }
                var event = epoll_event(events: EPOLLIN.rawValue | EPOLLOUT.rawValue | EPOLLRDHUP.rawValue | EPOLLET.rawValue,
                                        data: epoll_data_t(u64: id))
                guard epoll_ctl(epoll, EPOLL_CTL_ADD, accepted.fd, &event) == 0 else {
                    log("\(accepted.peer): refused: epoll: \(String(cString: strerror(errno)))")
                    close(accepted.fd)
                    continue
                }
                peers[id] = Peer(client: client, fd: accepted.fd, framing: framing)
            }
        }

        /// Reads what the socket has and acts on it.
        private func receive(_ peer: Peer) {
            let id = peer.client.id
            var budget = Self.readBudget
            ready.remove(id)
            while peer.reading {
                guard budget > 0 else {
                    ready.insert(id)
                    break
                }
                let count = recv(peer.fd, scratch.baseAddress, scratch.count, 0)
                if count > 0 {
                    budget -= count
                    peer.lastHeard = .now
                    peer.pinged = false
                    peer.framing.append(UnsafeRawBufferPointer(rebasing: scratch[..<count]))
                    process(peer)
                } else if count == 0 {
                    return end(peer, "closed the connection")
                } else if errno == EINTR {
                    continue
                } else if errno == EAGAIN || errno == EWOULDBLOCK {
                    break
                } else {
                    return end(peer, "connection error: \(String(cString: strerror(errno)))")
                }
            }
            if peers[id] != nil { flush(peer) }
        }

        /// Hands the complete messages read so far to the handler.
        private func process(_ peer: Peer) {
            while peer.reading {
                let event: FramingEvent?
                do {
                    event = try peer.framing.next()
                } catch {
                    return fail(peer, error.reason, farewell: error.farewell)
                }
                switch event {
                case nil:
                    return
                case .reply(let bytes, let ready):
                    peer.client.queueRaw(bytes, ready: ready)
                case .message(let raw):
                    let message: ClientMessage
                    do {
                        message = try ClientMessage(type: raw.type, payload: raw.payload)
                    } catch {
                        return fail(peer, "sent a message of type \(raw.type) that is not protobuf (\(error))")
                    }
                    // What the door closed is not read further.
                    guard peer.client.state.withLock({ $0.closing == nil }) else {
                        peer.reading = false
                        return
                    }
                    if case .hello(let hello) = message { peer.client.noteHello(hello.clientInfo) }
                    peer.greeted = true
                    handler.received(message, from: peer.client)
                }
            }
        }

        /// The client broke the protocol: write `farewell`, then end it.
        private func fail(_ peer: Peer, _ reason: String, farewell: [UInt8] = []) {
            peer.client.queueRaw(farewell)
            peer.client.state.withLock { box in
                if box.closing == nil { box.closing = reason }
            }
            peer.reading = false
            flush(peer)
        }

        private func flush(_ peer: Peer) {
            switch peer.client.flush(to: peer.fd) {
            case .done(let closing?):
                end(peer, closing)
            case .done(nil):
                break
            case .blocked(let closing):
                if closing != nil && peer.closeDeadline == nil {
                    peer.reading = false
                    peer.closeDeadline = .now + configuration.closeTimeout
                }
            case .failed(let code):
                end(peer, "connection error: \(String(cString: strerror(code)))")
            }
        }

        /// Closes the socket, says why (the reason it was closing with, if it was) and tells the handler.
        private func end(_ peer: Peer, _ reason: String) {
            epoll_ctl(epoll, EPOLL_CTL_DEL, peer.fd, nil)
            close(peer.fd)
            let id = peer.client.id
            peers[id] = nil
            ready.remove(id)
            let why = peer.client.markEnded() ?? reason
            log("\(peer.client.peer)\(peer.client.info.map { " (\($0))" } ?? ""): \(why)")
            handler.ended(peer.client, reason: why)
            if acceptPaused {
                acceptPaused = false
                watchListener(true)
            }
        }

        /// The first deadline of a client: its close, its first message, or its next ping or drop.
        private func deadline(_ peer: Peer) -> ContinuousClock.Instant {
            if let close = peer.closeDeadline { return close }
            if !peer.greeted { return peer.accepted + configuration.handshakeTimeout }
            return peer.lastHeard + configuration.pingInterval * (peer.pinged ? 2 : 1)
        }

        private func checkTimers() {
            let now = ContinuousClock.now
            for peer in Array(peers.values) where deadline(peer) <= now {
                if peer.closeDeadline != nil {
                    end(peer, "did not take its last bytes in time")
                } else if !peer.greeted {
                    end(peer, "sent no message within \(configuration.handshakeTimeout)"
                        + (configuration.key != nil && !peer.client.isReady ? " (the handshake was not over)" : ""))
                } else if peer.pinged {
                    end(peer, "silent for \(configuration.pingInterval * 2), a ping unanswered")
                } else {
                    peer.pinged = true
                    peer.client.send(PingRequest())
                }
            }
        }

        /// Until the nearest deadline, -1 for none.
        private func timeoutMilliseconds() -> Int32 {
            guard let nearest = peers.values.map(deadline).min() else { return -1 }
            let (seconds, attoseconds) = (nearest - .now).components
            let milliseconds = seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
            return Int32(clamping: max(0, milliseconds))
        }
    }
}
