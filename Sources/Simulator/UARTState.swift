/// The serial side of a UART peripheral (`SimulatorConfiguration.UART`): its receive buffer,
/// what its UART drains and streams, and its counters. Time comes in as the seconds since the
/// last step, so that the rates hold however late the steps run.
struct UARTState: Sendable {
    /// nil: the device has no UART (writes and notifications are plain GATT).
    var settings: SimulatorConfiguration.UART?
    var counters = Counters()
    /// A write request whose bytes did not all fit: its response waits until they are in.
    var held: HeldWrite?
    /// The running steps' id; nil when none run (the UART has nothing to do).
    var pump: Int?
    var lastStep = ContinuousClock.now
    /// The receive buffer: `fifo[fifoHead...]`, bounded by `settings.bufferBytes`.
    private var fifo: [UInt8] = []
    private var fifoHead = 0
    /// Bytes the rates owe but a step has not yet sent (fractions of a byte).
    private var drainCredit = 0.0
    private var streamCredit = 0.0
    /// The stream's next line number, and what is left of the line being sent.
    private(set) var nextLine = 0
    private var lineLeft: ArraySlice<UInt8> = []

    /// Bytes, as `UARTStats` answers them.
    struct Counters: Sendable, Equatable {
        /// Written by the central and taken into the buffer.
        var received: UInt64 = 0
        /// Of writes without response, lost because the buffer was full.
        var dropped: UInt64 = 0
        /// Drained and sent back on tx (not counted: drained while notifications were off).
        var echoed: UInt64 = 0
        /// The stream's bytes sent on tx.
        var streamed: UInt64 = 0
    }

    struct HeldWrite: Sendable {
        /// The Device1 entry (the link) and its cached characteristic whose pending write this
        /// is, and that write's id.
        let device: Int
        let characteristic: Int
        let id: Int
        var remaining: ArraySlice<UInt8>
        /// ATT's transaction timeout: the central gives the link up then.
        let deadline: ContinuousClock.Instant
    }

    init(_ settings: SimulatorConfiguration.UART?) {
        self.settings = settings
    }

    var buffered: Int { fifo.count - fifoHead }
    var free: Int { max(0, (settings?.bufferBytes ?? 0) - buffered) }

    /// Something to drain, or a write waiting for room (the stream is the engine's to judge).
    var busy: Bool { buffered > 0 || held != nil }

    /// Takes into the buffer what fits of `bytes`; returns how many.
    mutating func take(_ bytes: ArraySlice<UInt8>) -> Int {
        let n = min(free, bytes.count)
        fifo.append(contentsOf: bytes.prefix(n))
        counters.received += UInt64(n)
        return n
    }

    /// A write without response: what does not fit is lost, as a module's FIFO overflows.
    mutating func takeCommand(_ bytes: [UInt8]) {
        let n = take(bytes[...])
        counters.dropped += UInt64(bytes.count - n)
    }

    /// Moves what fits of the held write into the buffer; true once all of it is in.
    mutating func feedHeld() -> Bool {
        guard var write = held else { return false }
        write.remaining = write.remaining.dropFirst(take(write.remaining))
        held = write
        return write.remaining.isEmpty
    }

    /// One step of `seconds`: what the UART drained, and the stream's bytes when `streaming`.
    mutating func step(seconds: Double, streaming: Bool) -> (drained: [UInt8], streamed: [UInt8]) {
        guard let settings else { return ([], []) }
        var drained: [UInt8] = []
        if buffered == 0 {
            drainCredit = 0  // an idle UART saves nothing up
        } else {
            drainCredit += Double(settings.drainBytesPerSecond) * seconds
            let n = min(Int(drainCredit), buffered)
            drainCredit -= Double(n)
            drained = Array(fifo[fifoHead..<fifoHead + n])
            fifoHead += n
            if fifoHead == fifo.count || (fifoHead >= 4096 && fifoHead * 2 >= fifo.count) {
                fifo.removeFirst(fifoHead)
                fifoHead = 0
            }
        }
        guard streaming, settings.streamBytesPerSecond > 0 else {
            streamCredit = 0
            return (drained, [])
        }
        streamCredit += Double(settings.streamBytesPerSecond) * seconds
        var streamed: [UInt8] = []
        let n = Int(streamCredit)
        streamCredit -= Double(n)
        while streamed.count < n {
            if lineLeft.isEmpty {
                lineLeft = UARTState.line(nextLine)[...]
                nextLine = (nextLine + 1) % 1_000_000
            }
            let piece = lineLeft.prefix(n - streamed.count)
            streamed += piece
            lineLeft = lineLeft.dropFirst(piece.count)
        }
        return (drained, streamed)
    }

    /// Empties the buffer (the UART removed); the counters and the stream's place stay.
    mutating func clear() {
        fifo = []
        fifoHead = 0
        held = nil
        drainCredit = 0
        streamCredit = 0
    }

    /// The stream's line `n`: "uart 000123 abcdefghijklmnopqrstuvwxyz\n" (39 bytes), so that a
    /// reader sees a gap in the numbers.
    static func line(_ n: Int) -> [UInt8] {
        let digits = String(n)
        return Array(("uart " + String(repeating: "0", count: max(0, 6 - digits.count)) + digits
                      + " abcdefghijklmnopqrstuvwxyz\n").utf8)
    }
}
