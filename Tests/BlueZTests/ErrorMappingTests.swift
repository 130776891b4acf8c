import BLE
import DBus
import Testing
@testable import BlueZ

/// Every row of the BlueZ → CoreBluetooth table, with the error text BlueZ 5.66 really sends.
private let cases: [(name: String, text: String, context: ErrorMapping.Context?, expected: BLEError.Code)] = [
    ("org.bluez.Error.Failed", "le-connection-abort-by-local", .device, .cb(.connectionFailed)),
    ("org.bluez.Error.Failed", "le-connection-abort-by-remote", .device, .cb(.connectionFailed)),
    ("org.bluez.Error.Failed", "le-connection-refused", .device, .cb(.connectionFailed)),
    ("org.bluez.Error.Failed", "le-connection-gatt-browsing", .device, .cb(.connectionFailed)),
    ("org.bluez.Error.Failed", "le-connection-busy", .device, .cb(.connectionFailed)),
    ("org.bluez.Error.Failed", "le-connection-concurrent-connection-limit", .device, .cb(.connectionLimitReached)),
    ("org.bluez.Error.Failed", "le-connection-timeout", .device, .cb(.connectionTimeout)),
    ("org.bluez.Error.Failed", "br-connection-page-timeout", .device, .cb(.connectionTimeout)),
    // bluetoothd's answers to Connect while the kernel holds a stale link (seen in the lab) and
    // other socket errors of an attempt.
    ("org.bluez.Error.Failed", "Input/output error", .device, .cb(.connectionFailed)),
    ("org.bluez.Error.Failed", "Operation already in progress", .device, .cb(.connectionFailed)),
    ("org.bluez.Error.Failed", "Device or resource busy", .device, .cb(.connectionFailed)),
    ("org.bluez.Error.Failed", "Software caused connection abort", .device, .cb(.connectionFailed)),
    ("org.bluez.Error.Failed", "Connection reset by peer", .device, .cb(.connectionFailed)),
    ("org.bluez.Error.Failed", "Connection refused", .device, .cb(.connectionFailed)),
    ("org.bluez.Error.Failed", "Connection timed out", .device, .cb(.connectionTimeout)),
    ("org.bluez.Error.Failed", "Not connected", .attribute, .cb(.notConnected)),
    ("org.bluez.Error.NotConnected", "Not Connected", .attribute, .cb(.notConnected)),
    ("org.bluez.Error.NotPermitted", "Maximum advertisements reached", .adapter, .cb(.outOfSpace)),
    ("org.bluez.Error.NotPermitted", "Maximum advertisements reached", .attribute, .att(.insufficientAuthorization)),
    ("org.bluez.Error.NotPermitted", "Read not permitted", .attribute, .att(.readNotPermitted)),
    ("org.bluez.Error.NotPermitted", "Write not permitted", .attribute, .att(.writeNotPermitted)),
    ("org.bluez.Error.NotPermitted", "Not paired", .attribute, .att(.insufficientAuthentication)),
    ("org.bluez.Error.NotPermitted", "Operation not permitted", .attribute, .att(.insufficientAuthorization)),
    ("org.bluez.Error.InvalidArguments", "Invalid offset", .attribute, .att(.invalidOffset)),
    ("org.bluez.Error.InvalidArguments", "Invalid Length", .attribute, .att(.invalidAttributeValueLength)),
    ("org.bluez.Error.InvalidArguments", "Invalid arguments in method call", .adapter, .cb(.invalidParameters)),
    ("org.bluez.Error.NotAuthorized", "Operation Not Authorized", .attribute, .att(.insufficientAuthorization)),
    ("org.bluez.Error.NotSupported", "Operation is not supported", .attribute, .att(.requestNotSupported)),
    ("org.bluez.Error.NotSupported", "Operation is not supported", .adapter, .cb(.operationNotSupported)),
    ("org.bluez.Error.ImproperlyConfigured", "", .attribute, .att(ATTErrorCode(rawValue: 0xFD))),
    ("org.bluez.Error.AuthenticationTimeout", "Authentication Timeout", .device, .cb(.encryptionTimedOut)),
    ("org.bluez.Error.AuthenticationFailed", "Authentication Failed", .device, .att(.insufficientAuthentication)),
    ("org.bluez.Error.AuthenticationCanceled", "Authentication Canceled", .device, .cb(.operationCancelled)),
    ("org.bluez.Error.AuthenticationRejected", "Authentication Rejected", .device, .att(.insufficientAuthentication)),
    ("org.bluez.Error.DoesNotExist", "Does Not Exist", .adapter, .cb(.unknownDevice)),
    ("org.bluez.Error.NotReady", "Resource Not Ready", .adapter, .cb(.unknown)),
    ("org.bluez.Error.InProgress", "In Progress", .device, .cb(.connectionFailed)),
    ("org.bluez.Error.InProgress", "In Progress", .attribute, .cb(.unknown)),
    ("org.bluez.Error.AlreadyConnected", "Already Connected", .device, .cb(.connectionFailed)),
    ("org.bluez.Error.AlreadyConnected", "Already Connected", .adapter, .cb(.unknown)),
    ("org.freedesktop.DBus.Error.UnknownObject", "Method \"Connect\" with signature \"\" on interface \"org.bluez.Device1\" doesn't exist", .device, .cb(.unknownDevice)),
    ("org.freedesktop.DBus.Error.UnknownObject", "no such object", .attribute, .cb(.invalidHandle)),
    ("org.freedesktop.DBus.Error.UnknownObject", "no such object", nil, .cb(.unknown)),
    ("org.freedesktop.DBus.Error.NoReply", "Did not receive a reply", .device, .cb(.connectionTimeout)),
    ("org.freedesktop.DBus.Error.Timeout", "timed out", .attribute, .cb(.connectionTimeout)),
    ("org.freedesktop.DBus.Error.ServiceUnknown", "The name org.bluez was not provided by any .service files", .adapter, .cb(.unknown)),
    ("org.freedesktop.DBus.Error.NameHasNoOwner", "no owner", .adapter, .cb(.unknown)),
    ("org.freedesktop.DBus.Error.AccessDenied", "Rejected send message", .adapter, .cb(.unknown)),
    ("org.freedesktop.DBus.Error.Disconnected", "connection is closed", .adapter, .cb(.unknown)),
    ("org.bluez.Error.Failed", "Something else", .device, .cb(.unknown)),
]

