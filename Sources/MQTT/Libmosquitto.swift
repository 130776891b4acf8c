import CMosquitto

/// libmosquitto's functions, opened at the first `MQTTClient` (not linked: see CMosquitto's
/// shim.h); why not, when the library is not installed.
let libmosquitto: Result<gw_mosquitto, MQTTError> = {
    let table = UnsafeMutablePointer<gw_mosquitto>.allocate(capacity: 1)
    defer { table.deallocate() }
    if let error = gw_mosquitto_load(table) {
        return .failure(MQTTError("cannot load \(GW_MOSQUITTO_LIBRARY): \(String(cString: error))"
                                  + " (--mqtt needs libmosquitto: Debian's package libmosquitto1)"))
    }
    _ = table.pointee.lib_init()
    return .success(table.pointee)
}()

extension gw_mosquitto {
    /// libmosquitto's text for an error code (`MOSQ_ERR_*`).
    func text(_ rc: Int32) -> String { strerror(rc).map { String(cString: $0) } ?? "error \(rc)" }
}
