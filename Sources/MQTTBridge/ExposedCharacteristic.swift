import GatewayCore
import BLE
import Sensors
import Threading

/// A GATT characteristic that `--mqtt-expose FILE` makes a Home Assistant sensor: its decoded
/// value published (retained) on `values/<address>/<service>/<characteristic>`, announced by MQTT
/// discovery. The file is a JSON array of these, in the API's camelCase:
///
/// ```json
/// [{"device": "F0:00:00:00:00:01", "service": "180d", "characteristic": "2a37", "name": "Heart rate",
///   "decode": "uint8", "offset": 1, "unit": "bpm", "stateClass": "measurement", "notify": true},
///  {"device": "F0:00:00:00:00:01", "service": "180f", "characteristic": "2a19", "name": "Battery",
///   "decode": "uint8", "unit": "%", "deviceClass": "battery", "stateClass": "measurement", "poll": 300}]
/// ```
///
/// `notify: true` keeps the device connected (reconnected when the link is lost) and holds the
/// characteristic's notifications; `poll: SECONDS` reads it that often, connecting for it as
/// `connect=auto` does (so the link is let go after `--idle-disconnect` between reads).
public struct ExposedCharacteristic: Sendable, Hashable {
    public enum Mode: Sendable, Hashable {
        case notify
        case poll(every: Duration)
    }

    public var device: BluetoothAddress
    public var service: BluetoothUUID
    public var characteristic: BluetoothUUID
    public var name: String
    public var decoding: ValueDecoding
    public var unit: String?
    public var deviceClass: String?
    public var stateClass: String?
    public var mode: Mode
    /// `expireAfter` as written: seconds, 0 for none; nil: not given (`expiry`).
    public var expireAfter: Int?

    /// At most this many in one file: each is a hold or a poll, and an entity.
    public static let limit = 256
    static let pollRange = 1.0...86_400.0
    static let expireRange = 0...604_800

    public struct Invalid: Error, Equatable, CustomStringConvertible {
        public let description: String
    }

    /// One entry of the file, as written.
    struct Entry: StrictDecodable {
        var device: String
        var service: String
        var characteristic: String
        var name: String
        var decode: String
        var offset: Int?
        var scale: Double?
        var mask: Int?
        var shift: Int?
        var unit: String?
        var deviceClass: String?
        var stateClass: String?
        var notify: Bool?
        var poll: Double?
        var expireAfter: Int?
        enum CodingKeys: String, CodingKey, CaseIterable {
            case device, service, characteristic, name, decode, offset, scale, mask, shift, unit, deviceClass, stateClass, notify, poll, expireAfter
        }
    }

    /// The entries of a file's text; anything wrong is an error naming `source` and the entry
    /// (`FILE: [1]: ...`, counted from 0 as JSON paths are).
    public static func parse(_ text: String, source: String) throws(Invalid) -> [ExposedCharacteristic] {
        let entries: [Entry]
        do {
            entries = try JSON.decodeArray(Entry.self, from: Array(text.utf8))
        } catch {
            throw Invalid(description: "\(source): \(error.message)")
        }
        guard entries.count <= limit else {
            throw Invalid(description: "\(source): \(entries.count) entries; at most \(limit)")
        }
        var seen: [String: Int] = [:]
        var exposed: [ExposedCharacteristic] = []
        for (i, entry) in entries.enumerated() {
            do throws(Invalid) {
                let one = try ExposedCharacteristic(entry)
                if let first = seen.updateValue(i, forKey: one.uniqueID) {
                    throw Invalid(description: "the same characteristic as [\(first)]; each may be exposed once")
                }
                exposed.append(one)
            } catch {
                throw Invalid(description: "\(source): [\(i)]: \(error.description)")
            }
        }
        return exposed
    }

