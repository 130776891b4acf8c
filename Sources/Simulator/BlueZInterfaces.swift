import BLE
import DBus

/// Interface names, and what each declares (for Introspect, signature checks and Properties.Set).
enum Interface {
    static let objectManager = "org.freedesktop.DBus.ObjectManager"
    static let properties = "org.freedesktop.DBus.Properties"
    static let introspectable = "org.freedesktop.DBus.Introspectable"
    static let agentManager = "org.bluez.AgentManager1"
    /// What agents implement; bluetoothd calls it, it does not serve it.
    static let agent = "org.bluez.Agent1"
    static let profileManager = "org.bluez.ProfileManager1"
    static let adapter = "org.bluez.Adapter1"
    static let device = "org.bluez.Device1"
    static let service = "org.bluez.GattService1"
    static let characteristic = "org.bluez.GattCharacteristic1"
    static let descriptor = "org.bluez.GattDescriptor1"
    static let control = "io.gattway.Simulator1"
    static let gattManager = "org.bluez.GattManager1"
    static let advertisingManager = "org.bluez.LEAdvertisingManager1"
    /// What advertisement objects implement; bluetoothd reads and calls it.
    static let advertisement = "org.bluez.LEAdvertisement1"

    struct Method { let name: String; let input: String; let output: String }
    struct Property { let name: String; let type: String; let writable: Bool }

    static let methods: [String: [Method]] = [
        objectManager: [Method(name: "GetManagedObjects", input: "", output: "a{oa{sa{sv}}}")],
        properties: [Method(name: "Get", input: "ss", output: "v"), Method(name: "Set", input: "ssv", output: ""),
                     Method(name: "GetAll", input: "s", output: "a{sv}")],
        introspectable: [Method(name: "Introspect", input: "", output: "s")],
        agentManager: [Method(name: "RegisterAgent", input: "os", output: ""), Method(name: "UnregisterAgent", input: "o", output: ""),
                       Method(name: "RequestDefaultAgent", input: "o", output: "")],
        profileManager: [Method(name: "RegisterProfile", input: "osa{sv}", output: ""),
                         Method(name: "UnregisterProfile", input: "o", output: "")],
        adapter: [Method(name: "StartDiscovery", input: "", output: ""), Method(name: "SetDiscoveryFilter", input: "a{sv}", output: ""),
                  Method(name: "StopDiscovery", input: "", output: ""), Method(name: "RemoveDevice", input: "o", output: ""),
                  Method(name: "GetDiscoveryFilters", input: "", output: "as")],
        device: [Method(name: "Disconnect", input: "", output: ""), Method(name: "Connect", input: "", output: ""),
                 Method(name: "ConnectProfile", input: "s", output: ""), Method(name: "DisconnectProfile", input: "s", output: ""),
                 Method(name: "Pair", input: "", output: ""), Method(name: "CancelPairing", input: "", output: "")],
        gattManager: [Method(name: "RegisterApplication", input: "oa{sv}", output: ""),
                      Method(name: "UnregisterApplication", input: "o", output: "")],
        advertisingManager: [Method(name: "RegisterAdvertisement", input: "oa{sv}", output: ""),
                             Method(name: "UnregisterAdvertisement", input: "o", output: "")],
        service: [],
        characteristic: [Method(name: "ReadValue", input: "a{sv}", output: "ay"), Method(name: "WriteValue", input: "aya{sv}", output: ""),
                         Method(name: "AcquireWrite", input: "a{sv}", output: "hq"), Method(name: "AcquireNotify", input: "a{sv}", output: "hq"),
                         Method(name: "StartNotify", input: "", output: ""), Method(name: "StopNotify", input: "", output: "")],
        descriptor: [Method(name: "ReadValue", input: "a{sv}", output: "ay"), Method(name: "WriteValue", input: "aya{sv}", output: "")],
        control: [Method(name: "SetFault", input: "ss", output: ""), Method(name: "ClearFaults", input: "s", output: ""),
                  Method(name: "DropLink", input: "s", output: ""), Method(name: "CallCount", input: "ss", output: "u"),
                  Method(name: "ResetCounters", input: "", output: ""), Method(name: "SetValue", input: "ssayb", output: ""),
                  Method(name: "SetServiceData", input: "ssay", output: ""),
                  Method(name: "SetServices", input: "ssb", output: ""), Method(name: "SetPairing", input: "ss", output: ""),
                  Method(name: "DisplayedPasskey", input: "s", output: "u"),
                  Method(name: "SetUART", input: "ss", output: ""), Method(name: "UARTStats", input: "s", output: "tttt"),
                  Method(name: "ResetUARTStats", input: "s", output: ""),
                  Method(name: "Restart", input: "u", output: ""), Method(name: "SetPowered", input: "b", output: ""),
                  Method(name: "EndDiscovery", input: "", output: ""),
                  Method(name: "SetAdapterPowered", input: "sb", output: ""), Method(name: "RemoveAdapter", input: "s", output: ""),
                  Method(name: "AddAdapter", input: "s", output: ""), Method(name: "SetRSSI", input: "ssn", output: ""),
                  Method(name: "CentralConnect", input: "ss", output: ""), Method(name: "CentralDisconnect", input: "ss", output: ""),
                  Method(name: "CentralRead", input: "sss", output: "ay"), Method(name: "CentralWrite", input: "sssayb", output: ""),
                  Method(name: "CentralSubscribe", input: "sssb", output: ""), Method(name: "CentralNotifications", input: "sss", output: "aay")],
    ]

