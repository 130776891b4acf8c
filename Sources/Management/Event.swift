/// One event frame from the management socket, typed.
public enum Event: Sendable, Equatable {
    /// A command this socket sent is done: its status and its return parameters.
    case commandComplete(Opcode, Status, controller: ControllerIndex, parameters: [UInt8])
    /// A command this socket sent failed early (or is pending: success).
    case commandStatus(Opcode, Status, controller: ControllerIndex)
    /// A controller the kernel came to have, or lost.
    case index(IndexEvent)
    /// An advertisement or scan response heard (Device Found, or an advertisement monitor's).
    case deviceFound(DeviceFound)
    /// A link to a device came up.
    case deviceConnected(DeviceConnected)
    /// A link to a device went down.
    case deviceDisconnected(DeviceDisconnected)
    /// A well-formed frame of a kind this module does not read.
    case other(EventCode, controller: ControllerIndex)

    /// Reads one datagram as the socket delivered it. Nothing in it is trusted: a frame whose
    /// header or parameters do not fit the format throws, and nothing of it is kept.
    public init(parsing frame: UnsafeRawBufferPointer) throws(FrameError) {
        var reader = ByteReader(frame)
        guard let code = reader.u16(), let index = reader.u16(), let length = reader.u16() else {
            throw .short(count: frame.count)
        }
        guard Int(length) == reader.remaining else {
            throw .lengthMismatch(declared: Int(length), carried: reader.remaining)
        }
        let event = EventCode(rawValue: code), controller = ControllerIndex(index)
        switch event {
        case .commandComplete, .commandStatus:
            guard let opcode = reader.u16(), let status = reader.u8() else {
                throw .malformed(event, "\(length) bytes, fewer than an opcode and a status")
            }
            if event == .commandStatus {
                guard reader.remaining == 0 else { throw .malformed(event, "\(reader.remaining) bytes after the status") }
                self = .commandStatus(Opcode(rawValue: opcode), Status(rawValue: status), controller: controller)
            } else {
                self = .commandComplete(Opcode(rawValue: opcode), Status(rawValue: status), controller: controller,
                                        parameters: Array(reader.rest()))
            }
        case .indexAdded, .indexRemoved:
            self = .index(try IndexEvent(event, controller: controller, parameters: reader))
        case .deviceFound, .advertisementMonitorDeviceFound:
            self = .deviceFound(try DeviceFound(event, controller: controller, parameters: &reader))
        case .deviceConnected:
            self = .deviceConnected(try DeviceConnected(controller: controller, parameters: &reader))
        case .deviceDisconnected:
            self = .deviceDisconnected(try DeviceDisconnected(controller: controller, parameters: &reader))
        default:
            self = .other(event, controller: controller)
        }
    }

    /// `init(parsing:)` over an array.
    public init(parsing frame: [UInt8]) throws(FrameError) {
        let parsed = frame.withUnsafeBytes { bytes in Result { () throws(FrameError) in try Event(parsing: bytes) } }
        self = try parsed.get()
    }
}
