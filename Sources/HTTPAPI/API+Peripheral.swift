import BLE
import GatewayCore
import HTTPServer

/// The peripheral role (`CBPeripheralManager`): services and advertisements clients define,
/// values centrals read and get notified of. Requests of centrals reach stream clients as
/// `peripheralRead` / `peripheralWrite` events (and `claim` over `/v1/ws` answers them).
extension API {
    func addPeripheralRoutes(to router: Router) {
        router.add("GET", "/v1/peripheral", handle { request in
            PeripheralBody(try await self.peripheral().snapshot(), format: try Parse.format(request.query["format"]))
        })
        router.add("POST", "/v1/peripheral/services", handle(status: 201) { request in
            let role = try self.peripheral()
            let definition = try JSON.decode(ServiceDefinition.self, from: request.body)
            let format = try Parse.format(request.query["format"])
            let registered = try await role.addService(definition)
            return LocalServiceBody(registered, in: await role.snapshot(), format: format)
        })
        router.add("GET", "/v1/peripheral/services/{service}", handle { request in
            let role = try self.peripheral()
            let service = try role.service(request.pathParameters["service"] ?? "")
            return LocalServiceBody(service, in: await role.snapshot(), format: try Parse.format(request.query["format"]))
        })
        router.add("DELETE", "/v1/peripheral/services/{service}", handle { request in
            let role = try self.peripheral()
            let service = try role.service(request.pathParameters["service"] ?? "")
            let body = LocalServiceBody(service, in: await role.snapshot(), format: .hex)
            try await role.removeService(id: service.id)
            return body
        })
        router.add("GET", "/v1/peripheral/characteristics/{char}/value", handle { request in
            let role = try self.peripheral()
            let (attribute, service) = try role.characteristic(request.pathParameters["char"] ?? "")
            return LocalValueBody(attribute, service, role.value(attribute), format: try Parse.format(request.query["format"]), sent: nil)
        })
        router.add("PUT", "/v1/peripheral/characteristics/{char}/value", handle { request in
            let role = try self.peripheral()
            let body = try JSON.decode(LocalValueRequest.self, from: request.body)
            let format = try Parse.format(body.format)
            let value = try format.decode(body.value)
            let (attribute, service, sent) = try await role.setValue(value, for: request.pathParameters["char"] ?? "")
            return LocalValueBody(attribute, service, value, format: format, sent: sent)
        })
        router.add("POST", "/v1/peripheral/advertisements", handle(status: 201) { request in
            let role = try self.peripheral()
            let body = try JSON.decode(AdvertisementRequest.self, from: request.body)
            return LocalAdvertisementBody(try await role.startAdvertising(body), body)
        })
        router.add("DELETE", "/v1/peripheral/advertisements/{advertisement}", handle { request in
            let role = try self.peripheral()
            let id = request.pathParameters["advertisement"] ?? ""
            guard let found = await role.snapshot().advertisements.first(where: { String($0.0.id) == id }) else {
                throw BLEError(.invalidHandle, "no advertisement \"\(id)\" (GET /v1/peripheral lists them)")
            }
            try await role.stopAdvertising(id)
            return LocalAdvertisementBody(found.0, found.1)
        })
    }

    func peripheral() throws(BLEError) -> PeripheralRole {
        guard let role = gateway.peripheral else {
            throw BLEError(.operationNotSupported, "this gattway has no peripheral role (its Bluetooth stack offers none)")
        }
        return role
    }
}

struct LocalValueRequest: StrictDecodable {
    var value: String
    var format: String?
    enum CodingKeys: String, CodingKey, CaseIterable { case value, format }
}

/// `GET /v1/peripheral`.
struct PeripheralBody: Encodable {
    struct Instances: Encodable {
        /// How many more advertisements it can start (BlueZ's `SupportedInstances` counts the free ones).
        var availableInstances: Int
        var activeInstances: Int
    }
    struct Central: Encodable {
        var address: String
        var adapter: String
    }
    var state: String
    var code: Int
    /// Per adapter in use: how many more advertisements it can start, and how many it sends.
    var adapters: [String: Instances]
    var services: [LocalServiceBody]
    var advertisements: [LocalAdvertisementBody]
    var centrals: [Central]

