@testable import BlueZ
import Management
import Synchronization
import Testing

@Suite struct MonitorLedgerTests {
    /// The ledger's file, in memory.
    private final class File: Sendable {
        let text: Mutex<String?>
        init(_ text: String?) { self.text = Mutex(text) }
    }

    private func ledger(_ text: String?, boot: String = "b0") -> (MonitorLedger, File) {
        let file = File(text)
        let ledger = MonitorLedger(boot: boot, read: { file.text.withLock { $0 } }, write: { text in
            file.text.withLock { $0 = text }
            return nil
        })
        return (ledger, file)
    }

    @Test func writtenMonitorsAreReadBack() {
        let (ledger, file) = ledger(nil)
        #expect(ledger.load().isEmpty)
        let monitors: [ControllerIndex: Set<UInt16>] = [ControllerIndex(1): [3], ControllerIndex(0): [2, 1]]
        #expect(ledger.save(monitors) == nil)
        #expect(file.text.withLock { $0 } == "b0 hci0 1\nb0 hci0 2\nb0 hci1 3\n")
        #expect(ledger.load() == monitors)
    }

    @Test func anotherBootsMonitorsAndLinesThatDoNotParseAreLeftOut() {
        // A monitor of another boot went with it; a handle 0 means "every monitor" to the kernel.
        let (ledger, _) = ledger("b9 hci0 1\nb0 hci0 4\nb0 hci0 0\nb0 hciX 2\nb0 hci1\nb0 hci1 70000\n\nb0 hci2 5 extra\nb0 hci1 7\n")
        #expect(ledger.load() == [ControllerIndex(0): [4], ControllerIndex(1): [7]])
    }
}
