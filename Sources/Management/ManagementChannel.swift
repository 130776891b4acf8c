import CLinux
import Dispatch
import Glibc
import Synchronization
import Threading

/// The kernel's Bluetooth management socket, read on a thread of its own: every device event of
/// an LE device for the controllers in use goes, parsed, to the handler (`ManagementEvent`: an
/// advertisement with its scan response as the controller reported it, a link up, a link down).
/// Frames that do not fit the format are dropped and counted, never handed on. The controllers
/// the kernel has are kept current from its Index Added and Index Removed events.
///
/// `open` opens the kernel's socket; `init(reading:)` reads any descriptor that delivers one
/// frame per read (a socketpair in tests, the simulator's stream).
public final class ManagementChannel: Sendable {
    /// What the channel has read, since it opened.
    public struct Counters: Sendable, Equatable {
        /// Frames read.
        public var frames = 0
        /// Device events handed to the handler.
        public var delivered = 0
        /// Frames dropped: their header or parameters did not fit the format.
        public var badFrames = 0
        /// Device events handed on without their advertising (EIR) data, which was malformed.
        public var droppedAdvertisingData = 0
        /// Device events for other controllers than those in use.
        public var otherControllers = 0
        /// Device events of classic (BR/EDR) devices, not handed on.
        public var classicDevices = 0
        /// Index Added and Index Removed events, and the kernel's lists of its controllers.
        public var controllerEvents = 0
        /// Well-formed frames of other kinds (settings changes, answers nobody waited for, ...).
        public var otherEvents = 0
        /// Answers to the commands this channel sent (`command`).
        public var answers = 0
        /// Reads the socket refused.
        public var readErrors = 0

        public init() {}

        mutating func add(_ other: Counters) {
            frames += other.frames
            delivered += other.delivered
            badFrames += other.badFrames
            droppedAdvertisingData += other.droppedAdvertisingData
            otherControllers += other.otherControllers
            classicDevices += other.classicDevices
            otherEvents += other.otherEvents
            answers += other.answers
            readErrors += other.readErrors
            controllerEvents += other.controllerEvents
        }
    }

    private let reader: Reader
    private let done = DispatchSemaphore(value: 0)
    private let closed = Atomic<Bool>(false)

    /// Reads `fd` (the channel owns it from now on, and makes it non-blocking) on a thread of its
    /// own until `close`.
    ///
    /// - Parameters:
    ///   - controllers: whose events are handed on (hci0 is index 0).
    ///   - known: the controllers the kernel has (its answer to Read Controller Index List), kept
    ///     current from the Index Added and Index Removed events read (`kernelControllers`).
    ///   - log: a line now and then (the first bad frames, the end of the socket).
    ///   - ended: called on the channel's thread when the socket ends by itself (closed at the
    ///     other end, a read error), not after `close`.
    ///   - controllersChanged: called on the channel's thread when `kernelControllers` may have
    ///     changed, after it did.
    ///   - handler: called on the channel's thread for each device event, in the order read: it
    ///     must return soon (hand the event to a bounded queue).
    public init(reading fd: Int32, controllers: Set<ControllerIndex>, known: Set<ControllerIndex> = [],
                log: @escaping @Sendable (String) -> Void = { _ in }, ended: @escaping @Sendable (String) -> Void = { _ in },
                controllersChanged: @escaping @Sendable (ControllerNews) -> Void = { _ in },
                handler: @escaping @Sendable (ManagementEvent) -> Void) throws(ChannelError) {
        let wake = eventfd(0, Int32(EFD_CLOEXEC) | Int32(EFD_NONBLOCK))
        let flags = fcntl(fd, F_GETFL)
        guard wake >= 0, flags >= 0, fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0 else {
            let error = ChannelError(call: wake < 0 ? "eventfd" : "fcntl", errno: errno)
            if wake >= 0 { Glibc.close(wake) }
            Glibc.close(fd)
            throw error
        }
        let reader = Reader(fd: fd, wake: wake, controllers: controllers, known: known, log: log, ended: ended,
                            controllersChanged: controllersChanged, handler: handler)
        self.reader = reader
        let done = self.done
        Threads.start(name: "mgmt-socket") {
            reader.run()
            done.signal()
        }
    }