    static let signals: [String: [(name: String, signature: String)]] = [
        objectManager: [("InterfacesAdded", "oa{sa{sv}}"), ("InterfacesRemoved", "oas")],
        properties: [("PropertiesChanged", "sa{sv}as")],
    ]

    /// Every property bluetoothd 5.66 declares (without --experimental), in its order; an
    /// object shows only those that exist for it (Name only when known, MTU only while connected...).
    static let propertyTable: [String: [Property]] = [
        adapter: [
            Property(name: "Address", type: "s", writable: false), Property(name: "AddressType", type: "s", writable: false),
            Property(name: "Name", type: "s", writable: false), Property(name: "Alias", type: "s", writable: true),
            Property(name: "Class", type: "u", writable: false), Property(name: "Powered", type: "b", writable: true),
            Property(name: "Discoverable", type: "b", writable: true), Property(name: "DiscoverableTimeout", type: "u", writable: true),
            Property(name: "Pairable", type: "b", writable: true), Property(name: "PairableTimeout", type: "u", writable: true),
            Property(name: "Discovering", type: "b", writable: false), Property(name: "UUIDs", type: "as", writable: false),
            Property(name: "Modalias", type: "s", writable: false), Property(name: "Roles", type: "as", writable: false),
        ],
        device: [
            Property(name: "Address", type: "s", writable: false), Property(name: "AddressType", type: "s", writable: false),
            Property(name: "Name", type: "s", writable: false), Property(name: "Alias", type: "s", writable: true),
            Property(name: "Class", type: "u", writable: false), Property(name: "Appearance", type: "q", writable: false),
            Property(name: "Icon", type: "s", writable: false),
            Property(name: "Paired", type: "b", writable: false), Property(name: "Bonded", type: "b", writable: false),
            Property(name: "Trusted", type: "b", writable: true), Property(name: "Blocked", type: "b", writable: true),
            Property(name: "LegacyPairing", type: "b", writable: false), Property(name: "RSSI", type: "n", writable: false),
            Property(name: "Connected", type: "b", writable: false), Property(name: "UUIDs", type: "as", writable: false),
            Property(name: "Modalias", type: "s", writable: false),
            Property(name: "Adapter", type: "o", writable: false), Property(name: "ManufacturerData", type: "a{qv}", writable: false),
            Property(name: "ServiceData", type: "a{sv}", writable: false), Property(name: "TxPower", type: "n", writable: false),
            Property(name: "ServicesResolved", type: "b", writable: false), Property(name: "WakeAllowed", type: "b", writable: true),
        ],
        advertisingManager: [
            Property(name: "ActiveInstances", type: "y", writable: false), Property(name: "SupportedInstances", type: "y", writable: false),
            Property(name: "SupportedIncludes", type: "as", writable: false),
        ],
        service: [
            Property(name: "UUID", type: "s", writable: false), Property(name: "Device", type: "o", writable: false),
            Property(name: "Primary", type: "b", writable: false), Property(name: "Includes", type: "ao", writable: false),
        ],
        characteristic: [
            Property(name: "UUID", type: "s", writable: false), Property(name: "Service", type: "o", writable: false),
            Property(name: "Value", type: "ay", writable: false), Property(name: "Notifying", type: "b", writable: false),
            Property(name: "Flags", type: "as", writable: false), Property(name: "WriteAcquired", type: "b", writable: false),
            Property(name: "NotifyAcquired", type: "b", writable: false), Property(name: "MTU", type: "q", writable: false),
        ],
        descriptor: [
            Property(name: "UUID", type: "s", writable: false), Property(name: "Characteristic", type: "o", writable: false),
            Property(name: "Value", type: "ay", writable: false),
        ],
    ]

    static func method(_ interface: String, _ member: String) -> Method? {
        methods[interface]?.first { $0.name == member }
    }

    static func property(_ interface: String, _ name: String) -> Property? {
        propertyTable[interface]?.first { $0.name == name }
    }

