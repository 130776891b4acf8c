import BLE
import FoundationEssentials

// A client's scan as JSON: the request and its filters, names as in openapi.yaml's components.

package struct ManufacturerDataFilterBody: Codable, Equatable, Sendable, StrictDecodable {
    package var companyIdentifier: Int
    package var dataPrefix: String?
    package var mask: String?
    package enum CodingKeys: String, CodingKey, CaseIterable { case companyIdentifier, dataPrefix, mask }
}

package struct ServiceDataFilterBody: Codable, Equatable, Sendable, StrictDecodable {
    package var service: String
    package var dataPrefix: String?
    package var mask: String?
    package enum CodingKeys: String, CodingKey, CaseIterable { case service, dataPrefix, mask }
}

/// A client's scan: every field optional.
package struct ScanRequest: Codable, Equatable, Sendable, StrictDecodable {
    package var services: [String]?
    package var allowDuplicates: Bool?
    package var name: String?
    package var namePrefix: String?
    package var manufacturerData: [ManufacturerDataFilterBody]?
    package var serviceData: [ServiceDataFilterBody]?
    package var rssi: Int?
    package var active: Bool?
    package var timeout: Double?

    package enum CodingKeys: String, CodingKey, CaseIterable {
        case services, allowDuplicates, name, namePrefix, manufacturerData, serviceData, rssi, active, timeout
    }
    package static var nested: [CodingKeys: any StrictDecodable.Type] {
        [.manufacturerData: ManufacturerDataFilterBody.self, .serviceData: ServiceDataFilterBody.self]
    }

    package func options() throws(BLEError) -> ScanOptions {
        var options = ScanOptions()
        for (i, text) in (services ?? []).enumerated() {
            options.services.append(try Parse.uuid(text, field: "services[\(i)]"))
        }
        options.allowDuplicates = allowDuplicates ?? false
        options.name = name
        options.namePrefix = namePrefix
        for (i, f) in (manufacturerData ?? []).enumerated() {
            guard let company = UInt16(exactly: f.companyIdentifier) else {
                throw BLEError(.invalidParameters, "manufacturerData[\(i)].companyIdentifier must be 0...65535")
            }
            options.manufacturerData.append(ManufacturerDataFilter(
                companyIdentifier: company,
                dataPrefix: try Parse.hex(f.dataPrefix, field: "manufacturerData[\(i)].dataPrefix") ?? [],
                mask: try Parse.hex(f.mask, field: "manufacturerData[\(i)].mask")))
        }
        for (i, f) in (serviceData ?? []).enumerated() {
            options.serviceData.append(ServiceDataFilter(
                service: try Parse.uuid(f.service, field: "serviceData[\(i)].service"),
                dataPrefix: try Parse.hex(f.dataPrefix, field: "serviceData[\(i)].dataPrefix") ?? [],
                mask: try Parse.hex(f.mask, field: "serviceData[\(i)].mask")))
        }
        options.rssi = rssi
        options.active = active ?? true
        options.timeout = timeout
        return options
    }

    /// The options as a client sent them (what the scan's status shows).
    package init(_ o: ScanOptions) {
        services = o.services.map(\.uuidString)
        allowDuplicates = o.allowDuplicates
        name = o.name
        namePrefix = o.namePrefix
        manufacturerData = o.manufacturerData.map {
            ManufacturerDataFilterBody(companyIdentifier: Int($0.companyIdentifier), dataPrefix: ValueFormat.hex.encode($0.dataPrefix),
                                       mask: $0.mask.map { ValueFormat.hex.encode($0) })
        }
        serviceData = o.serviceData.map {
            ServiceDataFilterBody(service: $0.service.uuidString, dataPrefix: ValueFormat.hex.encode($0.dataPrefix),
                                  mask: $0.mask.map { ValueFormat.hex.encode($0) })
        }
        rssi = o.rssi
        active = o.active
        timeout = o.timeout
    }
}