    deinit { close() }

    /// Hands on only the events of `controllers` from now on (adapters that came or went).
    public func setControllers(_ controllers: Set<ControllerIndex>) {
        reader.controllers.withLock { $0 = controllers }
    }

    public var counters: Counters { reader.counters.withLock { $0 } }

    /// The controllers the kernel has, as far as this channel has read.
    public var kernelControllers: Set<ControllerIndex> { reader.known.withLock { $0 } }

    /// What the channel read about the kernel's controllers (`controllersChanged`).
    public enum ControllerNews: Sendable, Equatable {
        /// An Index Added or Index Removed.
        case index(IndexEvent)
        /// The kernel's answer to `askControllers` (its list, or a failure: then the set is as it was).
        case listed
    }

    /// Asks the kernel for its controllers (Read Controller Index List); `controllersChanged` tells
    /// when the answer came. It comes after every Index Added or Removed the kernel sent before
    /// it: a barrier for a controller that BlueZ shows and the channel has not yet read of. False
    /// when the request could not be sent (the channel is closed).
    public func askControllers() -> Bool {
        reader.send(Frame.command(.readIndexList)) == nil
    }

    /// A command's answer: Command Complete's status and return parameters, or a Command Status
    /// that failed (no parameters).
    public struct Answer: Sendable, Equatable {
        public var status: Status
        public var parameters: [UInt8]

        public init(status: Status, parameters: [UInt8] = []) {
            self.status = status
            self.parameters = parameters
        }
    }

    /// Sends `opcode` for `controller` without waiting for its answer (at shutdown); why not,
    /// if it was not sent.
    public func post(_ opcode: Opcode, controller: ControllerIndex, parameters: [UInt8] = []) -> ChannelError? {
        reader.send(Frame.command(opcode, controller: controller, parameters: parameters))
    }

    /// Sends `opcode` for `controller` and waits for its answer, at most `timeout`. The kernel
    /// answers each socket's commands in the order sent; several may wait at once.
    public func command(_ opcode: Opcode, controller: ControllerIndex, parameters: [UInt8] = [],
                        timeout: Duration = .seconds(5)) async throws(ChannelError) -> Answer {
        let id = reader.nextCommand.add(1, ordering: .relaxed).newValue
        let frame = Frame.command(opcode, controller: controller, parameters: parameters)
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<Answer, ChannelError>, Never>) in
            reader.pending.withLock { $0.append(Reader.Waiting(id: id, opcode: opcode, controller: controller, continuation: continuation)) }
            if let refused = reader.send(frame) {
                reader.answer(id: id, .failure(refused))
                return
            }
            Task { [reader] in
                try? await Task.sleep(for: timeout)
                reader.answer(id: id, .failure(ChannelError("the kernel did not answer \(opcode) for \(controller) within \(timeout)")))
            }
        }
        return try result.get()
    }

    /// Stops reading and closes the socket; the handler is not called after it returns (when
    /// called from the handler itself, after the handler returns).
    public func close() {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        reader.stop()
        reader.answerAll(ChannelError("the management channel closed"))
        if reader.isCurrentThread { return }
        done.wait()
        reader.closeDescriptors()
    }
}

/// Why the channel could not start.
public struct ChannelError: Error, Sendable, CustomStringConvertible {
    public let description: String

    init(call: String, errno code: Int32) {
        description = "\(call): \(String(cString: strerror(code)))"
    }

    public init(_ description: String) {
        self.description = description
    }
}

