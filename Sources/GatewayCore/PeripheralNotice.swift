import BLE

/// What the peripheral role tells stream clients (`CBPeripheralManagerDelegate`'s callbacks): a
/// central connected or left, subscribed or unsubscribed, read or wrote, confirmed an indication.
package struct PeripheralNotice: Sendable {
    package enum Kind: Sendable, Equatable {
        case centralConnected, centralDisconnected, subscribed, unsubscribed, read, write, indicationConfirmed

        package var type: EventType {
            switch self {
            case .centralConnected: .centralConnected
            case .centralDisconnected: .centralDisconnected
            case .subscribed: .subscribed
            case .unsubscribed: .unsubscribed
            case .read: .peripheralRead
            case .write: .peripheralWrite
            case .indicationConfirmed: .indicationConfirmed
            }
        }
    }

    /// A local attribute as clients name it.
    package struct Attribute: Sendable {
        package var service: Int
        package var serviceUUID: BluetoothUUID
        package var characteristic: BluetoothUUID
        package var handle: UInt16?
        package var descriptor: BluetoothUUID?
    }

    package var kind: Kind
    /// The central, when the stack says which (BlueZ tells the first subscription, not by whom).
    package var central: BluetoothAddress?
    package var adapter: String?
    package var attribute: Attribute?
    package var offset: Int?
    /// What a central wrote, or what its read was answered.
    package var value: [UInt8]?
    package var withResponse: Bool?
    /// A request a client claimed: the id its `respond` names.
    package var request: String?
    /// A read or write answered with an ATT error.
    package var error: BLEError?

    package init(_ kind: Kind, central: BluetoothAddress? = nil, adapter: String? = nil, attribute: Attribute? = nil,
                 offset: Int? = nil, value: [UInt8]? = nil, withResponse: Bool? = nil, request: String? = nil, error: BLEError? = nil) {
        (self.kind, self.central, self.adapter, self.attribute) = (kind, central, adapter, attribute)
        (self.offset, self.value, self.withResponse, self.request, self.error) = (offset, value, withResponse, request, error)
    }
}

extension EventType {
    /// The peripheral role's events about one of its characteristics: a selection's
    /// `characteristic` picks them as it picks a notification's.
    package var namesLocalCharacteristic: Bool {
        switch self {
        case .subscribed, .unsubscribed, .peripheralRead, .peripheralWrite, .indicationConfirmed: true
        default: false
        }
    }
}

/// An ATT error as a client names it in `respond`: CoreBluetooth's name ("readNotPermitted")
/// or the code (2, or "0x02").
package struct ATTErrorName: Decodable, Sendable {
    package let code: ATTErrorCode

    package init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if let n = try? c.decode(Int.self), let byte = UInt8(exactly: n) {
            code = ATTErrorCode(rawValue: byte)
            return
        }
        let text = try c.decode(String.self)
        let hex = text.hasPrefix("0x") ? UInt8(text.dropFirst(2), radix: 16) : nil
        guard let byte = hex ?? (0...UInt8.max).first(where: { ATTErrorCode(rawValue: $0).name == text }) else {
            throw DecodingError.dataCorruptedError(in: c, debugDescription: "error: \"\(text)\" is not an ATT error (a CBATTError name such as readNotPermitted, or a code)")
        }
        code = ATTErrorCode(rawValue: byte)
    }
}