@Suite struct ErrorMappingTests {
    @Test("each BlueZ error maps to its CoreBluetooth code", arguments: cases.indices)
    func mapsEachRow(index: Int) {
        let c = cases[index]
        let mapped = ErrorMapping.map(BusError(name: c.name, message: c.text), context: c.context)
        #expect(mapped.code == c.expected, "\(c.name): \(c.text)")
        #expect(mapped.detail == "\(c.name): \(c.text)" || c.text.isEmpty, "the original error is kept")
    }

    @Test func everyRuleIsCovered() {
        for rule in ErrorMapping.rules {
            let covered = cases.contains { c in
                c.name == rule.name && (rule.text.map { c.text.lowercased().contains($0.lowercased()) } ?? true)
                    && (rule.context == nil || rule.context == c.context)
                    && ErrorMapping.map(BusError(name: c.name, message: c.text), context: c.context).code == rule.code
            }
            #expect(covered, "no test case for \(rule.name) \(rule.text ?? "*")")
        }
    }

    @Test("ATT codes in BlueZ's text pass through", arguments: [
        ("Operation failed with ATT error: 0x0e", UInt8(0x0E)),
        ("Operation failed with ATT error: 0x80", 0x80),
        ("Operation failed with ATT error: 0x9f", 0x9F),
        ("Operation failed with ATT error: 0x11", 0x11),
    ])
    func attPassThrough(text: String, code: UInt8) {
        let mapped = ErrorMapping.map(BusError(name: "org.bluez.Error.Failed", message: text), context: .attribute)
        #expect(mapped.code == .att(ATTErrorCode(rawValue: code)))
        #expect(mapped.domain == .att)
        #expect(mapped.numericCode == Int(code))
    }
}