extension ManagementChannel {
    /// The channel's thread and what it shares with the others.
    final class Reader: Sendable {
        let fd: Int32
        let wake: Int32
        let controllers: Mutex<Set<ControllerIndex>>
        let known: Mutex<Set<ControllerIndex>>
        let counters = Mutex(Counters())
        let log: @Sendable (String) -> Void
        let ended: @Sendable (String) -> Void
        let controllersChanged: @Sendable (ControllerNews) -> Void
        let handler: @Sendable (ManagementEvent) -> Void
        private let stopping = Atomic<Bool>(false)
        /// `close` came from the handler: the thread closes the descriptors as it ends.
        private let closeOnExit = Atomic<Bool>(false)
        private let thread = Mutex<pthread_t?>(nil)
        /// Set once the descriptors are closed; sends hold it, so that none goes to a closed
        /// (or reused) descriptor.
        private let descriptorsClosed = Mutex(false)
        /// Commands waiting for their answers, oldest first.
        let pending = Mutex<[Waiting]>([])
        let nextCommand = Atomic<Int>(0)

        struct Waiting {
            let id: Int
            let opcode: Opcode
            let controller: ControllerIndex
            let continuation: CheckedContinuation<Result<Answer, ChannelError>, Never>
        }

        init(fd: Int32, wake: Int32, controllers: Set<ControllerIndex>, known: Set<ControllerIndex>,
             log: @escaping @Sendable (String) -> Void, ended: @escaping @Sendable (String) -> Void,
             controllersChanged: @escaping @Sendable (ControllerNews) -> Void, handler: @escaping @Sendable (ManagementEvent) -> Void) {
            self.fd = fd
            self.wake = wake
            self.controllers = Mutex(controllers)
            self.known = Mutex(known)
            self.log = log
            self.ended = ended
            self.controllersChanged = controllersChanged
            self.handler = handler
        }

        var isCurrentThread: Bool {
            thread.withLock { $0.map { pthread_equal($0, pthread_self()) != 0 } ?? false }
        }

        /// Asks the thread to end. Its descriptors are still open: the caller closes them once the
        /// thread has ended, or the thread does as it ends when the caller is the thread itself.
        func stop() {
            stopping.store(true, ordering: .releasing)
            if isCurrentThread {
                closeOnExit.store(true, ordering: .relaxed)
            } else {
                eventfd_write(wake, 1)
            }
        }

        func closeDescriptors() {
            descriptorsClosed.withLock { closed in
                guard !closed else { return }
                closed = true
                Glibc.close(fd)
                Glibc.close(wake)
            }
        }

        /// Sends one frame; why not, if it was not sent whole.
        func send(_ frame: [UInt8]) -> ChannelError? {
            descriptorsClosed.withLock { closed -> ChannelError? in
                guard !closed, !isStopping else { return ChannelError("the management channel closed") }
                while true {
                    let sent = Glibc.send(fd, frame, frame.count, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT))
                    if sent == frame.count { return nil }
                    if sent < 0 && errno == EINTR { continue }
                    return sent < 0 ? ChannelError(call: "send", errno: errno) : ChannelError("send: \(sent) of \(frame.count) bytes")
                }
            }
        }

        /// Resumes the command `id` with `result`, unless it was answered already.
        func answer(id: Int, _ result: Result<Answer, ChannelError>) {
            let waiting = pending.withLock { list -> Waiting? in
                guard let i = list.firstIndex(where: { $0.id == id }) else { return nil }
                return list.remove(at: i)
            }
            waiting?.continuation.resume(returning: result)
        }

        /// Resumes every waiting command with `error` (the channel ends).
        func answerAll(_ error: ChannelError) {
            for waiting in pending.withLock({ list in defer { list = [] }; return list }) {
                waiting.continuation.resume(returning: .failure(error))
            }
        }

        /// An answer for the oldest command waiting for it; false when none waits.
        private func answered(_ opcode: Opcode, _ controller: ControllerIndex, _ answer: Answer) -> Bool {
            let waiting = pending.withLock { list -> Waiting? in
                guard let i = list.firstIndex(where: { $0.opcode == opcode && $0.controller == controller }) else { return nil }
                return list.remove(at: i)
            }
            waiting?.continuation.resume(returning: .success(answer))
            return waiting != nil
        }

        private var isStopping: Bool { stopping.load(ordering: .acquiring) }

