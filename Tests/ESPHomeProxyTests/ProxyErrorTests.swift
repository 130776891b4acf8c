import BLE
import Testing
@testable import ESPHomeProxy

/// gattway's errors in the API's error fields: the tables, row by row.
@Suite struct ProxyErrorTests {
    static let gatt: [(BLEError, ProxyError.Operation, Int32)] = [
        (BLEError(att: .unlikelyError, "x"), .read, 0x0E),
        (BLEError(att: ATTErrorCode(rawValue: 0x80), "x"), .write, 0x80),
        (BLEError(.notConnected, "x"), .read, -1),
        (BLEError(.peripheralDisconnected, "x"), .read, -1),
        (BLEError(.unknownDevice, "x"), .read, -1),
        (BLEError(.invalidHandle, "x"), .read, 0x01),
        (BLEError(.uuidNotAllowed, "x"), .read, 0x02),
        (BLEError(.uuidNotAllowed, "x"), .write, 0x03),
        (BLEError(.operationNotSupported, "x"), .read, 0x06),
        (BLEError(.invalidParameters, "x"), .write, 0x87),
        (BLEError(.outOfSpace, "x"), .read, 0x84),
        (BLEError(.operationCancelled, "x"), .read, 0x92),
        (BLEError(.connectionTimeout, "x"), .read, 0x85),
        (BLEError(.unknown, "x"), .read, 0x85),
    ]

    @Test(arguments: gatt)
    func gattErrors(_ error: BLEError, _ operation: ProxyError.Operation, _ code: Int32) {
        #expect(ProxyError.gatt(error, operation) == code)
    }

    static let connect: [(BLEError, Int32)] = [
        (BLEError(.connectionTimeout, "x"), 0x08),
        (BLEError(.connectionFailed, "x"), 0x3E),
        (BLEError(.unknownDevice, "x"), 0x3E),
        (BLEError(.connectionLimitReached, "x"), 0x3E),
        (BLEError(.peripheralDisconnected, "x"), 0x13),
        (BLEError(.operationCancelled, "x"), 0x100),
        (BLEError(att: .insufficientAuthentication, "x"), 0x85),
    ]

    @Test(arguments: connect)
    func connectErrors(_ error: BLEError, _ code: Int32) {
        #expect(ProxyError.connect(error) == code)
    }

    @Test func linksLost() {
        #expect(ProxyError.linkLost(nil) == 0x16)
        #expect(ProxyError.linkLost(BLEError(.connectionTimeout, "supervision timeout")) == 0x08)
        #expect(ProxyError.linkLost(BLEError(.peripheralDisconnected, "x")) == 0x13)
    }
}
