import CDBus

/// Conversion between `Message` and libdbus's `DBusMessage`. Only the connection's
/// thread calls these.
enum Marshal {
    /// Builds a libdbus message; throws instead of letting libdbus abort on bad input.
    static func build(_ message: Message) throws(BusError) -> OpaquePointer {
        let type: Int32
        switch message.kind {
        case .methodCall: type = Int32(GW_DBUS_MESSAGE_TYPE_METHOD_CALL)
        case .methodReturn: type = Int32(GW_DBUS_MESSAGE_TYPE_METHOD_RETURN)
        case .error: type = Int32(GW_DBUS_MESSAGE_TYPE_ERROR)
        case .signal: type = Int32(GW_DBUS_MESSAGE_TYPE_SIGNAL)
        }
        try check(message)
        guard let raw = dbus_message_new(type) else { throw .noMemory() }
        var ok = true
        if let p = message.path { ok = ok && dbus_message_set_path(raw, p.rawValue) != 0 }
        if let i = message.interface { ok = ok && dbus_message_set_interface(raw, i) != 0 }
        if let m = message.member { ok = ok && dbus_message_set_member(raw, m) != 0 }
        if let e = message.errorName { ok = ok && dbus_message_set_error_name(raw, e) != 0 }
        if let d = message.destination { ok = ok && dbus_message_set_destination(raw, d) != 0 }
        if message.replySerial != 0 { ok = ok && dbus_message_set_reply_serial(raw, message.replySerial) != 0 }
        if message.noReplyExpected || message.kind != .methodCall { dbus_message_set_no_reply(raw, 1) }
        var iter = DBusMessageIter()
        dbus_message_iter_init_append(raw, &iter)
        for value in message.body { ok = ok && append(value, to: &iter) }
        guard ok else {
            dbus_message_unref(raw)
            throw .noMemory()
        }
        return raw
    }

    /// Reads a libdbus message (borrowed; not unreferenced here).
    static func parse(_ raw: OpaquePointer) -> Message {
        let kind: Message.Kind
        switch dbus_message_get_type(raw) {
        case Int32(GW_DBUS_MESSAGE_TYPE_METHOD_CALL): kind = .methodCall
        case Int32(GW_DBUS_MESSAGE_TYPE_METHOD_RETURN): kind = .methodReturn
        case Int32(GW_DBUS_MESSAGE_TYPE_ERROR): kind = .error
        default: kind = .signal
        }
        var body: [Value] = []
        var iter = DBusMessageIter()
        if dbus_message_iter_init(raw, &iter) != 0 {
            repeat {
                body.append(read(&iter))
            } while dbus_message_iter_next(&iter) != 0
        }
        var m = Message(kind: kind,
                        path: dbus_message_get_path(raw).map { ObjectPath(valid: String(cString: $0)) },
                        interface: dbus_message_get_interface(raw).map { String(cString: $0) },
                        member: dbus_message_get_member(raw).map { String(cString: $0) },
                        errorName: dbus_message_get_error_name(raw).map { String(cString: $0) },
                        destination: dbus_message_get_destination(raw).map { String(cString: $0) },
                        body: body)
        m.sender = dbus_message_get_sender(raw).map { String(cString: $0) }
        m.serial = dbus_message_get_serial(raw)
        m.replySerial = dbus_message_get_reply_serial(raw)
        m.noReplyExpected = dbus_message_get_no_reply(raw) != 0
        return m
    }

    // MARK: - Validation

    static func check(_ message: Message) throws(BusError) {
        if let i = message.interface, !Validate.interface(i) { throw .invalidArgs("invalid interface name \"\(i)\"") }
        if let m = message.member, !Validate.member(m) { throw .invalidArgs("invalid member name \"\(m)\"") }
        if let e = message.errorName, !Validate.errorName(e) { throw .invalidArgs("invalid error name \"\(e)\"") }
        if let d = message.destination, !Validate.busName(d) { throw .invalidArgs("invalid bus name \"\(d)\"") }
        switch message.kind {
        case .methodCall where message.path == nil || message.member == nil:
            throw .invalidArgs("a method call needs a path and a member")
        case .signal where message.path == nil || message.interface == nil || message.member == nil:
            throw .invalidArgs("a signal needs a path, an interface and a member")
        case .error where message.errorName == nil:
            throw .invalidArgs("an error needs an error name")
        default: break
        }
        for value in message.body { try check(value) }
    }

