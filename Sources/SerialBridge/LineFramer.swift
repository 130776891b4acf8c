/// Splits a byte stream into lines: each `\n` ends one (a `\r` before it is dropped, as serial
/// terminals send `\r\n`); a line longer than `maxLine` bytes goes out in pieces of `maxLine`, so a
/// device that never sends a line end cannot grow it without bound.
package struct LineFramer: Sendable {
    package let maxLine: Int
    private var pending: [UInt8] = []

    package init(maxLine: Int) {
        self.maxLine = max(1, maxLine)
    }

    /// The lines `bytes` completes, in order; what is left waits for the next bytes.
    package mutating func feed(_ bytes: some Sequence<UInt8>) -> [[UInt8]] {
        var lines: [[UInt8]] = []
        for byte in bytes {
            if byte == 0x0A {
                if pending.last == 0x0D { pending.removeLast() }
                lines.append(pending)
                pending.removeAll(keepingCapacity: true)
            } else {
                // A full line goes out when more comes that is not its end.
                if pending.count == maxLine {
                    lines.append(pending)
                    pending.removeAll(keepingCapacity: true)
                }
                pending.append(byte)
            }
        }
        return lines
    }
}
