import BLE
import DBus
import FoundationEssentials

extension SimulatorConfiguration {
    /// Misbehaviour of one device, from its configuration or set at run time with
    /// `io.gattway.Simulator1.SetFault` (which replaces the device's whole fault set).
    ///
    /// JSON, every key optional:
    /// ```
    /// { "connectError": { "name": "org.bluez.Error.Failed", "message": "le-connection-abort-by-remote",
    ///                     "count": 2, "linkEstablished": false },
    ///   "connectDelayMs": 3000, "responseDelayMs": 500, "suppressConnectedSignal": true,
    ///   "servicesResolvedEarly": true, "outOfRange": true, "staleLink": true, "dropLinkAfterMs": 2000,
    ///   "lateServices": { "first": 2, "restAfterMs": 1500, "resolved": "between" }, "forgetGATT": true,
    ///   "servicesResolvedAfterPairingMs": 300, "dropLinkAfterPairing": true,
    ///   "attErrors": [ { "uuid": "2A19", "operation": "read", "code": "0x0e" },
    ///                  { "handle": 13, "code": 3 } ] }
    /// ```
    public struct Faults: Codable, Sendable, Equatable {
        /// Connect fails with this error (for the next `count` attempts, or always).
        public var connectError: ConnectError?
        /// Replaces the device's `connectDelayMs`.
        public var connectDelayMs: Int?
        /// Every ATT request (read, write request, notification subscription) is answered this late.
        public var responseDelayMs: Int?
        /// The Connected=true PropertiesChanged is never sent although Properties.Get says true
        /// (seen on real bluetoothd: "already connected").
        public var suppressConnectedSignal: Bool
        /// On the first connection ServicesResolved=true comes before the GATT objects are
        /// exported (upstream bluez#1489, seen on real bluetoothd).
        public var servicesResolvedEarly: Bool
        /// The device stops advertising; a connected link is lost; Connect hangs until
        /// `adapter.connectTimeoutMs`, then fails with "le-connection-abort-by-local".
        public var outOfRange: Bool
        /// The adapter's kernel keeps a link to the device that its controller ended without
        /// saying so (measured in the lab: btvirt drops a link silently when the peer's
        /// controller resets, and answers the kernel's Disconnect for it with another handle):
        /// a connected link is lost as bluetoothd reports it, and from then on Connect fails at
        /// once with "Input/output error" (the kernel's EBUSY) while the device advertises as
        /// ever, until the adapter is powered off and on, which ends the fault. It lives in one
        /// adapter's kernel: the one that held the link (every adapter when none did); another
        /// adapter connects as ever.
        public var staleLink: Bool
        /// Each connection is lost this long after it was made.
        public var dropLinkAfterMs: Int?
        /// Whenever the GATT objects are exported (the first connection, after bluetoothd
        /// restarted, each connection with `forgetGATT`), they come in two pieces, as real
        /// bluetoothd was seen to export them after a restart (2 services, the rest later).
        public var lateServices: LateServices?
        /// The GATT objects are withdrawn when the link goes down (a BlueZ that keeps no GATT
        /// cache for the device), so that every connection exports them again.
        public var forgetGATT: Bool
        /// The peripheral answers these ATT error codes.
        public var attErrors: [ATTError]
        /// A pairing that ends with the link up leaves ServicesResolved false until this long
        /// after the Pair reply, as bluetoothd 5.66 did in the lab when its Pair connected (a
        /// refused authenticated read had dropped the link): Connected=true, Paired, the reply,
        /// and ServicesResolved=true 0.02-0.14 s after it. On a link that had its services
        /// resolved, they become unresolved just before the reply.
        public var servicesResolvedAfterPairingMs: Int?
        /// The link goes down right after a successful Pair's reply (a device that ends the
        /// link once it has bonded).
        public var dropLinkAfterPairing: Bool
        /// The notification sessions kept from the last connection are lost when the link comes
        /// up again, without a word: bluetoothd 5.66 re-enables each with a CCCD write on the new
        /// link and, when that write fails (the link went down first: seen in the lab after a
        /// link lost while its services were resolved), drops the session but leaves Notifying
        /// true and signals nothing. Its owner's next StartNotify starts a new one.
        public var keptSessionsLost: Bool

