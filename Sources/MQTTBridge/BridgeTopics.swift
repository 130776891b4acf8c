import GatewayCore
import BLE

/// The MQTT topics of one gateway, under `<prefix>/<gateway-id>/`:
///
///     availability                      online | offline (retained; offline is the last will)
///     state                             GET /v1/state (retained)
///     adapters/<name>                   each adapter in use as GET /v1/adapters shows it (retained, on
///                                       change; cleared when it is removed)
///     sensors/<address>                 GET /v1/sensors/{id}, with `gateway` (retained, on change; cleared when forgotten)
///     devices/<address>                 GET /v1/devices/{id} (retained; on connection changes, else at most
///                                       every 30 s; cleared when forgotten)
///     events/<type>                     stream events: state, connection, adapter, pairing, servicesChanged
///     notifications/<address>/<handle>  notifications of characteristics subscribed over MQTT
///     values/<address>/<service>/<char> values of the characteristics of --mqtt-expose (retained)
///     command                           commands in; answers on the MQTT 5 response topic, the
///                                       command's `replyTo`, or command/reply
///
/// Discovery for Home Assistant goes to `homeassistant/<component>/<unique id>/config`.
public struct BridgeTopics: Sendable, Equatable {
    public let prefix: String
    public let gatewayID: String

    public struct Invalid: Error, Equatable, CustomStringConvertible {
        public let description: String
    }

    /// - Parameters:
    ///   - prefix: one or more topic levels (`gattway`, `home/ble`), without wildcards.
    ///   - gatewayID: one topic level of letters, digits, `-`, `_` and `.`.
    public init(prefix: String, gatewayID: String) throws(Invalid) {
        guard !prefix.isEmpty, !prefix.hasPrefix("/"), !prefix.hasSuffix("/"), !prefix.contains("//"),
              !prefix.contains(where: { $0 == "+" || $0 == "#" || $0 == "\0" }) else {
            throw Invalid(description: "the MQTT prefix \"\(prefix)\" must be topic levels without wildcards (+, #) or empty levels")
        }
        guard Self.isIdentifier(gatewayID) else {
            throw Invalid(description: "the gateway id \"\(gatewayID)\" must be 1-64 letters, digits, -, _ or .")
        }
        self.prefix = prefix
        self.gatewayID = gatewayID
    }

    static func isIdentifier(_ text: String) -> Bool {
        (1...64).contains(text.utf8.count) && text.utf8.allSatisfy { c in
            (c >= UInt8(ascii: "a") && c <= UInt8(ascii: "z")) || (c >= UInt8(ascii: "A") && c <= UInt8(ascii: "Z"))
                || (c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9")) || c == UInt8(ascii: "-") || c == UInt8(ascii: "_") || c == UInt8(ascii: ".")
        }
    }

    /// A host name made into a gateway id: what is not allowed becomes `-`.
    public static func gatewayID(fromHostName name: String) -> String {
        let mapped = String(name.prefix(64).map { isIdentifier(String($0)) ? $0 : "-" })
        return mapped.isEmpty ? "gattway" : mapped
    }

    public var base: String { "\(prefix)/\(gatewayID)" }
    public var availability: String { base + "/availability" }
    public var state: String { base + "/state" }
    public func adapter(_ name: String) -> String { base + "/adapters/" + name }
    public var command: String { base + "/command" }
    public var commandReply: String { base + "/command/reply" }
    func sensor(_ device: BluetoothAddress) -> String { "\(base)/sensors/\(device)" }
    func device(_ device: BluetoothAddress) -> String { "\(base)/devices/\(device)" }
    func event(_ type: EventType) -> String { "\(base)/events/\(type.rawValue)" }
    func notification(_ device: BluetoothAddress, handle: UInt16) -> String {
        "\(base)/notifications/\(device)/\(handleText(handle))"
    }

    /// `values/F0:00:00:00:00:01/180d/2a37` (128-bit UUIDs in full).
    func value(_ exposed: ExposedCharacteristic) -> String {
        "\(base)/values/\(exposed.device)/\(ExposedCharacteristic.level(exposed.service))/\(ExposedCharacteristic.level(exposed.characteristic))"
    }

    /// A topic a client may name for answers: no wildcards, not empty.
    static func isPublishable(_ topic: String) -> Bool {
        !topic.isEmpty && topic.utf8.count <= 1024 && !topic.contains(where: { $0 == "+" || $0 == "#" || $0 == "\0" })
    }

    public static let online: [UInt8] = Array("online".utf8)
    public static let offline: [UInt8] = Array("offline".utf8)
}
