import BLE
import GatewayCore
import HTTPServer

/// Pairing, bonds and the GATT cache: `/v1/devices/{id}/pair`, `/pairing`, `/bond`, `/trust`,
/// `/gatt/refresh`. What a pairing asks also goes out as `pairing` events.
extension API {
    static let defaultPairTimeout = 60.0
    static let maximumPairTimeout = 300.0

    func addPairingRoutes(to router: Router) {
        let device = "/v1/devices/{id}"
        router.add("POST", device + "/pair", handle { request in
            let body = try JSON.decode(PairRequest.self, from: request.body)
            let timeout = body.timeout ?? Self.defaultPairTimeout
            guard timeout > 0, timeout <= Self.maximumPairTimeout else {
                throw BLEError(.invalidParameters, "timeout must be more than 0 and at most \(Int(Self.maximumPairTimeout)) seconds")
            }
            let id = try Self.deviceID(request)
            let answer = try body.answer(allowNone: true)
            return self.gateway.deviceBody(try await self.central.pair(id, answer: answer, timeout: .milliseconds(Int(timeout * 1000))))
        })
        router.add("GET", device + "/pairing", handle { request in
            let id = try Self.deviceID(request)
            return PairingBody(device: id, request: await self.central.pairingRequest(id))
        })
        router.add("POST", device + "/pairing", handle { request in
            let id = try Self.deviceID(request)
            let body = try JSON.decode(PairingAnswerRequest.self, from: request.body)
            guard let answer = try body.answer(allowNone: false) else { throw BLEError(.invalidParameters, "give passkey, pinCode or confirm") }
            try await self.central.answerPairing(id, answer)
            return PairingAnswered(device: id.description, answered: body.kind)
        })
        router.add("DELETE", device + "/bond", handle { request in
            let id = try Self.deviceID(request)
            try await self.central.removeBond(id)
            return BondRemoved(device: id.description, paired: false, bonded: false)
        })
        router.add("POST", device + "/trust", handle { request in
            let body = try JSON.decode(TrustRequest.self, from: request.body)
            return self.gateway.deviceBody(try await self.central.setTrusted(body.trusted ?? true, try Self.deviceID(request)))
        })
        router.add("POST", device + "/gatt/refresh", handle { request in
            let body = try JSON.decode(RefreshRequest.self, from: request.body)
            let id = try Self.deviceID(request)
            let services = try await self.central.refreshGATT(id, dropBond: body.dropBond ?? false)
            let mtu = try? await self.central.peripheral(id).mtu
            return GATTBody(device: id.description, mtu: mtu ?? nil, maximumWriteValueLength: WriteLengths(mtu: mtu ?? nil),
                            services: services.map { ServiceBody($0, withCharacteristics: true) })
        })
    }
}

/// One answer: a passkey (six decimal digits), a PIN code, or a yes/no.
protocol PairingAnswerFields {
    var passkey: Int? { get }
    var pinCode: String? { get }
    var confirm: Bool? { get }
}

extension PairingAnswerFields {
    /// The answer the fields give (at most one of them), nil when none.
    func answer(allowNone: Bool) throws(BLEError) -> PairingAnswer? {
        let given = [passkey != nil, pinCode != nil, confirm != nil].filter { $0 }.count
        guard given <= 1 else { throw BLEError(.invalidParameters, "give one of passkey, pinCode and confirm, not several") }
        if let passkey {
            guard let value = UInt32(exactly: passkey), PairingAnswer.passkeys.contains(value) else {
                throw BLEError(.invalidParameters, "passkey must be a whole number from 0 to 999999 (the six digits the device shows), not \(passkey)")
            }
            return .passkey(value)
        }
        if let pinCode {
            guard let answer = PairingAnswer.checkedPINCode(pinCode) else {
                throw BLEError(.invalidParameters, "pinCode must be 1 to 16 letters or digits")
            }
            return answer
        }
        if let confirm { return .confirm(confirm) }
        if !allowNone { throw BLEError(.invalidParameters, "give passkey, pinCode or confirm") }
        return nil
    }

    var kind: String { passkey != nil ? "passkey" : pinCode != nil ? "pinCode" : "confirm" }
}

/// `POST /v1/devices/{id}/pair`: everything optional; an answer given here is used when the
/// pairing asks for it (a passkey printed on the device, say).
struct PairRequest: StrictDecodable, PairingAnswerFields {
    var passkey: Int?
    var pinCode: String?
    var confirm: Bool?
    var timeout: Double?
    enum CodingKeys: String, CodingKey, CaseIterable { case passkey, pinCode, confirm, timeout }
}

/// `POST /v1/devices/{id}/pairing`: the answer to the request waiting.
struct PairingAnswerRequest: StrictDecodable, PairingAnswerFields {
    var passkey: Int?
    var pinCode: String?
    var confirm: Bool?
    enum CodingKeys: String, CodingKey, CaseIterable { case passkey, pinCode, confirm }
}

struct TrustRequest: StrictDecodable {
    var trusted: Bool?
    enum CodingKeys: String, CodingKey, CaseIterable { case trusted }
}

struct RefreshRequest: StrictDecodable {
    /// A bonded device's cache goes only with its bond: say so to drop both.
    var dropBond: Bool?
    enum CodingKeys: String, CodingKey, CaseIterable { case dropBond }
}

/// `GET /v1/devices/{id}/pairing`: the question waiting for an answer, if any.
struct PairingBody: Encodable {
    var device: String
    var waiting: Bool
    var request: String?
    /// The number to compare (`confirm`): six digits, zero-padded as devices show them.
    var passkey: String?
    var uuid: String?

    init(device: BluetoothAddress, request: PairingRequest?) {
        self.device = device.description
        waiting = request != nil
        self.request = request?.name
        if case .confirmation(let n) = request { passkey = PairingRequest.digits(n) }
        if case .service(let service) = request { uuid = service.uuidString }
    }
}

struct PairingAnswered: Encodable {
    var device: String
    var answered: String
}

struct BondRemoved: Encodable {
    var device: String
    var paired: Bool
    var bonded: Bool
}
