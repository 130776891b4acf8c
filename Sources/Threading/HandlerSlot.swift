import Synchronization

/// A callback that one side sets and any thread calls.
///
/// Not `Mutex<(@Sendable (T) -> Void)?>` read as `slot.withLock { $0 }?(value)`: the inout access
/// through the generic `withLock` stores the closure back wrapped in one more reabstraction thunk
/// on every call, so each call nests deeper than the last and after some 100 000 calls the stack
/// overflows (FIELD-NOTES; gattway died that way after ~15 000 events). Here the closure lives in
/// an immutable box: the lock only hands out the box's reference.
///
/// `callAsFunction` is inlinable, so that callers in other modules get it specialised: the
/// generic one looked up the box's type metadata at every call (a hash lookup under a lock, one
/// call per advertisement heard).
public final class HandlerSlot<Argument>: Sendable {
    @usableFromInline final class Box: Sendable {
        @usableFromInline let handler: @Sendable (Argument) -> Void
        init(_ handler: @escaping @Sendable (Argument) -> Void) { self.handler = handler }
    }

    @usableFromInline let box = Mutex<Box?>(nil)

    public init() {}

    /// Replaces the handler; nil removes it.
    public func set(_ handler: (@Sendable (Argument) -> Void)?) {
        let new = handler.map(Box.init)
        box.withLock { $0 = new }
    }

    /// Calls the handler, outside the slot's lock; false when none is set.
    @discardableResult @inlinable
    public func callAsFunction(_ argument: Argument) -> Bool {
        guard let current = box.withLock({ $0 }) else { return false }
        current.handler(argument)
        return true
    }

    public var isSet: Bool { box.withLock { $0 != nil } }
}
