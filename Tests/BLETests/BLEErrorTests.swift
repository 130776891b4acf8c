import BLE
import Testing

@Suite struct BLEErrorTests {
    /// Apple's CBError.Code, from the SDK headers.
    static let cbCodes: [(CBErrorCode, Int, String)] = [
        (.unknown, 0, "unknown"),
        (.invalidParameters, 1, "invalidParameters"),
        (.invalidHandle, 2, "invalidHandle"),
        (.notConnected, 3, "notConnected"),
        (.outOfSpace, 4, "outOfSpace"),
        (.operationCancelled, 5, "operationCancelled"),
        (.connectionTimeout, 6, "connectionTimeout"),
        (.peripheralDisconnected, 7, "peripheralDisconnected"),
        (.uuidNotAllowed, 8, "uuidNotAllowed"),
        (.alreadyAdvertising, 9, "alreadyAdvertising"),
        (.connectionFailed, 10, "connectionFailed"),
        (.connectionLimitReached, 11, "connectionLimitReached"),
        (.unknownDevice, 12, "unknownDevice"),
        (.operationNotSupported, 13, "operationNotSupported"),
        (.peerRemovedPairingInformation, 14, "peerRemovedPairingInformation"),
        (.encryptionTimedOut, 15, "encryptionTimedOut"),
        (.tooManyLEPairedDevices, 16, "tooManyLEPairedDevices"),
    ]

    @Test(arguments: cbCodes)
    func cbCodeHasApplesValueAndName(code: CBErrorCode, raw: Int, name: String) {
        #expect(code.rawValue == raw)
        #expect(CBErrorCode(rawValue: raw) == code)
        #expect(code.name == name)
    }

    @Test func cbCodeTableIsComplete() {
        #expect(CBErrorCode.allCases == Self.cbCodes.map(\.0))
        #expect(CBErrorCode(rawValue: 17) == nil)
        #expect(CBErrorCode(rawValue: -1) == nil)
    }

    /// Apple's CBATTError.Code, from the SDK headers.
    static let attCodes: [(ATTErrorCode, UInt8, String)] = [
        (.success, 0x00, "success"),
        (.invalidHandle, 0x01, "invalidHandle"),
        (.readNotPermitted, 0x02, "readNotPermitted"),
        (.writeNotPermitted, 0x03, "writeNotPermitted"),
        (.invalidPdu, 0x04, "invalidPdu"),
        (.insufficientAuthentication, 0x05, "insufficientAuthentication"),
        (.requestNotSupported, 0x06, "requestNotSupported"),
        (.invalidOffset, 0x07, "invalidOffset"),
        (.insufficientAuthorization, 0x08, "insufficientAuthorization"),
        (.prepareQueueFull, 0x09, "prepareQueueFull"),
        (.attributeNotFound, 0x0A, "attributeNotFound"),
        (.attributeNotLong, 0x0B, "attributeNotLong"),
        (.insufficientEncryptionKeySize, 0x0C, "insufficientEncryptionKeySize"),
        (.invalidAttributeValueLength, 0x0D, "invalidAttributeValueLength"),
        (.unlikelyError, 0x0E, "unlikelyError"),
        (.insufficientEncryption, 0x0F, "insufficientEncryption"),
        (.unsupportedGroupType, 0x10, "unsupportedGroupType"),
        (.insufficientResources, 0x11, "insufficientResources"),
    ]

    @Test(arguments: attCodes)
    func attCodeHasApplesValueAndName(code: ATTErrorCode, raw: UInt8, name: String) {
        #expect(code.rawValue == raw)
        #expect(ATTErrorCode(rawValue: raw) == code)
        #expect(code.name == name)
        #expect(code.description == name)
    }

    @Test(arguments: [
        (0x80, "applicationError0x80"),
        (0x8A, "applicationError0x8A"),
        (0x9F, "applicationError0x9F"),
        (0x12, "attError0x12"),
        (0x7F, "attError0x7F"),
        (0xA0, "attError0xA0"),
        (0xFD, "attError0xFD"),
        (0xFF, "attError0xFF"),
    ] as [(UInt8, String)])
    func attCodeIsOpenWithGeneratedNames(raw: UInt8, name: String) {
        let code = ATTErrorCode(rawValue: raw)
        #expect(code.rawValue == raw)
        #expect(code.name == name)
    }

    @Test(arguments: [
        (BLEError(.connectionTimeout, "connect timed out after 10 s"),
         "CBErrorDomain", 6, "connectionTimeout", "CBErrorDomain 6 connectionTimeout: connect timed out after 10 s"),
        (BLEError(.connectionFailed, "connection failed", detail: "org.bluez.Error.Failed: le-connection-abort-by-local"),
         "CBErrorDomain", 10, "connectionFailed",
         "CBErrorDomain 10 connectionFailed: connection failed [org.bluez.Error.Failed: le-connection-abort-by-local]"),
        (BLEError(att: .readNotPermitted, "read not permitted", detail: "org.bluez.Error.NotPermitted: Read not permitted"),
         "CBATTErrorDomain", 2, "readNotPermitted",
         "CBATTErrorDomain 2 readNotPermitted: read not permitted [org.bluez.Error.NotPermitted: Read not permitted]"),
        (BLEError(att: ATTErrorCode(rawValue: 0x81), "rejected by the application"),
         "CBATTErrorDomain", 0x81, "applicationError0x81", "CBATTErrorDomain 129 applicationError0x81: rejected by the application"),
    ])
    func errorReportsDomainCodeAndName(error: BLEError, domain: String, numericCode: Int, name: String, description: String) {
        #expect(error.domain.rawValue == domain)
        #expect(error.numericCode == numericCode)
        #expect(error.name == name)
        #expect(error.description == description)
    }

    @Test func errorsWithTheSameNumberInDifferentDomainsDiffer() {
        let cb = BLEError(.invalidHandle, "x")
        let att = BLEError(att: .readNotPermitted, "x")
        #expect(cb.numericCode == att.numericCode)
        #expect(cb != att)
        #expect(cb.code == .cb(.invalidHandle))
        #expect(att.code == .att(.readNotPermitted))
        #expect(cb != BLEError(.invalidHandle, "y"))
        #expect(cb != BLEError(.invalidHandle, "x", detail: "org.bluez.Error.DoesNotExist"))
    }
}
