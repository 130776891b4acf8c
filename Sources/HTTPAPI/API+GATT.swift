import GatewayCore
import BLE
import HTTPServer

/// Connecting, discovery and attribute values: `/v1/devices/{id}/...`.
extension API {
    func addGATTRoutes(to router: Router) {
        let device = "/v1/devices/{id}"
        router.add("POST", device + "/connect", handle { request in
            let body = try JSON.decode(ConnectRequest.self, from: request.body)
            return try await self.gateway.connect(try Self.deviceID(request), timeout: body.timeout, autoReconnect: body.autoReconnect,
                                                  adapter: body.adapter)
        })
        router.add("POST", device + "/disconnect", handle { request in
            try await self.gateway.disconnect(try Self.deviceID(request))
        })
        // Every route below uses the device: a device gattway connected on its own is not idle meanwhile.
        router.add("GET", device + "/gatt", usingDevice { request in
            let id = try Self.deviceID(request)
            let services = try await self.central.services(id)
            let mtu = try await self.central.peripheral(id).mtu
            return GATTBody(device: id.description, mtu: mtu, maximumWriteValueLength: WriteLengths(mtu: mtu),
                            services: services.map { ServiceBody($0, withCharacteristics: true) })
        })
        router.add("GET", device + "/services", usingDevice { request in
            let filter = try Self.uuidFilter(request)
            let services = try await self.central.services(try Self.deviceID(request))
            return ServiceList(services: services.filter { filter?.contains($0.uuid) ?? true }.map { ServiceBody($0, withCharacteristics: false) })
        })
        router.add("GET", device + "/services/{service}", usingDevice { request in
            ServiceBody(try await self.service(request), withCharacteristics: true)
        })
        router.add("GET", device + "/services/{service}/characteristics", usingDevice { request in
            let filter = try Self.uuidFilter(request)
            let characteristics = try await self.service(request).characteristics.filter { filter?.contains($0.uuid) ?? true }
            return CharacteristicList(characteristics: characteristics.map { CharacteristicBody($0, withDescriptors: false) })
        })
        router.add("GET", device + "/characteristics", usingDevice { request in
            let filter = try Self.uuidFilter(request)
            let all = try await self.central.services(try Self.deviceID(request)).flatMap(\.characteristics)
            return CharacteristicList(characteristics: all.filter { filter?.contains($0.uuid) ?? true }.map { CharacteristicBody($0, withDescriptors: false) })
        })

        // Characteristic routes exist device-wide and scoped to a service.
        for scope in [device, device + "/services/{service}"] {
            let characteristic = scope + "/characteristics/{char}"
            router.add("GET", characteristic, usingDevice { request in
                CharacteristicBody(try await self.characteristic(request), withDescriptors: true)
            })
            router.add("GET", characteristic + "/descriptors", usingDevice { request in
                DescriptorList(descriptors: try await self.characteristic(request).descriptors.map(DescriptorBody.init))
            })
            router.add("GET", characteristic + "/value", usingDevice { request in
                try await self.readValue(request, .characteristic(try Self.characteristicRef(request)))
            })
            router.add("PUT", characteristic + "/value", usingDevice { request in
                let body = try JSON.decode(WriteRequest.self, from: request.body)
                let value = try Parse.format(body.format).decode(body.value)
                let type: WriteType = (body.withResponse ?? true) ? .withResponse : .withoutResponse
                return WriteResult(try await self.central.writeValue(try Self.deviceID(request), try Self.characteristicRef(request),
                                                                     value, type: type, fragment: body.fragment ?? true))
            })
            router.add("POST", characteristic + "/notifications", usingDevice { request in
                try await self.setNotify(true, request)
            })
            router.add("DELETE", characteristic + "/notifications", usingDevice { request in
                try await self.setNotify(false, request)
            })
            router.add("GET", characteristic + "/descriptors/{desc}/value", usingDevice { request in
                try await self.readValue(request, .descriptor(try Self.descriptorRef(request)))
            })
            router.add("PUT", characteristic + "/descriptors/{desc}/value", usingDevice { request in
                try await self.writeDescriptor(request)
            })
        }
        router.add("GET", device + "/descriptors/{desc}/value", usingDevice { request in
            try await self.readValue(request, .descriptor(try Self.descriptorRef(request)))
        })
        router.add("PUT", device + "/descriptors/{desc}/value", usingDevice { request in
            try await self.writeDescriptor(request)
        })
    }