    /// Every string valid UTF-8 without NUL; every container element of its declared type.
    static func check(_ value: Value) throws(BusError) {
        switch value {
        case .string(let s):
            if !Validate.utf8(s) { throw .invalidArgs("string is not valid UTF-8 or contains NUL") }
        case .array(let element, let items):
            for item in items {
                guard item.signature == element else {
                    throw .invalidArgs("array of \(element) holds a \(item.signature)")
                }
                try check(item)
            }
        case .dictionary(let k, let v, let entries):
            guard k.rawValue.count == 1, !"av(".contains(k.rawValue) else {
                throw .invalidArgs("dictionary key must be a basic type, not \(k)")
            }
            for entry in entries {
                guard entry.key.signature == k, entry.value.signature == v else {
                    throw .invalidArgs("dictionary of {\(k)\(v)} holds {\(entry.key.signature)\(entry.value.signature)}")
                }
                try check(entry.key)
                try check(entry.value)
            }
        case .structure(let fields):
            if fields.isEmpty { throw .invalidArgs("empty structure") }
            for f in fields { try check(f) }
        case .variant(let inner):
            try check(inner)
        default:
            break
        }
    }

    // MARK: - Writing

    private static func append(_ value: Value, to iter: inout DBusMessageIter) -> Bool {
        func basic<T: BitwiseCopyable>(_ type: Int32, _ v: T) -> Bool {
            var copy = v
            return dbus_message_iter_append_basic(&iter, type, &copy) != 0
        }
        func string(_ type: Int32, _ s: String) -> Bool {
            s.withCString { ptr in
                var p: UnsafePointer<CChar>? = ptr
                return dbus_message_iter_append_basic(&iter, type, &p) != 0
            }
        }
        func container(_ type: Int32, _ signature: String?, _ body: (inout DBusMessageIter) -> Bool) -> Bool {
            var sub = DBusMessageIter()
            let opened: Bool
            if let signature {
                opened = signature.withCString { dbus_message_iter_open_container(&iter, type, $0, &sub) != 0 }
            } else {
                opened = dbus_message_iter_open_container(&iter, type, nil, &sub) != 0
            }
            guard opened else { return false }
            guard body(&sub) else {
                dbus_message_iter_abandon_container(&iter, &sub)
                return false
            }
            return dbus_message_iter_close_container(&iter, &sub) != 0
        }

        switch value {
        case .byte(let v): return basic(Int32(GW_DBUS_TYPE_BYTE), v)
        case .bool(let v): return basic(Int32(GW_DBUS_TYPE_BOOLEAN), dbus_bool_t(v ? 1 : 0))
        case .int16(let v): return basic(Int32(GW_DBUS_TYPE_INT16), v)
        case .uint16(let v): return basic(Int32(GW_DBUS_TYPE_UINT16), v)
        case .int32(let v): return basic(Int32(GW_DBUS_TYPE_INT32), v)
        case .uint32(let v): return basic(Int32(GW_DBUS_TYPE_UINT32), v)
        case .int64(let v): return basic(Int32(GW_DBUS_TYPE_INT64), v)
        case .uint64(let v): return basic(Int32(GW_DBUS_TYPE_UINT64), v)
        case .double(let v): return basic(Int32(GW_DBUS_TYPE_DOUBLE), v)
        case .unixFD(let fd): return basic(Int32(GW_DBUS_TYPE_UNIX_FD), fd)
        case .string(let s): return string(Int32(GW_DBUS_TYPE_STRING), s)
        case .objectPath(let p): return string(Int32(GW_DBUS_TYPE_OBJECT_PATH), p.rawValue)
        case .signature(let g): return string(Int32(GW_DBUS_TYPE_SIGNATURE), g.rawValue)
        case .bytes(let bytes):
            return container(Int32(GW_DBUS_TYPE_ARRAY), "y") { sub in
                bytes.withUnsafeBufferPointer { buffer in
                    var base = buffer.baseAddress
                    if base == nil { return true }
                    return dbus_message_iter_append_fixed_array(&sub, Int32(GW_DBUS_TYPE_BYTE), &base,
                                                                Int32(buffer.count)) != 0
                }
            }
        case .array(let element, let items):
            return container(Int32(GW_DBUS_TYPE_ARRAY), element.rawValue) { sub in
                items.allSatisfy { append($0, to: &sub) }
            }
        case .dictionary(let k, let v, let entries):
            return container(Int32(GW_DBUS_TYPE_ARRAY), "{\(k.rawValue)\(v.rawValue)}") { sub in
                entries.allSatisfy { entry in
                    var entryIter = DBusMessageIter()
                    guard dbus_message_iter_open_container(&sub, Int32(GW_DBUS_TYPE_DICT_ENTRY), nil, &entryIter) != 0
                    else { return false }
                    guard append(entry.key, to: &entryIter), append(entry.value, to: &entryIter) else {
                        dbus_message_iter_abandon_container(&sub, &entryIter)
                        return false
                    }
                    return dbus_message_iter_close_container(&sub, &entryIter) != 0
                }
            }
        case .structure(let fields):
            return container(Int32(GW_DBUS_TYPE_STRUCT), nil) { sub in fields.allSatisfy { append($0, to: &sub) } }
        case .variant(let inner):
            return container(Int32(GW_DBUS_TYPE_VARIANT), inner.signature.rawValue) { sub in append(inner, to: &sub) }
        }
    }

