import CDBus
import Glibc
import Synchronization
import Dispatch
import Threading

/// A connection to a message bus, driven by one thread of its own.
///
/// libdbus is touched only on that thread: it waits in `poll` on the connection's watches and
/// an eventfd, handles libdbus timeouts, and runs jobs that other threads enqueue (building and
/// sending messages). Replies complete Swift continuations; signals and incoming method calls
/// go to handlers, which run on the connection's thread and must return quickly. FIELD-NOTES
/// explains why: a blocking call beside a thread in `read_write_dispatch` deadlocks.
public final class Connection: Sendable {
    private let core: Core
    /// Calls waiting for a reply at once; the system bus refuses more than 128 per connection
    /// (`max_replies_per_connection`), so later calls wait here for one of 64 slots (one key,
    /// 64 wide), as long as their own timeout allows.
    private let callSlots = SerialQueues<Int>(width: 64, maxWaiting: .max, maxWait: nil)
    /// The unique name the bus gave this connection (":1.42").
    public let uniqueName: String

    /// Opens a private connection to the bus at `address` and registers with it.
    public init(address: String) throws(BusError) {
        _ = Connection.threadsInitialized
        var error = gw_dbus_error_init()
        defer { dbus_error_free(&error) }
        guard let raw = dbus_connection_open_private(address, &error) else {
            throw Connection.take(&error, fallback: "cannot connect to \(address)")
        }
        dbus_connection_set_exit_on_disconnect(raw, 0)
        guard dbus_bus_register(raw, &error) != 0 else {
            let failure = Connection.take(&error, fallback: "cannot register with the bus at \(address)")
            dbus_connection_close(raw)
            dbus_connection_unref(raw)
            throw failure
        }
        uniqueName = dbus_bus_get_unique_name(raw).map { String(cString: $0) } ?? ""
        core = Core(raw)
        core.start()
    }

    /// The system bus: `DBUS_SYSTEM_BUS_ADDRESS`, or the standard socket.
    public static var systemBusAddress: String {
        if let env = getenv("DBUS_SYSTEM_BUS_ADDRESS"), env.pointee != 0 { return String(cString: env) }
        return "unix:path=/run/dbus/system_bus_socket"
    }

    deinit { _ = core.close() }

