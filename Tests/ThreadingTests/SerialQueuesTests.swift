import Synchronization
import Testing
import Threading

private typealias Queues = SerialQueues<String>
private typealias Refusal = Queues.Refusal

/// How many bodies run at once, and the most that ever did.
private final class Concurrency: Sendable {
    private let counts = Mutex((now: 0, most: 0))

    func during<T>(_ body: () async -> T) async -> T {
        counts.withLock { $0.now += 1; $0.most = max($0.most, $0.now) }
        defer { counts.withLock { $0.now -= 1 } }
        return await body()
    }

    var now: Int { counts.withLock { $0.now } }
    var most: Int { counts.withLock { $0.most } }
}

/// The numbers bodies record, in the order they ran.
private final class Record: Sendable {
    private let numbers = Mutex<[Int]>([])
    func append(_ number: Int) { numbers.withLock { $0.append(number) } }
    var all: [Int] { numbers.withLock { $0 } }
}

/// Runs `body` on `key`, the refusal as a value.
private func attempt(_ queues: Queues, _ key: String, _ body: () async -> Int) async -> Result<Int, Refusal> {
    do throws(Refusal) {
        return .success(try await queues.run(key, refused: { $0 }) { () async throws(Refusal) -> Int in await body() })
    } catch {
        return .failure(error)
    }
}

/// Yields until `condition` holds; false if it still does not after 10 s (a failure, not a pace).
private func eventually(_ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + .seconds(10)
    while !condition() {
        if ContinuousClock.now > deadline { return false }
        await Task.yield()
    }
    return true
}

/// Starts work on `key` that holds a slot until `gate` opens (its result: 0); returns once it runs.
private func hold(_ queues: Queues, _ key: String, until gate: Gate) async -> Task<Result<Int, Refusal>, Never> {
    let started = Gate()
    let task = Task {
        await attempt(queues, key) {
            started.open()
            await gate.wait()
            return 0
        }
    }
    await started.wait()
    return task
}

/// Starts work on `key` and returns once it waits in the key's line.
private func enqueue(_ queues: Queues, _ key: String,
                     _ body: @escaping @Sendable () async -> Int) async -> Task<Result<Int, Refusal>, Never> {
    let before = queues.waiting(key)
    let task = Task { await attempt(queues, key, body) }
    #expect(await eventually { queues.waiting(key) == before + 1 }, "work on \(key) never started waiting")
    return task
}

