import BLE
import DBus
import Threading

/// The one table from BlueZ's D-Bus errors to CoreBluetooth codes.
///
/// BlueZ reports most failures as `org.bluez.Error.<Name>` with a text; the same name means
/// different things by its text (`Failed: le-connection-abort-by-local` vs `Failed: Not
/// connected`), so each rule matches a name and, optionally, a text. The first matching rule
/// wins. The original error stays in `detail`.
public enum ErrorMapping {
    /// What was being done; a few errors mean different things for a device and an attribute.
    public enum Context: Sendable { case adapter, device, attribute }

    public struct Rule: Sendable {
        public let name: String
        /// Matches when the error's text contains this (case-insensitive); nil matches any text.
        public let text: String?
        public let context: Context?
        public let code: BLEError.Code
        public let message: String
    }

    private static func rule(_ name: String, _ text: String? = nil, in context: Context? = nil,
                             _ code: CBErrorCode, _ message: String) -> Rule {
        Rule(name: name, text: text, context: context, code: .cb(code), message: message)
    }
    private static func rule(_ name: String, _ text: String? = nil, in context: Context? = nil,
                             att code: ATTErrorCode, _ message: String) -> Rule {
        Rule(name: name, text: text, context: context, code: .att(code), message: message)
    }

    static let bluez = "org.bluez.Error."
    static let dbus = "org.freedesktop.DBus.Error."

    /// The table, in docs/api.md (Errors). `Failed: Operation failed with ATT error: 0xNN` is handled
    /// before it: the peer's own ATT code passes through.
    public static let rules: [Rule] = [
        rule(bluez + "Failed", "le-connection-abort-by-local", .connectionFailed, "the connection attempt was aborted locally"),
        rule(bluez + "Failed", "le-connection-abort-by-remote", .connectionFailed, "the peripheral aborted the connection"),
        rule(bluez + "Failed", "le-connection-refused", .connectionFailed, "the peripheral refused the connection"),
        rule(bluez + "Failed", "le-connection-gatt-browsing", .connectionFailed, "service discovery failed while connecting"),
        rule(bluez + "Failed", "le-connection-busy", .connectionFailed, "the adapter is busy with another connection attempt"),
        rule(bluez + "Failed", "le-connection-concurrent-connection-limit", .connectionLimitReached, "the adapter has no free connection slot"),
        rule(bluez + "Failed", "le-connection-timeout", .connectionTimeout, "the peripheral did not answer the connection request"),
        rule(bluez + "Failed", "page-timeout", .connectionTimeout, "the peripheral did not answer the connection request"),
        // What the kernel's socket errors become in bluetoothd's answer to Connect: the kernel holds
        // a link (or an attempt) to the device already (EBUSY, EALREADY), or the link ended while
        // it was being made (ECONNABORTED, ECONNRESET, ECONNREFUSED, ETIMEDOUT).
        rule(bluez + "Failed", "Input/output error", in: .device, .connectionFailed, "BlueZ could not make the link (a stale one may be left)"),
        rule(bluez + "Failed", "Operation already in progress", in: .device, .connectionFailed, "a connection attempt to the device is still under way"),
        rule(bluez + "Failed", "Device or resource busy", in: .device, .connectionFailed, "the kernel holds a link to the device already"),
        rule(bluez + "Failed", "Software caused connection abort", in: .device, .connectionFailed, "the link ended while it was being made"),
        rule(bluez + "Failed", "Connection reset by peer", in: .device, .connectionFailed, "the link ended while it was being made"),
        rule(bluez + "Failed", "Connection refused", in: .device, .connectionFailed, "the connection was refused"),
        rule(bluez + "Failed", "Connection timed out", in: .device, .connectionTimeout, "the peripheral did not answer the connection request"),
        rule(bluez + "Failed", "Not connected", .notConnected, "the peripheral is not connected"),
        rule(bluez + "NotConnected", nil, .notConnected, "the peripheral is not connected"),
        rule(bluez + "NotPermitted", "Maximum advertisements reached", in: .adapter, .outOfSpace,
             "the adapter sends as many advertisements at once as it can (its SupportedInstances)"),
        rule(bluez + "NotPermitted", "Read not permitted", att: .readNotPermitted, "the characteristic cannot be read"),
        rule(bluez + "NotPermitted", "Write not permitted", att: .writeNotPermitted, "the characteristic cannot be written"),
        rule(bluez + "NotPermitted", "Not paired", att: .insufficientAuthentication, "the attribute needs pairing"),
        rule(bluez + "NotPermitted", nil, att: .insufficientAuthorization, "the operation is not permitted"),
        rule(bluez + "InvalidArguments", "Invalid offset", att: .invalidOffset, "the offset is beyond the value"),
        rule(bluez + "InvalidArguments", "Invalid Length", att: .invalidAttributeValueLength, "the value has an invalid length"),
        rule(bluez + "InvalidArguments", nil, .invalidParameters, "BlueZ rejected the arguments"),
        rule(bluez + "NotAuthorized", nil, att: .insufficientAuthorization, "the peripheral requires authorization"),
        rule(bluez + "NotSupported", nil, in: .attribute, att: .requestNotSupported, "the peripheral does not support this request"),
        rule(bluez + "NotSupported", nil, .operationNotSupported, "BlueZ does not support this operation"),
        rule(bluez + "ImproperlyConfigured", nil, att: ATTErrorCode(rawValue: 0xFD), "the client characteristic configuration is improperly configured"),
        rule(bluez + "AuthenticationTimeout", nil, .encryptionTimedOut, "pairing timed out"),
        rule(bluez + "AuthenticationFailed", nil, att: .insufficientAuthentication, "pairing failed"),
        rule(bluez + "AuthenticationCanceled", nil, .operationCancelled, "pairing was cancelled"),
        rule(bluez + "AuthenticationRejected", nil, att: .insufficientAuthentication, "pairing was rejected"),
        rule(bluez + "DoesNotExist", nil, .unknownDevice, "BlueZ does not know this device"),
        rule(bluez + "NotReady", nil, .unknown, "the adapter is not ready (powered off?)"),
        rule(bluez + "InProgress", nil, in: .device, .connectionFailed, "BlueZ is still busy with an earlier attempt on the device"),
        rule(bluez + "InProgress", nil, .unknown, "BlueZ is busy with the same operation"),
        rule(bluez + "AlreadyConnected", nil, in: .device, .connectionFailed, "BlueZ counts the device as connected already"),
        rule(bluez + "AlreadyConnected", nil, .unknown, "already connected"),
        rule(dbus + "UnknownObject", nil, in: .device, .unknownDevice, "BlueZ does not know this device"),
        rule(dbus + "UnknownObject", nil, in: .attribute, .invalidHandle, "the attribute no longer exists"),
        rule(dbus + "UnknownObject", nil, .unknown, "BlueZ does not know this object"),
        rule(dbus + "NoReply", nil, .connectionTimeout, "BlueZ did not answer in time"),
        rule(dbus + "Timeout", nil, .connectionTimeout, "BlueZ did not answer in time"),
        rule(dbus + "ServiceUnknown", nil, .unknown, "bluetoothd (org.bluez) is not running"),
        rule(dbus + "NameHasNoOwner", nil, .unknown, "bluetoothd (org.bluez) is not running"),
        rule(dbus + "AccessDenied", nil, .unknown, "the D-Bus policy does not allow gattway to talk to org.bluez"),
        rule(dbus + "Disconnected", nil, .unknown, "the D-Bus connection is closed"),
        rule(bluez + "Failed", nil, .unknown, "BlueZ reported a failure"),
    ]

