import BLE
import FoundationEssentials
import Sensors
import Threading

/// The JSON of a stream event, the same object whatever framing a transport puts around it.
/// Notifications take the hand-written path of `EventEncodings`, with the same fields.
package struct EventBody: Encodable {
    package struct Attribute: Encodable {
        var handle: String?
        var uuid: String?
        /// A local service's id (the peripheral role's events).
        var id: Int?
    }

    package var type: String
    package var seq: UInt64?
    package var time: Date?
    package var device: String?
    // state
    package var state: String?
    package var code: Int?
    package var adapter: String?
    package var reason: String?
    package var usableAdapters: Int?
    // adapter (its name in `adapter`, what changed in `state`: added, removed, changed)
    package var address: String?
    package var powered: Bool?
    package var discovering: Bool?
    package var connections: Int?
    package var connectionLimit: Int?
    // advertisement
    package var peripheral: DeviceBody?
    // connection
    package var error: ErrorBody.Content?
    /// While reconnecting: the attempt, and the seconds until it starts.
    package var attempt: Int?
    package var retryIn: Double?
    // notification
    package var service: Attribute?
    package var characteristic: Attribute?
    package var value: String?
    package var format: String?
    /// Counts this subscription's notifications of this characteristic: 1, 2, 3, ...
    package var sequence: UInt64?
    /// The named subscription the event belongs to.
    package var subscription: String?
    // sensor (and `device`)
    package var sensor: SensorReading?
    package var rssi: Int?
    /// Whether a value changed since the device's previous packet (false only for `everyPacket`).
    package var changed: Bool?
    // pairing: what is asked or shown (`state` "request"), or the outcome
    package var request: String?
    /// Six digits, zero-padded as devices show them.
    package var passkey: String?
    package var entered: Int?
    package var pinCode: String?
    /// The service an `authorizeService` request names.
    package var uuid: String?
    // dropped
    package var count: Int?
    // the peripheral role's (the central also in `device`, the adapter in `adapter`)
    package var central: String?
    package var descriptor: String?
    package var offset: Int?
    package var withResponse: Bool?

    package init(_ event: HubEvent, format: ValueFormat, subscription: String?, sequence: UInt64?) {
        type = event.type.rawValue
        seq = event.seq
        time = event.time
        device = event.device?.description
        self.subscription = subscription
        switch event.event {
        case .central(let central):
            fill(central, format: format, sequence: sequence)
        case .sensor(let update):
            sensor = update.reading
            rssi = update.rssi
            changed = update.changed
        case .peripheral(let notice):
            fill(notice, format: format)
        }
    }

    /// The fields of the peripheral role's event.
    private mutating func fill(_ notice: PeripheralNotice, format: ValueFormat) {
        central = notice.central?.description
        adapter = notice.adapter
        if let a = notice.attribute {
            service = Attribute(uuid: a.serviceUUID.uuidString, id: a.service)
            characteristic = Attribute(handle: a.handle.map(handleText), uuid: a.characteristic.uuidString)
            descriptor = a.descriptor?.uuidString
        }
        offset = notice.offset
        if let v = notice.value {
            value = format.encode(v)
            self.format = format.rawValue
        }
        withResponse = notice.withResponse
        request = notice.request
        error = notice.error.map { ErrorBody($0).error }
    }

    /// The fields of a central's event.
    private mutating func fill(_ event: CentralEvent, format: ValueFormat, sequence: UInt64?) {
        switch event {
        case .state(let status):
            state = status.state.name
            code = status.state.rawValue
            adapter = status.adapter
            reason = status.reason
            usableAdapters = status.usableAdapters
        case .adapter(let info, let change):
            adapter = info.id
            state = change.rawValue
            if change != .removed {
                address = info.address?.description
                powered = info.powered
                discovering = info.discovering
                connections = info.connections
                connectionLimit = info.connectionLimit
            }
        case .advertisement(let info), .advertisementChanged(let info):
            peripheral = DeviceBody(info)
        case .connection(_, let s, let e):
            state = s.name
            error = e.map { ErrorBody($0).error }
        case .reconnecting(_, let n, let delay, let e):
            state = "reconnecting"
            attempt = n
            retryIn = delay.inSeconds
            error = e.map { ErrorBody($0).error }
        case .value(let v):
            service = Attribute(handle: handleText(v.serviceHandle), uuid: v.serviceUUID.uuidString)
            characteristic = Attribute(handle: handleText(v.characteristicHandle), uuid: v.characteristicUUID.uuidString)
            value = format.encode(v.value)
            self.format = format.rawValue
            self.sequence = sequence
        case .pairing(_, .request(let asked)):
            state = "request"
            request = asked.name
            switch asked {
            case .confirmation(let n): passkey = PairingRequest.digits(n)
            case .displayPasskey(let n, let keys): (passkey, entered) = (PairingRequest.digits(n), keys)
            case .displayPinCode(let pin): pinCode = pin
            case .service(let service): uuid = service.uuidString
            case .passkey, .pinCode, .authorization: break
            }
        case .pairing(_, .paired):
            state = "paired"
        case .pairing(_, .failed(let e)):
            state = "failed"
            error = ErrorBody(e).error
        case .servicesChanged:
            break
        case .resubscribed(_, let handle, let uuids, let e):
            state = e == nil ? "restored" : "failed"
            characteristic = Attribute(handle: handleText(handle), uuid: uuids?.characteristic.uuidString)
            error = e.map { ErrorBody($0).error }
        }
    }

    /// Tells a client how many events it lost because it read too slowly.
    package init(dropped: Int) {
        type = "dropped"
        count = dropped
    }

    /// One line of JSON (no pretty printing: a framing may end an event at a line's end).
    package static func line(_ body: EventBody) -> [UInt8] { JSON.encodeCompact(body) }
}
