/// A controller the kernel came to have (set up and configured), or lost: Index Added (0x0004) or
/// Index Removed (0x0005), for that controller and without parameters (mgmt-api.txt). The kernel
/// sends them to every socket of the control channel from its bind (hci_sock.c enables them there),
/// bluetoothd's among them, which exports or withdraws the adapter once told.
public enum IndexEvent: Sendable, Equatable {
    case added(ControllerIndex)
    case removed(ControllerIndex)

    /// No parameters, and a controller: anything else is not one of these events.
    init(_ event: EventCode, controller: ControllerIndex, parameters reader: ByteReader) throws(FrameError) {
        guard reader.remaining == 0 else { throw .malformed(event, "\(reader.remaining) bytes, not 0") }
        guard controller != .none else { throw .malformed(event, "for no controller") }
        self = event == .indexAdded ? .added(controller) : .removed(controller)
    }

    public var controller: ControllerIndex {
        switch self {
        case .added(let c), .removed(let c): c
        }
    }

    /// The event as the kernel sends it.
    public var frame: [UInt8] {
        switch self {
        case .added(let c): Frame.encode(code: EventCode.indexAdded.rawValue, controller: c, parameters: [])
        case .removed(let c): Frame.encode(code: EventCode.indexRemoved.rawValue, controller: c, parameters: [])
        }
    }
}