    /// Maps a D-Bus error to the CoreBluetooth error a client sees.
    public static func map(_ error: BusError, context: Context? = nil) -> BLEError {
        let detail = error.description
        if let att = attCode(in: error) {
            return BLEError(att: att, "the peripheral answered with ATT error 0x\(hex(att.rawValue)) (\(att.name))", detail: detail)
        }
        for rule in rules where rule.name == error.name {
            if let text = rule.text, !error.message.lowercased().contains(text.lowercased()) { continue }
            if let wanted = rule.context, wanted != context { continue }
            switch rule.code {
            case .cb(let code): return BLEError(code, rule.message, detail: detail)
            case .att(let code): return BLEError(att: code, rule.message, detail: detail)
            }
        }
        return BLEError(.unknown, "unexpected D-Bus error", detail: detail)
    }

    /// `Operation failed with ATT error: 0x0e` → 0x0E.
    static func attCode(in error: BusError) -> ATTErrorCode? {
        let marker = "att error: 0x"
        let text = error.message.lowercased()
        guard error.name == bluez + "Failed", let start = text.firstRange(of: marker) else { return nil }
        let digits = text[start.upperBound...].prefix { $0.isHexDigit }
        guard let value = UInt8(digits, radix: 16) else { return nil }
        return ATTErrorCode(rawValue: value)
    }

    private static func hex(_ v: UInt8) -> String {
        let s = String(v, radix: 16, uppercase: true)
        return s.count == 1 ? "0" + s : s
    }
}

// MARK: - The other way: this side's answers to BlueZ

extension ErrorMapping {
    /// The error gattway's GATT application answers a central's request with, for the ATT error
    /// the client chose. bluetoothd (5.66, `dbus_error_to_att_ecode` in src/gatt-database.c)
    /// turns each name back into one ATT code; `NotPermitted` becomes read- or write-not-permitted
    /// as the request was, and any other name (`Failed` included) an application error 0x80 or
    /// unlikely error 0x0E: the codes without a name of their own cannot reach the central as they are.
    public static let attReplies: [(ATTErrorCode, String)] = [
        (.readNotPermitted, "NotPermitted"),
        (.writeNotPermitted, "NotPermitted"),
        (.insufficientAuthorization, "NotAuthorized"),
        (.invalidOffset, "InvalidOffset"),
        (.invalidAttributeValueLength, "InvalidValueLength"),
        (.requestNotSupported, "NotSupported"),
    ]

    /// The D-Bus error reply for `code`.
    public static func reply(for code: ATTErrorCode) -> BusError {
        let name = attReplies.first { $0.0 == code }?.1 ?? "Failed"
        return BusError(name: bluez + name, message: "ATT error 0x\(hex(code.rawValue)) (\(code.name))")
    }
}

extension BLEError {
    /// A queue that would not take an operation: busy (503, retry later) or cancelled.
    init(refusal: SerialQueues<some Hashable & Sendable>.Refusal, waitingFor what: String) {
        switch refusal {
        case .full(let waiting):
            self.init(.outOfSpace, "\(waiting) operations are already waiting for \(what); retry later")
        case .timedOut(let waited):
            self.init(.outOfSpace, "waited \(waited) for \(what) without getting a turn; retry later")
        case .cancelled:
            self.init(.operationCancelled, "cancelled while waiting for \(what)")
        }
    }
}