    init(_ s: PeripheralRole.Snapshot, format: ValueFormat) {
        state = s.status.state.name
        code = s.status.state.rawValue
        adapters = s.status.instances.mapValues { Instances(availableInstances: $0.supported, activeInstances: $0.active) }
        services = s.services.map { LocalServiceBody($0, in: s, format: format) }
        advertisements = s.advertisements.map { LocalAdvertisementBody($0.0, $0.1) }
        centrals = s.centrals.map { Central(address: $0.0.description, adapter: $0.1) }
    }
}

struct LocalServiceBody: Encodable {
    struct Characteristic: Encodable {
        var uuid: String
        var name: String?
        var handle: String?
        var properties: [String]
        var permissions: [String]
        var value: String
        var format: String
        /// A stream client answers its reads and writes (`claim` over `/v1/ws`).
        var claimed: Bool
        /// A central subscribed to its notifications or indications.
        var subscribed: Bool
        var descriptors: [Descriptor]
    }
    struct Descriptor: Encodable {
        var uuid: String
        var name: String?
        var value: String
        var format: String
    }
    var id: Int
    var uuid: String
    var name: String?
    var primary: Bool
    var adapter: String
    /// Whether BlueZ serves it now (false while bluetoothd or the adapter is away).
    var registered: Bool
    var handle: String?
    var includes: [String]
    var characteristics: [Characteristic]

    init(_ r: RegisteredService, in s: PeripheralRole.Snapshot, format: ValueFormat) {
        id = r.id
        uuid = r.service.uuid.uuidString
        name = r.service.uuid.name
        primary = r.service.primary
        adapter = r.adapter
        registered = r.registered
        handle = r.handle.map(handleText)
        includes = r.service.includes.map(\.uuidString)
        characteristics = r.service.characteristics.enumerated().map { i, c in
            let attribute = LocalAttribute(service: r.id, characteristic: i)
            return Characteristic(
                uuid: c.uuid.uuidString, name: c.uuid.name, handle: r.characteristicHandles[i].map(handleText),
                properties: c.properties.names, permissions: c.permissions.names,
                value: format.encode(s.values[attribute] ?? c.value), format: format.rawValue,
                claimed: s.claimed.contains(attribute), subscribed: s.subscribed.contains(attribute),
                descriptors: c.descriptors.enumerated().map { j, d in
                    Descriptor(uuid: d.uuid.uuidString, name: d.uuid.name,
                               value: format.encode(s.values[LocalAttribute(service: r.id, characteristic: i, descriptor: j)] ?? d.value),
                               format: format.rawValue)
                })
        }
    }
}

/// A local characteristic's value (`GET` and `PUT …/value`).
struct LocalValueBody: Encodable {
    var service: Int
    var characteristic: String
    var handle: String?
    var value: String
    var format: String
    var length: Int
    /// `PUT`: whether a central was subscribed and was sent the value (a notification or an indication).
    var sent: Bool?

    init(_ a: LocalAttribute, _ r: RegisteredService, _ value: [UInt8], format: ValueFormat, sent: Bool?) {
        service = r.id
        characteristic = r.service.characteristics[a.characteristic].uuid.uuidString
        handle = r.characteristicHandles[a.characteristic].map(handleText)
        self.value = format.encode(value)
        self.format = format.rawValue
        length = value.count
        self.sent = sent
    }
}

/// An advertisement: its id, where it is sent, and the request that made it (its fields).
struct LocalAdvertisementBody: Encodable {
    var registered: RegisteredAdvertisement
    var request: AdvertisementRequest

    init(_ registered: RegisteredAdvertisement, _ request: AdvertisementRequest) {
        self.registered = registered
        self.request = request
    }

    private enum Keys: String, CodingKey { case id, adapter, registered }

    func encode(to encoder: any Encoder) throws {
        var request = request
        request.adapter = nil  // said below, as where it is
        request.connectable = registered.definition.connectable  // what a preset made of it too
        try request.encode(to: encoder)
        var c = encoder.container(keyedBy: Keys.self)
        try c.encode(registered.id, forKey: .id)
        try c.encode(registered.adapter, forKey: .adapter)
        try c.encode(registered.registered, forKey: .registered)
    }
}
