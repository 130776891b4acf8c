import BLE
import CDBus
import FuzzSupport
@testable import BlueZ
@testable import DBus
@testable import HTTPServer

// The parsers between a client's text and D-Bus, where an invalid object path or name makes
// libdbus abort the process. Input: a byte choosing the parser, then its text.
//
// Properties, each parser's accepted set stated independently as a regular expression (the
// documented forms) and compared with what the parser takes:
// - BluetoothUUID: accepts exactly the documented forms; an accepted UUID round-trips through
//   its canonical form, its short form and its bytes, and has the value its digits say;
// - BluetoothAddress: accepts exactly six hex pairs with one kind of separator; it round-trips,
//   and the device object path made from it is one libdbus takes (a method call to it is built)
//   and gives the address back;
// - AttributeSelector: "0x" and four hex digits is that handle, anything else a UUID exactly
//   when BluetoothUUID takes it;
// - ObjectPath: valid exactly when the D-Bus specification's grammar says so; parent, child and
//   lastElement stay valid and agree, and libdbus takes every path accepted;
// - D-Bus messages with names and a string argument from the input: built, or refused with
//   invalidArgs, never an abort;
// - request paths: decoded into as many segments as the raw path has slashes, and encoding the
//   segments again gives them back.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var input = FuzzInput(data, size)
    switch input.choice(6) {
    case 0: uuid(input.restString())
    case 1: address(input.restString())
    case 2: selector(input.restString())
    case 3: objectPath(input.string(), element: input.restString())
    case 4: message(path: input.string(), interface: input.string(), member: input.string(), argument: input.restString())
    default: requestPath(input.restString())
    }
    return 0
}

/// The documented forms, each matched whole. Built once: Regex is not Sendable, and libFuzzer
/// calls the target from one thread.
enum Form {
    /// 16 or 32 bits, optionally 0x-prefixed.
    nonisolated(unsafe) static let shortUUID = #/(0[xX])?([0-9A-Fa-f]{4}|[0-9A-Fa-f]{8})/#
    /// 128 bits, bare or dashed 8-4-4-4-12.
    nonisolated(unsafe) static let longUUID = #/[0-9A-Fa-f]{32}|[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}/#
    /// What BlueZ writes.
    nonisolated(unsafe) static let canonicalUUID = #/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/#
    /// Six hex pairs, one kind of separator.
    nonisolated(unsafe) static let address = #/[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}|[0-9A-Fa-f]{2}(-[0-9A-Fa-f]{2}){5}/#
    /// BlueZ's device element.
    nonisolated(unsafe) static let devicePathElement = #/dev(_[0-9A-Fa-f]{2}){6}/#
    /// An attribute handle.
    nonisolated(unsafe) static let handle = #/0[xX][0-9A-Fa-f]{4}/#
    /// The D-Bus specification's grammar.
    nonisolated(unsafe) static let objectPath = #/\/|(\/[A-Za-z0-9_]+)+/#
    /// One element of an object path.
    nonisolated(unsafe) static let pathElement = #/[A-Za-z0-9_]+/#
}

func uuid(_ text: String) {
    let short = matches(text, Form.shortUUID)
    let long = matches(text, Form.longUUID)
    guard let uuid = BluetoothUUID(text) else {
        require(!short && !long, "\"\(text)\" is a documented UUID form and was refused")
        return
    }
    require(short || long, "\"\(text)\" was accepted as the UUID \(uuid)")
    let canonical = uuid.uuidString
    require(matches(canonical, Form.canonicalUUID), "canonical form \(canonical)")
    require(BluetoothUUID(canonical) == uuid, "\(canonical) does not read back")
    require(BluetoothUUID(bytes: uuid.bytes) == uuid, "the bytes of \(canonical) do not read back")
    if let shortForm = uuid.shortForm { require(BluetoothUUID(shortForm) == uuid, "short form \(shortForm) of \(canonical)") }
    let digits = text.lowercased().filter { $0 != "-" }
    if short {
        let value = UInt32(digits.hasPrefix("0x") ? digits.dropFirst(2) : digits[...], radix: 16)
        require(value != nil && uuid.uint32 == value, "\"\(text)\" read as \(canonical)")
    } else {
        require(canonical.filter { $0 != "-" } == digits, "\"\(text)\" read as \(canonical)")
    }
    // The canonical form is what goes to BlueZ as a D-Bus string (discovery filter UUIDs).
    require(Validate.utf8(canonical), "\(canonical) is not a D-Bus string")
}

/// The path of hci0's device `address`, as the central makes it.
let adapter = ObjectPath(trusted: "/org/bluez/hci0")

