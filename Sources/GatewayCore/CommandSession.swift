import BLE
import Synchronization

/// The commands a stream client sends, and their answers.
///
/// ```
/// → {"op": "subscribe", "id": "1", "types": ["notification"], "device": "F0:..", "characteristic": "2a37", "format": "hex"}
/// ← {"op": "ack", "id": "1", "subscription": "s1"}
/// → {"op": "unsubscribe", "id": "2", "subscription": "s1"}
/// → {"op": "read", "id": "3", "device": "F0:..", "characteristic": "2a19", "format": "hex"}
/// ← {"op": "result", "id": "3", "value": "64", "format": "hex", ...}
/// → {"op": "write", "id": "4", "device": "F0:..", "characteristic": "ffe1", "value": "hi", "format": "utf8", "withResponse": false}
/// ← {"op": "error", "id": "4", "error": {"domain": ..., "code": ..., "name": ..., "message": ...}}
/// → {"op": "subscribe", "id": "5", "types": ["sensor"], "everyPacket": true}   (every packet, not only changes)
/// → {"op": "claim", "id": "6", "characteristic": "5a1e0002-…", "format": "utf8"}   (the peripheral role's)
/// ← {"op": "ack", "id": "6", "subscription": "s2"}, then {"type": "peripheralRead", "request": "r1", …}
/// → {"op": "respond", "id": "7", "request": "r1", "value": "21.5", "format": "utf8"}   (or "error": "readNotPermitted")
/// → {"op": "unclaim", "id": "8", "subscription": "s2"}
/// ```
package final class CommandSession: Sendable {
    private let gateway: Gateway
    private let client: StreamClient
    private let state = Mutex<(next: Int, holds: [String: NotificationHolds.Key], claims: [String: LocalAttribute])>((0, [:], [:]))
    /// Who this socket is to the peripheral role, once it claims a characteristic.
    private let owner = Mutex<Int?>(nil)
    /// Opened with a read-only token: subscribe and read, never write.
    private let readOnly: Bool

    package init(gateway: Gateway, client: StreamClient, readOnly: Bool = false) {
        self.gateway = gateway
        self.client = client
        self.readOnly = readOnly
    }

    package struct Command: StrictDecodable {
        var op: String
        var id: String?
        var types: [String]?
        var device: String?
        var characteristic: String?
        var format: String?
        var subscription: String?
        var value: String?
        var withResponse: Bool?
        var offset: Int?
        var everyPacket: Bool?
        /// `respond`: the request answered, and the ATT error (a name or a code) instead of a value.
        var request: String?
        var error: ATTErrorName?
        package enum CodingKeys: String, CodingKey, CaseIterable {
            case op, id, types, device, characteristic, format, subscription, value, withResponse, offset, everyPacket, request, error
        }

        package init(op: String, id: String?, types: [String]?, device: String?, characteristic: String?, format: String?,
                     subscription: String?, value: String?, withResponse: Bool?, offset: Int?, everyPacket: Bool?) {
            (request, error) = (nil, nil)
            (self.op, self.id, self.types, self.device, self.characteristic, self.format) = (op, id, types, device, characteristic, format)
            (self.subscription, self.value, self.withResponse, self.offset, self.everyPacket) = (subscription, value, withResponse, offset, everyPacket)
        }
    }

    package struct Reply: Encodable {
        var op: String
        var id: String?
        var subscription: String?
        var device: String?
        var characteristic: String?
        var value: String?
        var format: String?
        var length: Int?
        var written: Int?
        /// A connect's or disconnect's outcome (for a door that has those commands): the device's `state`.
        var state: String?
        var error: ErrorBody.Content?

        package init(op: String, id: String?, subscription: String? = nil, device: String? = nil, characteristic: String? = nil,
                     value: String? = nil, format: String? = nil, length: Int? = nil, written: Int? = nil, state: String? = nil,
                     error: ErrorBody.Content? = nil) {
            (self.op, self.id, self.subscription, self.device, self.characteristic) = (op, id, subscription, device, characteristic)
            (self.value, self.format, self.length, self.written, self.state, self.error) = (value, format, length, written, state, error)
        }
    }

    package static func reply(id: String?, error: BLEError) -> [UInt8] {
        JSON.encodeCompact(Reply(op: "error", id: id, error: ErrorBody(error).error))
    }

    package func handle(_ text: [UInt8]) async -> [UInt8] {
        var id: String?
        do {
            let command = try JSON.decode(Command.self, from: text)
            id = command.id
            return JSON.encodeCompact(try await run(command))
        } catch let error as BLEError {
            return Self.reply(id: id, error: error)
        } catch {
            return Self.reply(id: id, error: BLEError(.unknown, "\(error)"))
        }
    }

    package func run(_ command: Command) async throws -> Reply {
        switch command.op {
        case "subscribe":
            let selection = try Gateway.selection(types: command.types?.joined(separator: ","), device: command.device,
                                                  characteristic: command.characteristic, format: command.format,
                                                  everyPacket: command.everyPacket)
            let hold = try await gateway.resolveHold(selection)
            if let hold { try await gateway.holds.acquire(hold) }
            let name = state.withLock { s -> String in
                s.next += 1
                let name = "s\(s.next)"
                if let hold { s.holds[name] = hold }
                return name
            }
            client.select(selection, as: name)
            return Reply(op: "ack", id: command.id, subscription: name)
        case "unsubscribe", "unclaim":
            guard let name = command.subscription, client.deselect(name) != nil else {
                throw BLEError(.invalidParameters, "no subscription \"\(command.subscription ?? "")\" on this socket")
            }
            let (hold, claim) = state.withLock { ($0.holds.removeValue(forKey: name), $0.claims.removeValue(forKey: name)) }
            if let hold { await gateway.holds.release(hold) }
            if let claim, let owner = owner.withLock({ $0 }) { gateway.peripheral?.unclaim(owner: owner, claim) }
            return Reply(op: "ack", id: command.id, subscription: name)
        case "claim":
            let role = try writableRole(command)
            guard let text = command.characteristic else { throw BLEError(.invalidParameters, "claim needs a characteristic") }
            let format = try Parse.format(command.format)
            let me = owner.withLock { o in
                if o == nil { o = role.newOwner() }
                return o!
            }
            let (attribute, service) = try role.claim(text, owner: me)
            let uuid = service.service.characteristics[attribute.characteristic].uuid
            let name = state.withLock { s -> String in
                s.next += 1
                s.claims["s\(s.next)"] = attribute
                return "s\(s.next)"
            }
            client.select(Selection(types: [EventTypes(.peripheralRead), EventTypes(.peripheralWrite)], characteristic: .uuid(uuid), format: format),
                          as: name)
            return Reply(op: "ack", id: command.id, subscription: name, characteristic: uuid.uuidString)
        case "respond":
            let role = try writableRole(command)
            guard let request = command.request else { throw BLEError(.invalidParameters, "respond needs the request's id (\"request\")") }
            guard let me = owner.withLock({ $0 }) else { throw BLEError(.invalidParameters, "this socket claimed no characteristic") }
            let response: PeripheralResponse
            switch (command.value, command.error) {
            case (let text?, nil): response = .value(try Parse.format(command.format).decode(text))
            case (nil, let error?): response = .error(error.code)
            case (nil, nil): response = .done
            case (_?, _?): throw BLEError(.invalidParameters, "respond takes a value or an error, not both")
            }
            try role.respond(request, owner: me, with: response)
            return Reply(op: "ack", id: command.id)
        case "read":
            let (device, ref) = try target(command)
            let format = try Parse.format(command.format)
            // A use of the device, as any client's read is: one gattway connected for `connect=auto`
            // is not idle meanwhile.
            let read = try await gateway.autoConnections.using(device) {
                try await gateway.readNow(device, .characteristic(ref), offset: command.offset ?? 0)
            }
            return Reply(op: "result", id: command.id, device: device.description, characteristic: handleText(read.handle),
                         value: format.encode(read.value), format: format.rawValue, length: read.value.count)
        case "write":
            guard !readOnly else {
                throw BLEError(att: .insufficientAuthorization, "this socket was opened with a read-only token: it may subscribe and read, not write")
            }
            let (device, ref) = try target(command)
            guard let text = command.value else { throw BLEError(.invalidParameters, "write needs a value") }
            let value = try Parse.format(command.format).decode(text)
            let outcome = try await gateway.autoConnections.using(device) {
                try await gateway.central.writeValue(device, ref, value, type: command.withResponse == false ? .withoutResponse : .withResponse,
                                                     fragment: true)
            }
            return Reply(op: "result", id: command.id, device: device.description, characteristic: handleText(outcome.handle),
                         written: outcome.written)
        default:
            throw BLEError(.invalidParameters, "unknown op \"\(command.op)\"; ops are subscribe, unsubscribe, read, write, claim, unclaim, respond")
        }
    }

    /// The peripheral role, for a socket that may change it.
    private func writableRole(_ command: Command) throws(BLEError) -> PeripheralRole {
        guard !readOnly else {
            throw BLEError(att: .insufficientAuthorization, "this socket was opened with a read-only token: it may not \(command.op)")
        }
        guard let role = gateway.peripheral else {
            throw BLEError(.operationNotSupported, "this gattway has no peripheral role (its Bluetooth stack offers none)")
        }
        return role
    }

    private func target(_ command: Command) throws(BLEError) -> (BluetoothAddress, CharacteristicRef) {
        guard let deviceText = command.device, let charText = command.characteristic else {
            throw BLEError(.invalidParameters, "\(command.op) needs a device and a characteristic")
        }
        return (try Parse.address(deviceText), CharacteristicRef(try Parse.selector(charText)))
    }

    /// Releases every hold of the socket (it closed, cleanly or not).
    package func end() async {
        let holds = state.withLock { s -> [NotificationHolds.Key] in
            defer { s.holds.removeAll() }
            return Array(s.holds.values)
        }
        for hold in holds { await gateway.holds.release(hold) }
        if let me = owner.withLock({ $0 }) { gateway.peripheral?.unclaim(owner: me) }
    }
}