    // MARK: - Reading

    private static func read(_ iter: inout DBusMessageIter) -> Value {
        func basic<T: BitwiseCopyable>(_ zero: T) -> T {
            var v = zero
            dbus_message_iter_get_basic(&iter, &v)
            return v
        }
        func string() -> String {
            var p: UnsafePointer<CChar>? = nil
            dbus_message_iter_get_basic(&iter, &p)
            return p.map { String(cString: $0) } ?? ""
        }
        func children(_ sub: inout DBusMessageIter) -> [Value] {
            var out: [Value] = []
            while dbus_message_iter_get_arg_type(&sub) != Int32(GW_DBUS_TYPE_INVALID) {
                out.append(read(&sub))
                dbus_message_iter_next(&sub)
            }
            return out
        }

        let type = dbus_message_iter_get_arg_type(&iter)
        switch type {
        case Int32(GW_DBUS_TYPE_BYTE): return .byte(basic(UInt8(0)))
        case Int32(GW_DBUS_TYPE_BOOLEAN): return .bool(basic(dbus_bool_t(0)) != 0)
        case Int32(GW_DBUS_TYPE_INT16): return .int16(basic(Int16(0)))
        case Int32(GW_DBUS_TYPE_UINT16): return .uint16(basic(UInt16(0)))
        case Int32(GW_DBUS_TYPE_INT32): return .int32(basic(Int32(0)))
        case Int32(GW_DBUS_TYPE_UINT32): return .uint32(basic(UInt32(0)))
        case Int32(GW_DBUS_TYPE_INT64): return .int64(basic(Int64(0)))
        case Int32(GW_DBUS_TYPE_UINT64): return .uint64(basic(UInt64(0)))
        case Int32(GW_DBUS_TYPE_DOUBLE): return .double(basic(Double(0)))
        case Int32(GW_DBUS_TYPE_UNIX_FD): return .unixFD(basic(Int32(-1)))
        case Int32(GW_DBUS_TYPE_STRING): return .string(string())
        case Int32(GW_DBUS_TYPE_OBJECT_PATH): return .objectPath(ObjectPath(valid: string()))
        case Int32(GW_DBUS_TYPE_SIGNATURE): return .signature(Signature(trusted: string()))
        case Int32(GW_DBUS_TYPE_VARIANT):
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            return .variant(read(&sub))
        case Int32(GW_DBUS_TYPE_STRUCT):
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            return .structure(children(&sub))
        case Int32(GW_DBUS_TYPE_ARRAY):
            // The element's signature is taken from the first element read (values carry their
            // types); libdbus is asked for it (a string it allocates) only for an empty array.
            let elementType = dbus_message_iter_get_element_type(&iter)
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            if elementType == Int32(GW_DBUS_TYPE_BYTE) {
                var ptr: UnsafeRawPointer? = nil
                var count: Int32 = 0
                dbus_message_iter_get_fixed_array(&sub, &ptr, &count)
                guard let ptr, count > 0 else { return .bytes([]) }
                return .bytes(Array(UnsafeBufferPointer(start: ptr.assumingMemoryBound(to: UInt8.self),
                                                        count: Int(count))))
            }
            if elementType == Int32(GW_DBUS_TYPE_DICT_ENTRY) {
                var entries: [Value.DictionaryEntry] = []
                while dbus_message_iter_get_arg_type(&sub) == Int32(GW_DBUS_TYPE_DICT_ENTRY) {
                    var entryIter = DBusMessageIter()
                    dbus_message_iter_recurse(&sub, &entryIter)
                    let key = read(&entryIter)
                    dbus_message_iter_next(&entryIter)
                    let value = read(&entryIter)
                    entries.append(.init(key, value))
                    dbus_message_iter_next(&sub)
                }
                if let first = entries.first {
                    return .dictionary(key: first.key.signature, value: first.value.signature, entries)
                }
                let inner = currentSignature(&iter).dropFirst(2).dropLast()
                return .dictionary(key: Signature(trusted: String(inner.prefix(1))), value: Signature(trusted: String(inner.dropFirst())), [])
            }
            let items = children(&sub)
            if let first = items.first { return .array(element: first.signature, items) }
            return .array(element: Signature(trusted: String(currentSignature(&iter).dropFirst())), [])
        default:
            return .structure([])
        }
    }

    private static func currentSignature(_ iter: inout DBusMessageIter) -> String {
        guard let sig = dbus_message_iter_get_signature(&iter) else { return "" }
        defer { dbus_free(sig) }
        return String(cString: sig)
    }
}