        public init(connectError: ConnectError? = nil, connectDelayMs: Int? = nil, responseDelayMs: Int? = nil,
                    suppressConnectedSignal: Bool = false, servicesResolvedEarly: Bool = false, outOfRange: Bool = false, staleLink: Bool = false,
                    dropLinkAfterMs: Int? = nil,
                    lateServices: LateServices? = nil, forgetGATT: Bool = false, attErrors: [ATTError] = [],
                    servicesResolvedAfterPairingMs: Int? = nil, dropLinkAfterPairing: Bool = false, keptSessionsLost: Bool = false) {
            self.connectError = connectError
            self.connectDelayMs = connectDelayMs
            self.responseDelayMs = responseDelayMs
            self.suppressConnectedSignal = suppressConnectedSignal
            self.servicesResolvedEarly = servicesResolvedEarly
            self.outOfRange = outOfRange
            self.staleLink = staleLink
            self.dropLinkAfterMs = dropLinkAfterMs
            self.lateServices = lateServices
            self.forgetGATT = forgetGATT
            self.attErrors = attErrors
            self.servicesResolvedAfterPairingMs = servicesResolvedAfterPairingMs
            self.dropLinkAfterPairing = dropLinkAfterPairing
            self.keptSessionsLost = keptSessionsLost
        }

        enum CodingKeys: String, CodingKey, CaseIterable {
            case connectError, connectDelayMs, responseDelayMs, suppressConnectedSignal, servicesResolvedEarly, outOfRange, staleLink
            case dropLinkAfterMs, lateServices, forgetGATT, attErrors, servicesResolvedAfterPairingMs, dropLinkAfterPairing
            case keptSessionsLost
        }

        public init(from decoder: any Decoder) throws {
            try decoder.rejectUnknownKeys(CodingKeys.self)
            let c = try decoder.container(keyedBy: CodingKeys.self)
            connectError = try c.decodeIfPresent(ConnectError.self, forKey: .connectError)
            connectDelayMs = try c.decodeInt(.connectDelayMs, default: nil, in: 0...600_000)
            responseDelayMs = try c.decodeInt(.responseDelayMs, default: nil, in: 0...600_000)
            suppressConnectedSignal = try c.decode(.suppressConnectedSignal, default: false)
            servicesResolvedEarly = try c.decode(.servicesResolvedEarly, default: false)
            outOfRange = try c.decode(.outOfRange, default: false)
            staleLink = try c.decode(.staleLink, default: false)
            dropLinkAfterMs = try c.decodeInt(.dropLinkAfterMs, default: nil, in: 0...86_400_000)
            lateServices = try c.decodeIfPresent(LateServices.self, forKey: .lateServices)
            forgetGATT = try c.decode(.forgetGATT, default: false)
            attErrors = try c.decode(.attErrors, default: [])
            servicesResolvedAfterPairingMs = try c.decodeInt(.servicesResolvedAfterPairingMs, default: nil, in: 0...600_000)
            dropLinkAfterPairing = try c.decode(.dropLinkAfterPairing, default: false)
            keptSessionsLost = try c.decode(.keptSessionsLost, default: false)
        }

        /// Parses the JSON given to `SetFault`.
        public static func parse(_ json: String) throws(ConfigurationError) -> Faults {
            try SimulatorConfiguration.decodeJSON(Data(json.utf8))
        }

        public struct ConnectError: Codable, Sendable, Equatable {
            /// A D-Bus error name, e.g. org.bluez.Error.Failed.
            public var name: String
            /// e.g. le-connection-abort-by-remote, le-connection-timeout, br-connection-page-timeout.
            public var message: String
            /// How many attempts fail; nil = all.
            public var count: Int?
            /// Whether the link came up before it failed (Connected=true then false before the
            /// error reply, as bluetoothd shows it for a link dropped during setup). Default:
            /// true for le-connection-abort-by-local, which bleak then waits for.
            public var linkEstablished: Bool

            public init(name: String = "org.bluez.Error.Failed", message: String, count: Int? = nil, linkEstablished: Bool? = nil) {
                self.name = name
                self.message = message
                self.count = count
                self.linkEstablished = linkEstablished ?? (message == "le-connection-abort-by-local")
            }

            enum CodingKeys: String, CodingKey, CaseIterable { case name, message, count, linkEstablished }