    /// Sends a method call and waits for its reply. An error reply is thrown as `BusError`.
    public func call(_ message: Message, timeout: Duration = .seconds(25)) async throws(BusError) -> Message {
        let ms = Int32(clamping: timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)
        let reply = try await callSlots.run(0, refused: { Self.refusal($0, timeout) }) { () async throws(BusError) -> Message in
            let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<Message, BusError>, Never>) in
                core.enqueue { $0.sendWithReply(message, timeoutMs: max(ms, 1), continuation) }
            }
            return try result.get()
        }
        if let error = reply.error { throw error }
        return reply
    }

    /// A call that never got a slot: cancelled while it waited.
    private static func refusal(_ refusal: SerialQueues<Int>.Refusal, _ timeout: Duration) -> BusError {
        BusError(name: "org.freedesktop.DBus.Error.NoReply", message: "the call was not sent (\(refusal)); 64 calls were waiting for replies")
    }

    /// Sends a message that expects no reply: a signal, or the reply to an incoming call.
    /// A message that cannot be built is reported to `onError` of the caller by a thrown error.
    public func send(_ message: Message) throws(BusError) {
        try Marshal.check(message)
        core.enqueue { core in
            guard !core.isClosed, let raw = try? Marshal.build(message) else { return }
            dbus_connection_send(core.raw, raw, nil)
            dbus_message_unref(raw)
        }
    }

    /// Routes the signals that `rule` matches to `handler` (on the connection's thread).
    /// The handler is registered before the bus is asked, so no signal is missed.
    @discardableResult
    public func subscribe(_ rule: MatchRule, _ handler: @escaping @Sendable (Message) -> Void) async throws(BusError) -> SubscriptionID {
        let ruleString = try rule.ruleString()
        let id = core.addSubscription(rule, handler)
        do {
            _ = try await call(.methodCall(destination: "org.freedesktop.DBus", path: ObjectPath(trusted: "/org/freedesktop/DBus"),
                                           interface: "org.freedesktop.DBus", member: "AddMatch", [.string(ruleString)]))
        } catch {
            core.removeSubscription(id)
            throw error
        }
        return id
    }

    /// Stops routing a subscription's signals (the bus rule stays until the connection closes).
    public func unsubscribe(_ id: SubscriptionID) { core.removeSubscription(id) }

    /// Stops routing a subscription's signals and asks the bus to stop sending what `rule` (the
    /// one it was made with) matches, without waiting for the answer: a rule left behind costs
    /// the bus and this side a message for every signal it matches.
    public func unsubscribe(_ id: SubscriptionID, rule: MatchRule) {
        core.removeSubscription(id)
        guard let ruleString = try? rule.ruleString() else { return }
        var message = Message.methodCall(destination: "org.freedesktop.DBus", path: ObjectPath(trusted: "/org/freedesktop/DBus"),
                                         interface: "org.freedesktop.DBus", member: "RemoveMatch", [.string(ruleString)])
        message.noReplyExpected = true
        try? send(message)
    }

    /// Receives every incoming method call (on the connection's thread). Without a handler the
    /// bus caller gets `UnknownMethod`. The handler answers later with `send(call.reply(...))`.
    public func setMethodCallHandler(_ handler: (@Sendable (Message) -> Void)?) {
        core.methodCallHandler.set(handler)
    }

    /// Called once when the bus connection is lost (not after `close()`).
    public func setDisconnectHandler(_ handler: (@Sendable () -> Void)?) {
        if let handler {
            core.disconnectHandler.set { @Sendable _ in handler() }
        } else {
            core.disconnectHandler.set(nil)
        }
    }

    /// Asks the bus for a well-known name; fails unless this connection becomes its owner.
    public func requestName(_ name: String) async throws(BusError) {
        guard Validate.busName(name) else { throw .invalidArgs("invalid bus name \"\(name)\"") }
        let reply = try await call(.methodCall(destination: "org.freedesktop.DBus", path: ObjectPath(trusted: "/org/freedesktop/DBus"),
                                               interface: "org.freedesktop.DBus", member: "RequestName",
                                               [.string(name), .uint32(UInt32(GW_DBUS_NAME_FLAG_DO_NOT_QUEUE))]))
        guard reply.body.first?.integer == Int(GW_DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER) else {
            throw BusError(name: "org.freedesktop.DBus.Error.AccessDenied", message: "the name \(name) is already owned")
        }
    }

    /// Gives up a well-known name (bluetoothd exiting, as the simulator plays it).
    public func releaseName(_ name: String) async throws(BusError) {
        guard Validate.busName(name) else { throw .invalidArgs("invalid bus name \"\(name)\"") }
        _ = try await call(.methodCall(destination: "org.freedesktop.DBus", path: ObjectPath(trusted: "/org/freedesktop/DBus"),
                                       interface: "org.freedesktop.DBus", member: "ReleaseName", [.string(name)]))
    }

    /// Runs `body` on the connection's thread once it has run the jobs queued before: proof that
    /// the thread turns (a watchdog's check). After the connection closed, at once on this thread.
    public func onConnectionThread(_ body: @escaping @Sendable () -> Void) {
        core.enqueue { _ in body() }
    }

    /// Whether the bus connection is still up.
    public var isConnected: Bool { !core.lost.load(ordering: .acquiring) }

    /// Closes the connection and stops its thread. Calls still waiting fail with `Disconnected`.
    /// Waits at most 5 s for the thread (a handler that does not return holds it): false if it
    /// had not ended by then; it closes the connection when it does.
    @discardableResult
    public func close() -> Bool { core.close() }

    private static let threadsInitialized: Bool = dbus_threads_init_default() != 0

    static func take(_ error: inout DCError, fallback: String) -> BusError {
        guard dbus_error_is_set(&error) != 0 else { return BusError(name: "org.freedesktop.DBus.Error.Failed", message: fallback) }
        return BusError(name: error.name.map { String(cString: $0) } ?? "org.freedesktop.DBus.Error.Failed",
                         message: error.message.map { String(cString: $0) } ?? fallback)
    }
}