    init(_ entry: Entry) throws(Invalid) {
        guard let device = BluetoothAddress(entry.device) else {
            throw Invalid(description: "device \"\(entry.device)\" is not an address (AA:BB:CC:DD:EE:FF)")
        }
        guard let service = BluetoothUUID(entry.service) else {
            throw Invalid(description: "service \"\(entry.service)\" is not a Bluetooth UUID (180d, or the 128-bit form)")
        }
        guard let characteristic = BluetoothUUID(entry.characteristic) else {
            throw Invalid(description: "characteristic \"\(entry.characteristic)\" is not a Bluetooth UUID (2a37, or the 128-bit form)")
        }
        let name = entry.name.trimmingSpaces
        guard !name.isEmpty, name.count <= 128 else { throw Invalid(description: "name must be 1-128 characters") }
        guard let type = ValueDecoding.FieldType(rawValue: entry.decode) else {
            let known = ValueDecoding.FieldType.allCases.map(\.rawValue).joined(separator: ", ")
            throw Invalid(description: "decode \"\(entry.decode)\" is none of \(known)")
        }
        do {
            decoding = try ValueDecoding(type: type, offset: entry.offset ?? 0, scale: entry.scale ?? 1,
                                         mask: entry.mask, shift: entry.shift)
        } catch {
            throw Invalid(description: error.description)
        }
        if let deviceClass = entry.deviceClass {
            guard HomeAssistantDiscovery.sensorDeviceClasses.contains(deviceClass) else {
                throw Invalid(description: "deviceClass \"\(deviceClass)\" is not one of Home Assistant's sensor device classes"
                              + " (temperature, humidity, battery, ...; see its documentation)")
            }
            guard type.isNumeric || deviceClass == "enum" else {
                throw Invalid(description: "deviceClass \(deviceClass) needs a number; a utf8 value can only have deviceClass enum")
            }
        }
        if let stateClass = entry.stateClass {
            guard HomeAssistantDiscovery.stateClasses.contains(stateClass) else {
                throw Invalid(description: "stateClass \"\(stateClass)\" is none of \(HomeAssistantDiscovery.stateClasses.sorted().joined(separator: ", "))")
            }
            guard type.isNumeric else { throw Invalid(description: "a utf8 value has no stateClass (Home Assistant keeps statistics of numbers only)") }
        }
        if let unit = entry.unit, unit.isEmpty || unit.count > 32 { throw Invalid(description: "unit must be 1-32 characters") }
        switch (entry.notify, entry.poll) {
        case (true?, nil):
            mode = .notify
        case (nil, let seconds?), (false?, let seconds?):
            guard Self.pollRange.contains(seconds) else {
                throw Invalid(description: "poll must be seconds from 1 to 86400, not \(seconds)")
            }
            mode = .poll(every: .milliseconds(Int((seconds * 1000).rounded())))
        case (true?, _?):
            throw Invalid(description: "notify and poll exclude each other: give one")
        default:
            throw Invalid(description: "say how the value comes: \"notify\": true (the device notifies it) or \"poll\": SECONDS")
        }
        if let seconds = entry.expireAfter, !Self.expireRange.contains(seconds) {
            throw Invalid(description: "expireAfter must be seconds from 0 (none) to 604800, not \(seconds)")
        }
        if let seconds = entry.expireAfter, seconds > 0, case .poll(let interval) = mode, Double(seconds) <= interval.inSeconds {
            throw Invalid(description: "expireAfter \(seconds) is not longer than the poll of \(interval):"
                          + " the entity would go unavailable between reads")
        }
        expireAfter = entry.expireAfter
        self.device = device
        self.service = service
        self.characteristic = characteristic
        self.name = name
        unit = entry.unit
        deviceClass = entry.deviceClass
        stateClass = entry.stateClass
    }

    /// Home Assistant's `expire_after` for the entity, in seconds (nil: none): `expireAfter` if
    /// given; else none when the bridge has none (`global`) or the device notifies (it notifies when
    /// it chooses: a battery level may not change for days); a polled value gets the bridge's, but
    /// at least three polls, so that one failed read does not make it unavailable.
    func expiry(default global: Int?) -> Int? {
        if let expireAfter { return expireAfter == 0 ? nil : expireAfter }
        guard let global, case .poll(let interval) = mode else { return nil }
        return max(global, Int((interval * 3).inSeconds.rounded(.up)))
    }

    /// The characteristic as the GATT operations name it.
    var ref: CharacteristicRef { CharacteristicRef(service: .uuid(service), .uuid(characteristic)) }

    /// "180d" for 16- and 32-bit UUIDs, the 128-bit form otherwise: topic levels and ids.
    static func level(_ uuid: BluetoothUUID) -> String { uuid.shortForm ?? uuid.uuidString }

    /// `ble_f00000000001_180d_2a37`: the same on every gateway, so that two gateways exposing
    /// one characteristic make one entity.
    var uniqueID: String {
        HomeAssistantDiscovery.deviceIdentifier(device) + "_" + (Self.level(service) + "_" + Self.level(characteristic)).filter { $0 != "-" }
    }

    var label: String { "\(device) \(Self.level(service))/\(Self.level(characteristic)) (\(name))" }
}

private extension String {
    var trimmingSpaces: String {
        String(drop { $0.isWhitespace }.reversed().drop { $0.isWhitespace }.reversed())
    }
}
