import BLE
import Testing
@testable import BlueZ

@Suite struct HearingTests {
    let id = BluetoothAddress("F0:00:00:00:00:02")!

    @Test func aDeviceListenedForIsHeardOnlyAfterListeningBegan() async {
        let hearing = Hearing()
        hearing.heard(id)  // before anyone listens: not kept
        hearing.listen(id)
        #expect(hearing.listening)
        #expect(!hearing.wasHeard(id))
        #expect(await hearing.wait(id, within: .milliseconds(20)) == false, "not heard yet: the wait times out")
        hearing.heard(id)
        #expect(hearing.wasHeard(id))
        #expect(await hearing.wait(id, within: .seconds(10)) == true, "heard already: at once")
        hearing.listen(id)
        #expect(!hearing.wasHeard(id), "listening again forgets what was heard before")
    }

    @Test func aWaiterHearsTheAdvertisementOrTheEndOfListening() async {
        let hearing = Hearing()
        hearing.listen(id)
        async let heard = hearing.wait(id, within: .seconds(10))
        while !hearing.hasWaiters(id) { await Task.yield() }
        hearing.heard(id)
        #expect(await heard == true)

        hearing.listen(id)
        async let ended = hearing.wait(id, within: .seconds(10))
        while !hearing.hasWaiters(id) { await Task.yield() }
        hearing.forget(id)
        #expect(await ended == false)
        #expect(!hearing.listening)
        #expect(await hearing.wait(id, within: .seconds(10)) == false, "nobody listens for it: false at once")
    }
}
