/// The ESPHome native API's messages that a Bluetooth proxy exchanges besides the Bluetooth ones.
///
/// Message ids (the `id` option of each message) and field numbers are read from the descriptor
/// that aioesphomeapi publishes (aioesphomeapi/api_pb2.py, 46.23.0, with api_options_pb2's `id`);
/// field names are the descriptor's, in camel case. A message's table lists the fields gattway
/// sends or reads; fields it does not list are skipped when read.

/// A message of the API: a protobuf message with the id that frames carry as its type.
public protocol APIMessage: TabledMessage {
    static var id: UInt16 { get }
}

/// Why one side ends the connection (`DisconnectRequest.reason`).
public struct DisconnectReason: ProtoEnum {
    public let rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }
    public static let unspecified = DisconnectReason(rawValue: 0)
    public static let provisioningClosed = DisconnectReason(rawValue: 1)
}

/// `LogLevel` of `SubscribeLogsRequest`.
public struct LogLevel: ProtoEnum {
    public let rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }
    public static let none = LogLevel(rawValue: 0)
    public static let error = LogLevel(rawValue: 1)
    public static let warn = LogLevel(rawValue: 2)
    public static let info = LogLevel(rawValue: 3)
    public static let config = LogLevel(rawValue: 4)
    public static let debug = LogLevel(rawValue: 5)
    public static let verbose = LogLevel(rawValue: 6)
    public static let veryVerbose = LogLevel(rawValue: 7)
}

/// The client's first message: who it is and the API version it speaks.
public struct HelloRequest: APIMessage {
    public static let id: UInt16 = 1
    public var clientInfo = ""
    public var apiVersionMajor: UInt32 = 0
    public var apiVersionMinor: UInt32 = 0
    public var outgoingConnectionTarget = false

    public init() {}
    public init(clientInfo: String, apiVersionMajor: UInt32, apiVersionMinor: UInt32, outgoingConnectionTarget: Bool = false) {
        (self.clientInfo, self.apiVersionMajor, self.apiVersionMinor) = (clientInfo, apiVersionMajor, apiVersionMinor)
        self.outgoingConnectionTarget = outgoingConnectionTarget
    }

    public static var fields: [Field<Self>] {
        [.string(1, \.clientInfo), .uint32(2, \.apiVersionMajor), .uint32(3, \.apiVersionMinor),
         .bool(4, \.outgoingConnectionTarget)]
    }
}

public struct HelloResponse: APIMessage {
    public static let id: UInt16 = 2
    public var apiVersionMajor: UInt32 = 0
    public var apiVersionMinor: UInt32 = 0
    public var serverInfo = ""
    public var name = ""

    public init() {}
    public init(apiVersionMajor: UInt32, apiVersionMinor: UInt32, serverInfo: String, name: String) {
        (self.apiVersionMajor, self.apiVersionMinor, self.serverInfo, self.name) = (apiVersionMajor, apiVersionMinor, serverInfo, name)
    }

    public static var fields: [Field<Self>] {
        [.uint32(1, \.apiVersionMajor), .uint32(2, \.apiVersionMinor), .string(3, \.serverInfo), .string(4, \.name)]
    }
}

/// The password login (`ConnectRequest` before the descriptor renamed it).
public struct AuthenticationRequest: APIMessage {
    public static let id: UInt16 = 3
    public var password = ""

    public init() {}
    public init(password: String) { self.password = password }

    public static var fields: [Field<Self>] { [.string(1, \.password)] }
}

public struct AuthenticationResponse: APIMessage {
    public static let id: UInt16 = 4
    public var invalidPassword = false

    public init() {}
    public init(invalidPassword: Bool) { self.invalidPassword = invalidPassword }

    public static var fields: [Field<Self>] { [.bool(1, \.invalidPassword)] }
}

public struct DisconnectRequest: APIMessage {
    public static let id: UInt16 = 5
    public var reason = DisconnectReason.unspecified

    public init() {}
    public init(reason: DisconnectReason) { self.reason = reason }

    public static var fields: [Field<Self>] { [.enumeration(1, \.reason)] }
}

/// A message without fields.
public protocol EmptyMessage: APIMessage {}

extension EmptyMessage {
    public static var fields: [Field<Self>] { [] }
}

public struct DisconnectResponse: EmptyMessage {
    public static let id: UInt16 = 6
    public init() {}
}

public struct PingRequest: EmptyMessage {
    public static let id: UInt16 = 7
    public init() {}
}

public struct PingResponse: EmptyMessage {
    public static let id: UInt16 = 8
    public init() {}
}

public struct DeviceInfoRequest: EmptyMessage {
    public static let id: UInt16 = 9
    public init() {}
}

