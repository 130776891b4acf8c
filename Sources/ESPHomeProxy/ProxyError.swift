import BLE

/// gattway's errors as the API's error fields carry them, in one table each. The codes are
/// ESP-IDF's, which ESPHome sends and aioesphomeapi names (`ESPHOME_GATT_ERRORS`,
/// `BLEConnectionError`): a GATT error is the ATT code the device answered (0x01–0x11, and the
/// application's 0x80–0x9F) or one of the proxy's own; a failed connection or a lost link is an
/// HCI reason.
enum ProxyError {
    /// ESPHome's own "Not connected" (-1): no link to the device, or it went down meanwhile.
    /// bleak-esphome takes it as the device disconnecting.
    static let notConnected: Int32 = -1
    /// ESP-IDF's GATT status codes.
    static let busy: Int32 = 0x84
    /// ESP_GATT_ERROR, "Error": a failure with no nearer code.
    static let failure: Int32 = 0x85
    static let illegalParameter: Int32 = 0x87
    static let cancelled: Int32 = 0x92
    /// HCI reasons (ESP_GATT_CONN_*).
    static let connectionTimeout: Int32 = 0x08
    static let remoteTerminated: Int32 = 0x13
    static let localHostTerminated: Int32 = 0x16
    static let failedToEstablish: Int32 = 0x3E
    static let connectionCancelled: Int32 = 0x100

    /// What an attribute operation asked, where the answer depends on it (the blocklist's refusal).
    enum Operation { case read, write }

    /// `BluetoothGATTErrorResponse.error` (and pairing's): the device's ATT code, else the
    /// nearest of ESP-IDF's.
    static func gatt(_ error: BLEError, _ operation: Operation = .read) -> Int32 {
        switch error.code {
        case .att(let att): return Int32(att.rawValue)
        case .cb(let cb):
            switch cb {
            case .notConnected, .peripheralDisconnected, .unknownDevice: return notConnected
            case .invalidHandle: return Int32(ATTErrorCode.invalidHandle.rawValue)
            // Kept from clients by the GATT blocklist: as the device would refuse it.
            case .uuidNotAllowed:
                return Int32((operation == .read ? ATTErrorCode.readNotPermitted : .writeNotPermitted).rawValue)
            case .operationNotSupported: return Int32(ATTErrorCode.requestNotSupported.rawValue)
            case .invalidParameters: return illegalParameter
            case .outOfSpace: return busy
            case .operationCancelled: return cancelled
            case .unknown, .connectionTimeout, .alreadyAdvertising, .connectionFailed, .connectionLimitReached,
                 .peerRemovedPairingInformation, .encryptionTimedOut, .tooManyLEPairedDevices:
                return failure
            }
        }
    }

    /// `BluetoothDeviceConnectionResponse.error` of a connection that failed.
    static func connect(_ error: BLEError) -> Int32 {
        switch error.code {
        case .att: return failure  // the link came up and the services could not be read
        case .cb(let cb):
            switch cb {
            case .connectionTimeout: return connectionTimeout
            case .peripheralDisconnected: return remoteTerminated
            case .operationCancelled: return connectionCancelled
            case .unknown, .invalidParameters, .invalidHandle, .notConnected, .outOfSpace, .uuidNotAllowed,
                 .alreadyAdvertising, .connectionFailed, .connectionLimitReached, .unknownDevice, .operationNotSupported,
                 .peerRemovedPairingInformation, .encryptionTimedOut, .tooManyLEPairedDevices:
                return failedToEstablish
            }
        }
    }

    /// `BluetoothDeviceConnectionResponse.error` of a link that went down by itself (nil: this
    /// side ended it).
    static func linkLost(_ error: BLEError?) -> Int32 {
        guard let error else { return localHostTerminated }
        return error.code == .cb(.connectionTimeout) ? connectionTimeout : remoteTerminated
    }
}