typealias DCError = CDBus.DBusError

public struct SubscriptionID: Hashable, Sendable { let value: Int }

/// Everything that lives on the connection's thread. `@unchecked Sendable`: the fields marked
/// "loop thread" are touched only there; the rest are behind Mutex or Atomic.
private final class Core: @unchecked Sendable {
    let raw: OpaquePointer
    private let wakeFD: Int32
    private let jobs = Mutex<(items: [@Sendable (Core) -> Void], closed: Bool)>(([], false))
    let stopping = Atomic<Bool>(false)
    let lost = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)
    private let loopThread = Mutex<pthread_t?>(nil)
    /// The same, readable without a lock by libdbus's callbacks (0 until the thread runs).
    private let loopThreadID = Atomic<UInt>(0)
    var onLoopThread: Bool { UInt(pthread_self()) == loopThreadID.load(ordering: .acquiring) }
    private let subscriptions = Mutex<(next: Int, items: [Int: (MatchRule, @Sendable (Message) -> Void)])>((0, [:]))
    let methodCallHandler = HandlerSlot<Message>()
    let disconnectHandler = HandlerSlot<Void>()

    // loop thread
    private var watches: [OpaquePointer] = []
    private var timeouts: [OpaquePointer: ContinuousClock.Instant] = [:]
    private var pending: Set<ObjectIdentifier> = []
    private var pendingBoxes: [ObjectIdentifier: PendingBox] = [:]

    init(_ raw: OpaquePointer) {
        self.raw = raw
        wakeFD = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
    }

    func start() {
        let context = Unmanaged.passUnretained(self).toOpaque()
        dbus_connection_set_watch_functions(raw, { watch, data in
            Core.from(data).watches.append(watch!); return 1
        }, { watch, data in
            Core.from(data).watches.removeAll { $0 == watch }
        }, { _, _ in }, context, nil)
        dbus_connection_set_timeout_functions(raw, { timeout, data in
            Core.from(data).arm(timeout!); return 1
        }, { timeout, data in
            Core.from(data).timeouts[timeout!] = nil
        }, { timeout, data in
            Core.from(data).arm(timeout!)
        }, context, nil)
        // libdbus asks for a wake-up at every message it queues; on the loop thread (where it
        // reads them all) that would be a write per message and one more poll round for nothing:
        // the loop dispatches what it read before it polls again.
        dbus_connection_set_wakeup_main_function(raw, { data in
            let core = Core.from(data)
            if !core.onLoopThread { core.wake() }
        }, context, nil)
        dbus_connection_add_filter(raw, { _, message, data in
            Core.from(data).filter(message!)
        }, context, nil)
        Threads.start(name: "gattway-dbus") { [self] in
            loopThread.withLock { $0 = pthread_self() }
            loopThreadID.store(UInt(pthread_self()), ordering: .releasing)
            run()
        }
    }

    static func from(_ data: UnsafeMutableRawPointer?) -> Core {
        Unmanaged<Core>.fromOpaque(data!).takeUnretainedValue()
    }

    /// Runs `job` on the loop thread; once the loop has ended, runs it at once on this
    /// thread, where `isClosed` is true and the job must not touch libdbus.
    func enqueue(_ job: @escaping @Sendable (Core) -> Void) {
        let queued = jobs.withLock { j -> Bool in
            if j.closed { return false }
            j.items.append(job)
            return true
        }
        if queued { wake() } else { job(self) }
    }

    var isClosed: Bool { jobs.withLock { $0.closed } }

    private func wake() {
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
    }

    private func arm(_ timeout: OpaquePointer) {
        if dbus_timeout_get_enabled(timeout) != 0 {
            timeouts[timeout] = .now + .milliseconds(Int(dbus_timeout_get_interval(timeout)))
        } else {
            timeouts[timeout] = nil
        }
    }

    // MARK: loop

    private func run() {
        while !stopping.load(ordering: .acquiring) {
            let batch = jobs.withLock { j -> [@Sendable (Core) -> Void] in defer { j.items.removeAll() }; return j.items }
            for job in batch { job(self) }
            while dbus_connection_dispatch(raw) == DBUS_DISPATCH_DATA_REMAINS {}
            if stopping.load(ordering: .acquiring) { break }

            var fds = [pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)]
            var polled: [OpaquePointer] = []
            for watch in watches where dbus_watch_get_enabled(watch) != 0 {
                let flags = dbus_watch_get_flags(watch)
                var events: Int16 = 0
                if flags & GW_DBUS_WATCH_READABLE != 0 { events |= Int16(POLLIN) }
                if flags & GW_DBUS_WATCH_WRITABLE != 0 { events |= Int16(POLLOUT) }
                fds.append(pollfd(fd: dbus_watch_get_unix_fd(watch), events: events, revents: 0))
                polled.append(watch)
            }
            var waitMs: Int32 = -1
            if let next = timeouts.values.min() {
                let left = ContinuousClock.now.duration(to: next)
                waitMs = left <= .zero ? 0 : Int32(clamping: left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000 + 1)
            }
            let n = poll(&fds, nfds_t(fds.count), waitMs)
            if n < 0 && errno != EINTR { break }
            if fds[0].revents != 0 {
                var counter: UInt64 = 0
                _ = read(wakeFD, &counter, 8)
            }
            for (i, watch) in polled.enumerated() where fds[i + 1].revents != 0 {
                guard watches.contains(watch) else { continue }
                let r = Int32(fds[i + 1].revents)
                var flags: UInt32 = 0
                if r & Int32(POLLIN) != 0 { flags |= GW_DBUS_WATCH_READABLE }
                if r & Int32(POLLOUT) != 0 { flags |= GW_DBUS_WATCH_WRITABLE }
                if r & Int32(POLLERR) != 0 { flags |= GW_DBUS_WATCH_ERROR }
                if r & Int32(POLLHUP) != 0 { flags |= GW_DBUS_WATCH_HANGUP }
                dbus_watch_handle(watch, flags)
            }
            let now = ContinuousClock.now
            for (timeout, deadline) in timeouts where deadline <= now {
                guard timeouts[timeout] != nil else { continue }
                timeouts[timeout] = now + .milliseconds(Int(dbus_timeout_get_interval(timeout)))
                dbus_timeout_handle(timeout)
            }
        }
        // Anyone still waiting for a reply hears that the connection is gone.
        let leftover = jobs.withLock { j -> [@Sendable (Core) -> Void] in
            j.closed = true
            defer { j.items.removeAll() }
            return j.items
        }
        for job in leftover { job(self) }
        for box in pendingBoxes.values { box.complete(.failure(.disconnected())) }
        pendingBoxes.removeAll()
        dbus_connection_close(raw)
        dbus_connection_unref(raw)
        Glibc.close(wakeFD)
        finished.signal()
    }

    func close() -> Bool {
        guard !stopping.exchange(true, ordering: .acquiringAndReleasing) else { return true }
        wake()
        // From the loop thread itself (a handler closing its own connection) there is nothing to wait for.
        if let loop = loopThread.withLock({ $0 }), pthread_equal(loop, pthread_self()) != 0 { return true }
        return finished.wait(timeout: .now() + 5) == .success
    }

    // MARK: calls

    func sendWithReply(_ message: Message, timeoutMs: Int32,
                       _ continuation: CheckedContinuation<Result<Message, BusError>, Never>) {
        let box = PendingBox(continuation)
        if isClosed { return box.complete(.failure(.disconnected())) }
        let built: OpaquePointer
        do { built = try Marshal.build(message) } catch { return box.complete(.failure(error)) }
        defer { dbus_message_unref(built) }
        var call: OpaquePointer?
        guard dbus_connection_send_with_reply(raw, built, &call, timeoutMs) != 0, let call else {
            return box.complete(.failure(.disconnected()))
        }
        let key = ObjectIdentifier(box)
        pendingBoxes[key] = box
        let context = Unmanaged.passRetained(CallContext(core: self, key: key)).toOpaque()
        dbus_pending_call_set_notify(call, { call, data in
            let context = Unmanaged<CallContext>.fromOpaque(data!).takeUnretainedValue()
            let core = context.core
            guard let box = core.pendingBoxes.removeValue(forKey: context.key) else { return }
            if let reply = dbus_pending_call_steal_reply(call) {
                box.complete(.success(Marshal.parse(reply)))
                dbus_message_unref(reply)
            } else {
                box.complete(.failure(.disconnected()))
            }
        }, context, { data in
            Unmanaged<CallContext>.fromOpaque(data!).release()
        })
        dbus_pending_call_unref(call)
    }

    // MARK: incoming

    func addSubscription(_ rule: MatchRule, _ handler: @escaping @Sendable (Message) -> Void) -> SubscriptionID {
        subscriptions.withLock { s in
            s.next += 1
            s.items[s.next] = (rule, handler)
            return SubscriptionID(value: s.next)
        }
    }

    func removeSubscription(_ id: SubscriptionID) {
        _ = subscriptions.withLock { $0.items.removeValue(forKey: id.value) }
    }

    private func filter(_ raw: OpaquePointer) -> DBusHandlerResult {
        let type = dbus_message_get_type(raw)
        if type == Int32(GW_DBUS_MESSAGE_TYPE_SIGNAL) {
            if dbus_message_is_signal(raw, "org.freedesktop.DBus.Local", "Disconnected") != 0 {
                if !lost.exchange(true, ordering: .acquiringAndReleasing) {
                    disconnectHandler(())
                }
                return DBUS_HANDLER_RESULT_HANDLED
            }
            let message = Marshal.parse(raw)
            // The table itself (a reference), not a filtered copy: no array per signal.
            let items = subscriptions.withLock { $0.items }
            for (rule, handler) in items.values where rule.matches(message) { handler(message) }
            // File descriptors a signal carried were duplicated for us; no signal handler keeps one.
            message.body.forEach(Value.closeDescriptors)
            return DBUS_HANDLER_RESULT_NOT_YET_HANDLED
        }
        if type == Int32(GW_DBUS_MESSAGE_TYPE_METHOD_CALL), methodCallHandler.isSet, methodCallHandler(Marshal.parse(raw)) {
            return DBUS_HANDLER_RESULT_HANDLED
        }
        return DBUS_HANDLER_RESULT_NOT_YET_HANDLED
    }
}

/// One waiting call; completes its continuation exactly once (loop thread only).
private final class PendingBox: @unchecked Sendable {
    private var continuation: CheckedContinuation<Result<Message, BusError>, Never>?
    init(_ continuation: CheckedContinuation<Result<Message, BusError>, Never>) { self.continuation = continuation }
    func complete(_ result: Result<Message, BusError>) {
        continuation?.resume(returning: result)
        continuation = nil
    }
}

private final class CallContext {
    unowned let core: Core
    let key: ObjectIdentifier
    init(core: Core, key: ObjectIdentifier) { self.core = core; self.key = key }
}