@Suite struct SerialQueuesTests {
    @Test func oneKeyRunsInArrivalOrderOneAtATime() async {
        let queues = Queues(maxWaiting: 64)
        let gate = Gate(), record = Record(), concurrency = Concurrency()
        var tasks = [await hold(queues, "a", until: gate)]
        for i in 1...50 {
            tasks.append(await enqueue(queues, "a") {
                await concurrency.during {
                    record.append(i)
                    await Task.yield()  // a chance for a second body to overlap, were one let in
                    return i
                }
            })
        }
        #expect(record.all.isEmpty)
        gate.open()
        for (i, task) in tasks.enumerated() { #expect(await task.value == .success(i)) }
        #expect(record.all == Array(1...50))
        #expect(concurrency.most == 1)
        #expect(queues.keys == 0)
    }

    /// No barging: a finished body hands its slot to the first waiter before anyone else can take it.
    @Test func newcomerWaitsBehindTheWaiterTheSlotWasHandedTo() async {
        let queues = Queues()
        let firstGate = Gate(), secondGate = Gate(), record = Record()
        let first = await hold(queues, "a", until: firstGate)
        let second = await enqueue(queues, "a") {
            await secondGate.wait()
            record.append(1)
            return 1
        }
        firstGate.open()
        #expect(await first.value == .success(0))
        // The slot is the second's now, whether or not its body has started.
        let newcomer = await enqueue(queues, "a") { record.append(2); return 2 }
        secondGate.open()
        #expect(await second.value == .success(1))
        #expect(await newcomer.value == .success(2))
        #expect(record.all == [1, 2])
        #expect(queues.keys == 0)
    }

    @Test func differentKeysRunConcurrently() async {
        let queues = Queues()
        let gate = Gate()
        let a = await hold(queues, "a", until: gate)
        #expect(await attempt(queues, "b") { 2 } == .success(2))  // while "a" is held
        #expect(queues.keys == 1)
        gate.open()
        #expect(await a.value == .success(0))
        #expect(queues.keys == 0)
    }

    @Test func cancelledWaiterLeavesTheLineAtOnce() async {
        let queues = Queues()
        let gate = Gate(), record = Record()
        let first = await hold(queues, "a", until: gate)
        let waiters = [
            await enqueue(queues, "a") { record.append(1); return 1 },
            await enqueue(queues, "a") { record.append(2); return 2 },
            await enqueue(queues, "a") { record.append(3); return 3 },
        ]
        waiters[1].cancel()
        #expect(await waiters[1].value == .failure(.cancelled))  // while the first body is still held
        #expect(queues.waiting("a") == 2)
        gate.open()
        #expect(await first.value == .success(0))
        #expect(await waiters[0].value == .success(1))
        #expect(await waiters[2].value == .success(3))
        #expect(record.all == [1, 3])
        #expect(queues.keys == 0)
    }

    @Test func alreadyCancelledTaskRunsOnAFreeSlotAndIsRefusedOnABusyOne() async {
        let queues = Queues()
        let free = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await attempt(queues, "a") { 1 }
        }
        #expect(await free.value == .success(1))

        let gate = Gate()
        let first = await hold(queues, "a", until: gate)
        let busy = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await attempt(queues, "a") { 2 }
        }
        #expect(await busy.value == .failure(.cancelled))
        #expect(queues.waiting("a") == 0)
        gate.open()
        #expect(await first.value == .success(0))
        #expect(queues.keys == 0)
    }

    @Test func fullLineRefusesAtOnce() async {
        let queues = Queues(maxWaiting: 2)
        let gate = Gate()
        let first = await hold(queues, "a", until: gate)
        let waiters = [await enqueue(queues, "a") { 1 }, await enqueue(queues, "a") { 2 }]
        #expect(await attempt(queues, "a") { 3 } == .failure(.full(waiting: 2)))  // while the first is held
        #expect(queues.waiting("a") == 2)
        gate.open()
        #expect(await first.value == .success(0))
        #expect(await waiters[0].value == .success(1))
        #expect(await waiters[1].value == .success(2))
        #expect(queues.keys == 0)
    }

    /// The one test that waits on the clock: the time bound is the feature.
    @Test func waiterIsRefusedAfterMaxWait() async {
        let queues = Queues(maxWait: .milliseconds(50))
        let gate = Gate()
        let first = await hold(queues, "a", until: gate)
        let start = ContinuousClock.now
        #expect(await attempt(queues, "a") { 1 } == .failure(.timedOut(.milliseconds(50))))
        #expect(ContinuousClock.now - start >= .milliseconds(50))
        #expect(queues.waiting("a") == 0)
        gate.open()
        #expect(await first.value == .success(0))
        // The refused waiter took no slot with it: the key is free again.
        #expect(queues.keys == 0)
        #expect(await attempt(queues, "a") { 2 } == .success(2))
        #expect(queues.keys == 0)
    }

    @Test func idleKeysAreDropped() async {
        let queues = Queues()
        let gate = Gate()
        let held = [await hold(queues, "a", until: gate), await hold(queues, "b", until: gate)]
        let waiter = await enqueue(queues, "a") { 1 }
        #expect(queues.keys == 2)
        gate.open()
        for task in held { #expect(await task.value == .success(0)) }
        #expect(await waiter.value == .success(1))
        await withTaskGroup(of: Void.self) { group in
            for key in 0..<100 { group.addTask { _ = await attempt(queues, "k\(key)") { key } } }
        }
        #expect(queues.keys == 0)
        #expect(queues.waiting("a") == 0)
    }

    @Test func widthLetsThatManyRunAtOnce() async {
        let queues = Queues(width: 3)
        let gate = Gate(), concurrency = Concurrency()
        let tasks = (0..<10).map { i in
            Task {
                await attempt(queues, "all") {
                    await concurrency.during {
                        await gate.wait()
                        return i
                    }
                }
            }
        }
        #expect(await eventually { concurrency.now == 3 && queues.waiting("all") == 7 })
        #expect(concurrency.most == 3)
        gate.open()
        for (i, task) in tasks.enumerated() { #expect(await task.value == .success(i)) }
        #expect(concurrency.most == 3)
        #expect(queues.keys == 0)
    }

    @Test func typedErrorsPassThroughAndRefusalsMapThroughRefused() async {
        enum Failure: Error, Equatable { case body, refused(Refusal) }
        let queues = Queues(maxWaiting: 0)
        do throws(Failure) {
            _ = try await queues.run("a", refused: Failure.refused) { () async throws(Failure) -> Int in throw .body }
            Issue.record("the body's error was not thrown")
        } catch {
            #expect(error == .body)
        }

        let gate = Gate()
        let first = await hold(queues, "a", until: gate)
        do throws(Failure) {
            _ = try await queues.run("a", refused: Failure.refused) { () async throws(Failure) -> Int in 1 }
            Issue.record("a full line ran the body")
        } catch {
            #expect(error == .refused(.full(waiting: 0)))
        }
        gate.open()
        #expect(await first.value == .success(0))
        #expect(queues.keys == 0)
    }

    @Test func nonThrowingRunAnswersNilWhenRefused() async {
        let queues = Queues(maxWaiting: 0)
        #expect(await queues.run("a") { 1 } == 1)
        let gate = Gate()
        let first = await hold(queues, "a", until: gate)
        #expect(await queues.run("a") { 2 } == nil)
        gate.open()
        #expect(await first.value == .success(0))
    }

    /// An actor queues work on its own state: the body runs in the caller's isolation.
    @Test func bodyRunsInTheCallersIsolation() async {
        actor Counter {
            var count = 0
            func bump(_ queues: Queues) async {
                await queues.run("a") {
                    let before = count
                    await Task.yield()  // the actor is reentrant; the queue keeps bumps apart
                    count = before + 1
                }
            }
        }
        let queues = Queues(maxWaiting: 64)
        let counter = Counter()
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<50 { group.addTask { await counter.bump(queues) } }
        }
        #expect(await counter.count == 50)
        #expect(queues.keys == 0)
    }
}