    /// The introspection XML of one object: its interfaces and its child nodes.
    static func introspection(interfaces: [String], children: [String]) -> String {
        var xml = "<!DOCTYPE node PUBLIC \"-//freedesktop//DTD D-BUS Object Introspection 1.0//EN\"\n"
            + "\"http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd\">\n<node>"
        for name in interfaces {
            xml += "<interface name=\"\(name)\">"
            for m in methods[name] ?? [] {
                xml += "<method name=\"\(m.name)\">"
                xml += arguments(m.input, direction: "in") + arguments(m.output, direction: "out")
                xml += "</method>"
            }
            for s in signals[name] ?? [] {
                xml += "<signal name=\"\(s.name)\">" + arguments(s.signature, direction: nil) + "</signal>"
            }
            for p in propertyTable[name] ?? [] {
                xml += "<property name=\"\(p.name)\" type=\"\(p.type)\" access=\"read\(p.writable ? "write" : "")\"></property>"
            }
            xml += "</interface>"
        }
        for child in children { xml += "<node name=\"\(child)\"/>" }
        return xml + "</node>"
    }

    private static func arguments(_ signature: String, direction: String?) -> String {
        completeTypes(signature).map { type in
            "<arg type=\"\(type)\"" + (direction.map { " direction=\"\($0)\"" } ?? "") + "/>"
        }.joined()
    }

    /// Splits a signature into its complete types: "aya{sv}" → ["ay", "a{sv}"].
    static func completeTypes(_ signature: String) -> [String] {
        var out: [String] = []
        var current = ""
        var depth = 0
        for c in signature {
            current.append(c)
            switch c {
            case "a": continue
            case "(", "{": depth += 1; continue
            case ")", "}": depth -= 1
            default: break
            }
            if depth == 0 {
                out.append(current)
                current = ""
            }
        }
        return out
    }
}

/// The errors bluetoothd answers with (src/error.c), and how it renders ATT error codes
/// (src/gatt-client.c, create_gatt_dbus_error).
enum BlueZError {
    static func failed(_ message: String) -> BusError { BusError(name: "org.bluez.Error.Failed", message: message) }
    static func notPermitted(_ message: String) -> BusError { BusError(name: "org.bluez.Error.NotPermitted", message: message) }
    static func invalidArguments(_ message: String = "Invalid arguments in method call") -> BusError {
        BusError(name: "org.bluez.Error.InvalidArguments", message: message)
    }
    static let inProgress = BusError(name: "org.bluez.Error.InProgress", message: "In Progress")
    static let busy = BusError(name: "org.bluez.Error.InProgress", message: "Operation already in progress")
    static let notSupported = BusError(name: "org.bluez.Error.NotSupported", message: "Operation is not supported")
    static let notConnected = BusError(name: "org.bluez.Error.NotConnected", message: "Not Connected")
    static let notReady = BusError(name: "org.bluez.Error.NotReady", message: "Resource Not Ready")
    static let doesNotExist = BusError(name: "org.bluez.Error.DoesNotExist", message: "Does Not Exist")
    static let alreadyExists = BusError(name: "org.bluez.Error.AlreadyExists", message: "Already Exists")
    static let notAuthorized = BusError(name: "org.bluez.Error.NotAuthorized", message: "Operation Not Authorized")
    static let authenticationCanceled = BusError(name: "org.bluez.Error.AuthenticationCanceled", message: "Authentication Canceled")
    static let authenticationFailed = BusError(name: "org.bluez.Error.AuthenticationFailed", message: "Authentication Failed")

    /// An ATT error response as bluetoothd reports it; 0 means the request got no response
    /// (the link went down).
    static func att(_ code: ATTErrorCode) -> BusError {
        switch code {
        case .readNotPermitted: notPermitted("Read not permitted")
        case .writeNotPermitted: notPermitted("Write not permitted")
        case .insufficientAuthentication, .insufficientEncryption, .insufficientEncryptionKeySize: notPermitted("Not paired")
        case .invalidOffset: invalidArguments("Invalid offset")
        case .invalidAttributeValueLength: invalidArguments("Invalid Length")
        case .insufficientAuthorization: notAuthorized
        case .requestNotSupported: notSupported
        case .success: failed("Operation failed")
        default: failed("Operation failed with ATT error: 0x" + hex4(UInt16(code.rawValue)).suffix(2))
        }
    }
}

/// libdbus's answers for calls nobody handles.
enum DBusError {
    static func unknownMethod(_ call: Message) -> BusError {
        BusError(name: "org.freedesktop.DBus.Error.UnknownMethod", message: describe(call))
    }
    static func unknownObject(_ call: Message) -> BusError {
        BusError(name: "org.freedesktop.DBus.Error.UnknownObject", message: describe(call))
    }
    static func invalidArgs(_ message: String) -> BusError {
        BusError(name: "org.freedesktop.DBus.Error.InvalidArgs", message: message)
    }
    private static func describe(_ call: Message) -> String {
        "Method \"\(call.member ?? "")\" with signature \"\(call.signature)\" on interface \"\(call.interface ?? "(null)")\" doesn't exist"
    }
}