        /// How long after a read the next ones wait, gathering frames (at most this much added
        /// latency, under load only).
        static let gatherMilliseconds: Int32 = 4

        func run() {
            thread.withLock { $0 = pthread_self() }
            let buffers = Buffers()
            defer {
                buffers.deallocate()
                if closeOnExit.load(ordering: .relaxed) { closeDescriptors() }
            }
            var fds = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0), pollfd(fd: wake, events: Int16(POLLIN), revents: 0)]
            while !isStopping {
                guard poll(&fds, 2, -1) >= 0 else {
                    if errno == EINTR { continue }
                    return end("poll: \(String(cString: strerror(errno)))")
                }
                if fds[1].revents != 0 { return }
                if fds[0].revents & Int16(POLLIN) != 0 {
                    if let reason = drain(buffers) { return end(reason) }
                    // Under a stream of advertisements, a wake-up (poll, a read that finds
                    // nothing, two context switches) for every frame costs more than the frame:
                    // the frames of the next few milliseconds are read together. A lone frame
                    // is still read at once; `stop` ends the wait.
                    var wakeOnly = [fds[1]]
                    if poll(&wakeOnly, 1, Self.gatherMilliseconds) > 0 { return }
                } else if fds[0].revents != 0 {
                    return end("the socket hung up")
                }
            }
        }

        private func end(_ reason: String) {
            answerAll(ChannelError("the management socket ended: \(reason)"))
            guard !isStopping else { return }
            log("management socket: \(reason); no more events from it")
            ended(reason)
        }

        /// Where `recvmmsg` puts the frames of one call: `count` buffers of a whole frame's size
        /// (address space; only what frames fill is touched).
        final class Buffers {
            static let count = 16
            let memory = UnsafeMutableRawBufferPointer.allocate(byteCount: Frame.maxSize * count, alignment: 8)
            let iovecs = UnsafeMutablePointer<iovec>.allocate(capacity: count)
            let headers = UnsafeMutablePointer<gw_mmsghdr>.allocate(capacity: count)
            /// The events of one call's frames, handed on once all are counted.
            var events: [Delivery] = []

            init() {
                for i in 0..<Self.count {
                    iovecs[i] = iovec(iov_base: memory.baseAddress! + i * Frame.maxSize, iov_len: Frame.maxSize)
                    headers[i] = gw_mmsghdr()
                }
                events.reserveCapacity(Self.count)
            }

            /// Ready for a call: each header points at its buffer, as long as a frame.
            func reset() {
                for i in 0..<Self.count {
                    headers[i].msg_hdr = msghdr()
                    headers[i].msg_hdr.msg_iov = iovecs + i
                    headers[i].msg_hdr.msg_iovlen = 1
                }
            }

            func frame(_ i: Int) -> UnsafeRawBufferPointer {
                UnsafeRawBufferPointer(start: iovecs[i].iov_base, count: Int(headers[i].msg_len))
            }

            func deallocate() {
                memory.deallocate()
                iovecs.deallocate()
                headers.deallocate()
            }
        }

        /// Reads frames until none is left, up to `Buffers.count` a call; why the socket ended,
        /// if it did.
        private func drain(_ buffers: Buffers) -> String? {
            while !isStopping {
                buffers.reset()
                let count = gw_recvmmsg(fd, buffers.headers, UInt32(Buffers.count))
                if count > 0 {
                    if let reason = handOn(buffers, count: Int(count)) { return reason }
                    if isStopping { return nil }
                    // Fewer than asked: none was left at that moment (poll tells of the next).
                    if Int(count) < Buffers.count { return nil }
                    continue
                }
                if count == 0 { return "closed at the other end" }
                let code = errno
                switch code {
                case EAGAIN, EWOULDBLOCK: return nil
                case EINTR: continue
                default:
                    counters.withLock { $0.readErrors += 1 }
                    // Out of memory for a moment: the next frames may read.
                    if code == ENOBUFS || code == ENOMEM { return nil }
                    return "read: \(String(cString: strerror(code)))"
                }
            }
            return nil
        }

        /// The `count` frames one call read: parsed and counted, then handed on, in order. News of
        /// the controllers ends a run, so that it applies (the handler may change the controllers
        /// in use) before the next frames are filtered. Why the socket ended, if it did.
        private func handOn(_ buffers: Buffers, count: Int) -> String? {
            var next = 0
            while next < count {
                let wanted = controllers.withLock { $0 }
                var tally = Counters()
                var closedAtTheOtherEnd = false
                buffers.events.removeAll(keepingCapacity: true)
                while next < count {
                    // An empty datagram is the end of a stream socket's peer, as recv's 0 is.
                    if buffers.headers[next].msg_len == 0 {
                        closedAtTheOtherEnd = true
                        break
                    }
                    let delivery = take(buffers.frame(next), controllers: wanted, counters: &tally)
                    next += 1
                    guard let delivery else { continue }
                    buffers.events.append(delivery)
                    if case .news = delivery { break }
                }
                // Counted before they are handed on: a handler sees counters that include its event.
                counters.withLock { $0.add(tally) }
                for delivery in buffers.events {
                    // The handler may have closed the channel: nothing more after that.
                    guard !isStopping else { return nil }
                    switch delivery {
                    case .device(let event): handler(event)
                    case .news(let news): controllersChanged(news)
                    }
                }
                if closedAtTheOtherEnd { return "closed at the other end" }
            }
            return nil
        }

        /// What a frame hands on, in the order read.
        enum Delivery {
            case device(ManagementEvent)
            case news(ControllerNews)
        }

        /// One frame: parsed, filtered, counted (into `counters`); what to hand on, if anything.
        private func take(_ frame: UnsafeRawBufferPointer, controllers: Set<ControllerIndex>,
                          counters c: inout Counters) -> Delivery? {
            c.frames += 1
            let event: Event
            do {
                event = try Event(parsing: frame)
            } catch {
                c.badFrames += 1
                let bad = counters.withLock { $0.badFrames } + c.badFrames
                if isPowerOfTen(bad) { log("management socket: dropped a frame (\(bad) so far): \(error)") }
                return nil
            }
            if let news = controllerNews(event) {
                c.controllerEvents += 1
                return .news(news)
            }
            guard let device = ManagementEvent(event) else {
                var isAnswer = false
                switch event {
                case .commandComplete(let opcode, let status, let controller, let parameters):
                    isAnswer = answered(opcode, controller, Answer(status: status, parameters: parameters))
                case .commandStatus(let opcode, let status, let controller) where status != .success:
                    // A success status means "pending": the Command Complete follows.
                    isAnswer = answered(opcode, controller, Answer(status: status))
                default:
                    break
                }
                if isAnswer { c.answers += 1 } else { c.otherEvents += 1 }
                return nil
            }
            guard controllers.contains(device.controller) else {
                c.otherControllers += 1
                return nil
            }
            guard device.addressType != .bredr else {
                c.classicDevices += 1
                return nil
            }
            if device.advertisingDataDropped { c.droppedAdvertisingData += 1 }
            c.delivered += 1
            return .device(device)
        }

        /// What `event` says of the kernel's controllers, applied to `known`; nil when nothing.
        private func controllerNews(_ event: Event) -> ControllerNews? {
            switch event {
            case .index(let index):
                known.withLock {
                    switch index {
                    case .added(let c): $0.insert(c)
                    case .removed(let c): $0.remove(c)
                    }
                }
                return ControllerNews.index(index)
            case .commandComplete(.readIndexList, let status, _, let parameters):
                if status == .success, let list = IndexList(parameters: parameters) { known.withLock { $0 = Set(list.controllers) } }
                return ControllerNews.listed
            default:
                return nil
            }
        }

        /// 1, 10, 100, ...: when to log a count that may grow fast.
        private func isPowerOfTen(_ n: Int) -> Bool {
            var n = n
            while n >= 10 && n % 10 == 0 { n /= 10 }
            return n == 1
        }
    }
}