func address(_ text: String) {
    let valid = matches(text, Form.address)
    let element = BlueZ.address(pathElement: text[...])
    require((element != nil) == matches(text, Form.devicePathElement), "\"\(text)\" as a device path element: \(element.map(String.init) ?? "refused")")
    guard let address = BluetoothAddress(text) else {
        require(!valid, "\"\(text)\" is an address and was refused")
        return
    }
    require(valid, "\"\(text)\" was accepted as the address \(address)")
    require(address.description == String(text.uppercased().map { $0 == "-" ? ":" : $0 }), "\"\(text)\" read as \(address)")
    require(BluetoothAddress(address.description) == address, "\(address) does not read back")
    guard let path = adapter.child(BlueZ.pathElement(address)) else {
        require(false, "no device path for \(address)")
        return
    }
    require(specPath(path.rawValue), "device path \(path) breaks the D-Bus grammar")
    require(BlueZ.address(pathElement: path.lastElement) == address, "device path \(path) does not give \(address) back")
    build(.methodCall(destination: BlueZ.service, path: path, interface: BlueZ.deviceInterface, member: "Connect"), mustSucceed: true)
}

func selector(_ text: String) {
    let handle = matches(text, Form.handle)
    let selector = AttributeSelector(text)
    switch selector {
    case .handle(let value):
        require(handle, "\"\(text)\" was accepted as the handle \(AttributeSelector.format(value))")
        require(AttributeSelector.format(value) == text.lowercased(), "\"\(text)\" read as \(AttributeSelector.format(value))")
    case .uuid(let uuid):
        require(!handle && BluetoothUUID(text) == uuid, "\"\(text)\" read as the UUID \(uuid)")
    case nil:
        require(!handle && BluetoothUUID(text) == nil, "\"\(text)\" was refused")
    }
}

/// The D-Bus specification's object path: "/", or "/"-prefixed elements of [A-Za-z0-9_]+.
func specPath(_ text: String) -> Bool {
    matches(text, Form.objectPath)
}

func objectPath(_ text: String, element: String) {
    guard let path = ObjectPath(text) else {
        require(!specPath(text), "\"\(text)\" is a valid object path and was refused")
        return
    }
    require(specPath(text), "\"\(text)\" was accepted as an object path")
    build(.methodCall(destination: BlueZ.service, path: path, interface: BlueZ.deviceInterface, member: "Connect"), mustSucceed: true)
    var ancestor = path
    while let parent = ancestor.parent {
        require(path.isDescendant(of: parent) && ancestor.rawValue.hasPrefix(parent.rawValue), "\(parent) as the parent of \(ancestor)")
        ancestor = parent
    }
    require(ancestor == .root, "the ancestors of \(path) end at \(ancestor)")
    let child = path.child(element)
    require((child != nil) == matches(element, Form.pathElement), "child \"\(element)\" of \(path): \(child.map(String.init) ?? "refused")")
    if let child {
        require(child.parent == path && child.lastElement == element && child.isDescendant(of: path), "child \(child) of \(path)")
    }
}

func message(path: String, interface: String, member: String, argument: String) {
    let message = Message(kind: .methodCall, path: ObjectPath(path) ?? BlueZ.root, interface: interface, member: member,
                          destination: BlueZ.service, body: [.string(argument), .strings([argument, interface])])
    build(message, mustSucceed: false)
}

/// Hands `message` to libdbus, which aborts on an invalid one: it is built, or refused before.
func build(_ message: Message, mustSucceed: Bool) {
    do {
        dbus_message_unref(try Marshal.build(message))
    } catch {
        require(!mustSucceed && error.name == "org.freedesktop.DBus.Error.InvalidArgs", "\(message) refused: \(error)")
    }
}

func requestPath(_ raw: String) {
    guard let segments = RequestTarget.decodePath(raw) else {
        require(raw.utf8.first != UInt8(ascii: "/") || raw.utf8.contains(UInt8(ascii: "%")), "\"\(raw)\" has nothing to decode and was refused")
        return
    }
    let slashes = raw.utf8.count { $0 == UInt8(ascii: "/") }
    require(segments.count == (raw == "/" ? 0 : slashes), "\"\(raw)\" decoded into \(segments.count) segments")
    let encoded = "/" + segments.map(percentEncoded).joined(separator: "/")
    require(RequestTarget.decodePath(encoded) == segments, "\(segments) encoded as \"\(encoded)\" decode differently")
}

let unreserved = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~".utf8)

/// Every byte but the unreserved ones as %XX, as a careful client sends a path segment.
func percentEncoded(_ segment: String) -> String {
    var out = ""
    for byte in segment.utf8 {
        if unreserved.contains(byte) {
            out.unicodeScalars.append(UnicodeScalar(byte))
        } else {
            out += "%" + String(byte >> 4, radix: 16, uppercase: true) + String(byte & 0xF, radix: 16, uppercase: true)
        }
    }
    return out
}