/// What the device is. Fields 20 and up (sub-devices, areas, Z-Wave, serial proxies, newer
/// capability flags) are not written: a client reads them as absent.
public struct DeviceInfoResponse: APIMessage {
    public static let id: UInt16 = 10
    public var usesPassword = false
    public var name = ""
    /// "AA:BB:CC:DD:EE:FF", upper case, as ESPHome writes it.
    public var macAddress = ""
    public var esphomeVersion = ""
    public var compilationTime = ""
    public var model = ""
    public var hasDeepSleep = false
    public var projectName = ""
    public var projectVersion = ""
    public var webserverPort: UInt32 = 0
    public var legacyBluetoothProxyVersion: UInt32 = 0
    public var manufacturer = ""
    public var friendlyName = ""
    public var legacyVoiceAssistantVersion: UInt32 = 0
    /// `BluetoothProxyFeature` bits.
    public var bluetoothProxyFeatureFlags: UInt32 = 0
    public var suggestedArea = ""
    public var voiceAssistantFeatureFlags: UInt32 = 0
    public var bluetoothMacAddress = ""
    public var apiEncryptionSupported = false

    public init() {}

    public static var fields: [Field<Self>] {
        [
            .bool(1, \.usesPassword),
            .string(2, \.name),
            .string(3, \.macAddress),
            .string(4, \.esphomeVersion),
            .string(5, \.compilationTime),
            .string(6, \.model),
            .bool(7, \.hasDeepSleep),
            .string(8, \.projectName),
            .string(9, \.projectVersion),
            .uint32(10, \.webserverPort),
            .uint32(11, \.legacyBluetoothProxyVersion),
            .string(12, \.manufacturer),
            .string(13, \.friendlyName),
            .uint32(14, \.legacyVoiceAssistantVersion),
            .uint32(15, \.bluetoothProxyFeatureFlags),
            .string(16, \.suggestedArea),
            .uint32(17, \.voiceAssistantFeatureFlags),
            .string(18, \.bluetoothMacAddress),
            .bool(19, \.apiEncryptionSupported),
        ]
    }
}

/// `DeviceInfoResponse.bluetoothProxyFeatureFlags`: aioesphomeapi's `BluetoothProxyFeature`
/// (model.py), the bits bleak-esphome and Home Assistant test.
public struct BluetoothProxyFeature: OptionSet, Sendable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    public static let passiveScan = BluetoothProxyFeature(rawValue: 1 << 0)
    public static let activeConnections = BluetoothProxyFeature(rawValue: 1 << 1)
    public static let remoteCaching = BluetoothProxyFeature(rawValue: 1 << 2)
    public static let pairing = BluetoothProxyFeature(rawValue: 1 << 3)
    public static let cacheClearing = BluetoothProxyFeature(rawValue: 1 << 4)
    public static let rawAdvertisements = BluetoothProxyFeature(rawValue: 1 << 5)
    public static let stateAndMode = BluetoothProxyFeature(rawValue: 1 << 6)
}

public struct ListEntitiesRequest: EmptyMessage {
    public static let id: UInt16 = 11
    public init() {}
}

/// The end of the entity list (sent at once by a device without entities).
public struct ListEntitiesDoneResponse: EmptyMessage {
    public static let id: UInt16 = 19
    public init() {}
}

public struct SubscribeStatesRequest: EmptyMessage {
    public static let id: UInt16 = 20
    public init() {}
}

public struct SubscribeLogsRequest: APIMessage {
    public static let id: UInt16 = 28
    public var level = LogLevel.none
    public var dumpConfig = false

    public init() {}
    public init(level: LogLevel, dumpConfig: Bool) {
        self.level = level
        self.dumpConfig = dumpConfig
    }

    public static var fields: [Field<Self>] { [.enumeration(1, \.level), .bool(2, \.dumpConfig)] }
}

public struct SubscribeHomeassistantServicesRequest: EmptyMessage {
    public static let id: UInt16 = 34
    public init() {}
}

public struct SubscribeHomeAssistantStatesRequest: EmptyMessage {
    public static let id: UInt16 = 38
    public init() {}
}

/// The time asked for (the descriptor has the device ask its client; gattway answers either side's).
public struct GetTimeRequest: EmptyMessage {
    public static let id: UInt16 = 36
    public init() {}
}

/// The time: seconds since 1970 (fixed32), and a POSIX time zone. Field 3, the parsed time zone,
/// is skipped when read.
public struct GetTimeResponse: APIMessage {
    public static let id: UInt16 = 37
    public var epochSeconds: UInt32 = 0
    public var timezone = ""

    public init() {}
    public init(epochSeconds: UInt32, timezone: String = "") {
        self.epochSeconds = epochSeconds
        self.timezone = timezone
    }

    public static var fields: [Field<Self>] { [.fixed32(1, \.epochSeconds), .string(2, \.timezone)] }
}
