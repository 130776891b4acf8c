import Dispatch
import Synchronization

// What every fuzz target shares: its bytes read as several inputs, properties stated, and async
// code run from libFuzzer's synchronous callback. A target is one file:
//
//     @_cdecl("LLVMFuzzerTestOneInput")
//     public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
//         var input = FuzzInput(data, size)
//         ...
//         return 0
//     }

/// Stops the run when a property does not hold: libFuzzer takes the trap as a crash and saves
/// the input that caused it.
public func require(_ holds: Bool, _ property: @autoclosure () -> String, file: StaticString = #fileID, line: UInt = #line) {
    if !holds { fatalError("property violated: \(property())", file: file, line: line) }
}

/// The fuzzer's bytes, taken from the front. Running out is not an error: what is left is empty.
public struct FuzzInput {
    private var bytes: ArraySlice<UInt8>

    public init(_ data: UnsafePointer<UInt8>?, _ size: Int) {
        bytes = data.map { Array(UnsafeBufferPointer(start: $0, count: size))[...] } ?? []
    }

    public var isEmpty: Bool { bytes.isEmpty }

    /// One byte, 0 when none is left.
    public mutating func byte() -> UInt8 {
        bytes.popFirst() ?? 0
    }

    /// A choice among `count` cases.
    public mutating func choice(_ count: Int) -> Int {
        Int(byte()) % count
    }

    /// Up to `count` bytes.
    public mutating func bytes(_ count: Int) -> [UInt8] {
        let taken = bytes.prefix(count)
        bytes = bytes.dropFirst(count)
        return Array(taken)
    }

    /// A short string: a length byte, then that many bytes read as UTF-8 (invalid sequences
    /// repaired, as the transport repairs what clients send).
    public mutating func string() -> String {
        String(decoding: bytes(Int(byte())), as: UTF8.self)
    }

    /// All that is left.
    public mutating func rest() -> [UInt8] {
        defer { bytes = [] }
        return Array(bytes)
    }

    /// All that is left, as UTF-8 text.
    public mutating func restString() -> String {
        String(decoding: rest(), as: UTF8.self)
    }
}

/// Runs `work` to its end and returns its result; the fuzz callback is synchronous.
public func blocking<T: Sendable>(_ work: @escaping @Sendable () async -> T) -> T {
    let result = Mutex<T?>(nil)
    let done = DispatchSemaphore(value: 0)
    Task {
        let value = await work()
        result.withLock { $0 = value }
        done.signal()
    }
    done.wait()
    return result.withLock { $0! }
}

/// Whether all of `text`, read as Unicode scalars, matches `pattern`: the oracles state in a
/// regular expression what the parsers under test accept by hand.
public func matches<Output>(_ text: String, _ pattern: Regex<Output>) -> Bool {
    (try? pattern.matchingSemantics(.unicodeScalar).wholeMatch(in: text)) != nil
}