            public init(from decoder: any Decoder) throws {
                try decoder.rejectUnknownKeys(CodingKeys.self)
                let c = try decoder.container(keyedBy: CodingKeys.self)
                let name = try c.decode(.name, default: "org.bluez.Error.Failed")
                guard Validate.errorName(name) else {
                    throw DecodingError.dataCorruptedError(forKey: .name, in: c, debugDescription: "\"\(name)\" is not a D-Bus error name")
                }
                let message = try c.decode(String.self, forKey: .message)
                guard Validate.utf8(message) else {
                    throw DecodingError.dataCorruptedError(forKey: .message, in: c, debugDescription: "not a valid D-Bus string")
                }
                self.init(name: name, message: message, count: try c.decodeInt(.count, default: nil, in: 1...1_000_000),
                          linkEstablished: try c.decodeIfPresent(Bool.self, forKey: .linkEstablished))
            }
        }

        /// The GATT objects in two pieces: the first `first` services (in handle order) with the
        /// link, the others `restAfterMs` later; ServicesResolved=true between the two pieces
        /// (`"resolved": "between"`, the race bluetoothd shows) or after both (`"after"`).
        public struct LateServices: Codable, Sendable, Equatable {
            public enum Resolved: String, Codable, Sendable { case between, after }
            public var first: Int
            public var restAfterMs: Int
            public var resolved: Resolved

            public init(first: Int, restAfterMs: Int, resolved: Resolved = .between) {
                self.first = first
                self.restAfterMs = restAfterMs
                self.resolved = resolved
            }

            enum CodingKeys: String, CodingKey, CaseIterable { case first, restAfterMs, resolved }

            public init(from decoder: any Decoder) throws {
                try decoder.rejectUnknownKeys(CodingKeys.self)
                let c = try decoder.container(keyedBy: CodingKeys.self)
                guard let first = try c.decodeInt(.first, default: nil, in: 0...0xFFFF),
                      let rest = try c.decodeInt(.restAfterMs, default: nil, in: 0...600_000) else {
                    throw DecodingError.dataCorruptedError(forKey: .first, in: c, debugDescription: "give \"first\" and \"restAfterMs\"")
                }
                self.init(first: first, restAfterMs: rest, resolved: try c.decode(.resolved, default: .between))
            }
        }

        public struct ATTError: Codable, Sendable, Equatable {
            public enum Operation: String, Codable, Sendable { case read, write, any }
            /// The attribute, by UUID (every attribute with it) or by handle (the one in its
            /// object path, or a characteristic's value handle).
            public var uuid: BluetoothUUID?
            public var handle: Int?
            public var operation: Operation
            public var code: UInt8

            public init(uuid: BluetoothUUID? = nil, handle: Int? = nil, operation: Operation = .any, code: UInt8) {
                self.uuid = uuid
                self.handle = handle
                self.operation = operation
                self.code = code
            }

            enum CodingKeys: String, CodingKey, CaseIterable { case uuid, handle, operation, code }

            public init(from decoder: any Decoder) throws {
                try decoder.rejectUnknownKeys(CodingKeys.self)
                let c = try decoder.container(keyedBy: CodingKeys.self)
                uuid = try c.decodeIfPresent(BluetoothUUID.self, forKey: .uuid)
                handle = try c.decodeFlexibleInt(.handle)
                guard (uuid == nil) != (handle == nil) else {
                    throw DecodingError.dataCorruptedError(forKey: .uuid, in: c, debugDescription: "give either \"uuid\" or \"handle\"")
                }
                if let handle, !(1...0xFFFF).contains(handle) {
                    throw DecodingError.dataCorruptedError(forKey: .handle, in: c, debugDescription: "a handle is 0x0001...0xFFFF")
                }
                operation = try c.decode(.operation, default: .any)
                guard let raw = try c.decodeFlexibleInt(.code), let byte = UInt8(exactly: raw), byte != 0 else {
                    throw DecodingError.dataCorruptedError(forKey: .code, in: c, debugDescription: "an ATT error code is 0x01...0xFF")
                }
                code = byte
            }

            public func encode(to encoder: any Encoder) throws {
                var c = encoder.container(keyedBy: CodingKeys.self)
                try c.encodeIfPresent(uuid, forKey: .uuid)
                try c.encodeIfPresent(handle, forKey: .handle)
                try c.encode(operation, forKey: .operation)
                try c.encode(Int(code), forKey: .code)
            }
        }
    }
}
