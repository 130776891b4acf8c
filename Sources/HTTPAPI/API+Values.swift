import GatewayCore
import BLE
import HTTPServer

/// Reading values, for pollers too: `?maxAge=` answers a young enough value kept from an
/// earlier read or a notification, `?connect=auto` connects a device that is not connected.
extension API {
    /// A day: longer than any sensible poll interval, short enough to stay a number people read.
    static let maximumMaxAge = 86_400.0

    /// `GET …/value` of a characteristic or a descriptor. Checks, in order: the parameters
    /// (400); with `connect=auto` the connect; with `maxAge` a kept value; else the read.
    func readValue(_ request: Request, _ target: ValueTarget) async throws -> ValueBody {
        let id = try Self.deviceID(request)
        let format = try Parse.format(request.query["format"])
        let offset = try Self.offset(request)
        let maxAge = try Self.maxAge(request)
        let connect = try Self.connectAuto(request)
        if connect { try await autoConnections.connectIfNeeded(id) }
        // Kept values are whole values: a read from an offset always asks the device.
        if offset == 0, let maxAge, maxAge > .zero, let kept = try await gateway.keptValue(id, target, maxAge: maxAge) {
            return ValueBody(kept.value, format: format, source: kept.origin == .read ? .cache : .notification,
                             age: values.now - kept.at)
        }
        return ValueBody(try await gateway.readNow(id, target, offset: offset), format: format, source: .read, age: .zero)
    }

    /// `?maxAge=SECONDS`: nil when absent (always read), as 0 is.
    static func maxAge(_ request: Request) throws(BLEError) -> Duration? {
        guard let text = request.query["maxAge"] else { return nil }
        guard let seconds = Double(text), seconds.isFinite, (0...maximumMaxAge).contains(seconds) else {
            throw BLEError(.invalidParameters, "maxAge must be a number of seconds from 0 to \(Int(maximumMaxAge)), not \"\(text)\"")
        }
        return .milliseconds(Int((seconds * 1000).rounded()))
    }

    /// `?connect=auto`: whether to connect a device that is not connected.
    static func connectAuto(_ request: Request) throws(BLEError) -> Bool {
        guard let text = request.query["connect"] else { return false }
        guard text == "auto" else {
            throw BLEError(.invalidParameters, "connect must be auto, not \"\(text)\"")
        }
        return true
    }
}