    /// `handle`, for a route on one device: the request uses it while it runs.
    private func usingDevice<T: Encodable & Sendable>(_ body: @escaping @Sendable (Request) async throws -> T) -> Handler {
        handle { request in
            try await self.autoConnections.using(try Self.deviceID(request)) { try await body(request) }
        }
    }

    // MARK: - Resolving selectors

    static func deviceID(_ request: Request) throws(BLEError) -> BluetoothAddress {
        try Parse.address(request.pathParameters["id"] ?? "")
    }

    static func selector(_ request: Request, _ name: String) throws(BLEError) -> AttributeSelector {
        try Parse.selector(request.pathParameters[name] ?? "")
    }

    private func service(_ request: Request) async throws(BLEError) -> GATTService {
        try await central.service(try Self.deviceID(request), try Self.selector(request, "service"))
    }

    /// The characteristic `{char}` names: within `{service}` when the route has one, else on the whole device.
    static func characteristicRef(_ request: Request) throws(BLEError) -> CharacteristicRef {
        let service = try request.pathParameters["service"].map { text throws(BLEError) in try Parse.selector(text) }
        return CharacteristicRef(service: service, try selector(request, "char"))
    }

    /// The descriptor `{desc}` names: within `{char}` when the route has one, else on the whole device.
    static func descriptorRef(_ request: Request) throws(BLEError) -> DescriptorRef {
        let characteristic = request.pathParameters["char"] == nil ? nil : try characteristicRef(request)
        return DescriptorRef(characteristic: characteristic, try selector(request, "desc"))
    }

    private func characteristic(_ request: Request) async throws(BLEError) -> GATTCharacteristic {
        try await central.characteristic(try Self.deviceID(request), try Self.characteristicRef(request))
    }

    /// `?uuids=180d,180f` (or the key repeated): nil when absent.
    static func uuidFilter(_ request: Request) throws(BLEError) -> Set<BluetoothUUID>? {
        let values = request.queryItems.filter { $0.name == "uuids" }.map(\.value)
        guard !values.isEmpty else { return nil }
        var set = Set<BluetoothUUID>()
        for value in values {
            for text in try Parse.list(value, field: "uuids") { set.insert(try Parse.uuid(text, field: "uuids")) }
        }
        return set
    }

    static func offset(_ request: Request) throws(BLEError) -> Int {
        guard let text = request.query["offset"] else { return 0 }
        guard let offset = Int(text), (0...512).contains(offset) else {
            throw BLEError(.invalidParameters, "offset must be a whole number from 0 to 512, not \"\(text)\"")
        }
        return offset
    }

    // MARK: - Operations

    /// `POST`/`DELETE .../notifications`: a kept hold, one more holder of the characteristic's
    /// notifications beside the stream clients (and restored after a restart); BlueZ's
    /// subscription lasts while anyone holds it. Refused before any hold
    /// is taken or given back when the characteristic cannot notify.
    private func setNotify(_ enabled: Bool, _ request: Request) async throws -> NotifyState {
        let id = try Self.deviceID(request)
        let c = try await characteristic(request)
        try c.requireNotifiable()
        let key = NotificationHolds.Key(device: id, characteristic: c.handle)
        if enabled { try await holds.keep(key) } else { await holds.releaseKept(key) }
        restoration.held(id, c.handle, enabled)
        return NotifyState(handle: handleText(c.handle), uuid: c.uuid.uuidString, isNotifying: holds.count(key) > 0)
    }

    private func writeDescriptor(_ request: Request) async throws -> WriteResult {
        let body = try JSON.decode(WriteRequest.self, from: request.body)
        guard body.withResponse != false, body.fragment == nil else {
            throw BLEError(.invalidParameters, "descriptors are always written with response; withResponse and fragment do not apply")
        }
        let value = try Parse.format(body.format).decode(body.value)
        return WriteResult(try await central.writeDescriptor(try Self.deviceID(request), try Self.descriptorRef(request), value))
    }
}
