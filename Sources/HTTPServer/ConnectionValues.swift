import CMicroHTTPD

extension ServerCore {
    /// The complete request as handlers see it, read from MHD on the I/O thread.
    func readRequest(
        connection: OpaquePointer, url: UnsafePointer<CChar>?, method: UnsafePointer<CChar>?,
        version: UnsafePointer<CChar>?, body: [UInt8]
    ) -> Result<Request, ServerError> {
        let rawPath = url.map { String(cString: $0) } ?? ""
        guard let segments = RequestTarget.decodePath(rawPath) else {
            return .failure(.badRequest(
                rawPath.first == "/"
                    ? "malformed percent-encoding in the path" : "the request target is not an absolute path"))
        }
        var queryItems: [(name: String, value: String)] = []
        for (name, value) in connectionValues(connection, .GET_ARGUMENT_KIND) {
            guard let name = RequestTarget.percentDecode(name), let value = RequestTarget.percentDecode(value ?? "")
            else { return .failure(.badRequest("malformed percent-encoding in the query")) }
            queryItems.append((name: name, value: value))
        }
        let headers = connectionValues(connection, .HEADER_KIND).map { (name: $0.name, value: $0.value ?? "") }
        return .success(Request(
            method: method.map { String(cString: $0) } ?? "",
            pathSegments: segments,
            queryItems: queryItems,
            headers: headers,
            body: body,
            remoteAddress: gw_mhd_client_address(connection).map(describePeer) ?? "",
            httpVersion: version.map { String(cString: $0) } ?? ""))
    }
}

/// A request header's value by case-insensitive name.
func headerValue(_ connection: OpaquePointer, _ name: String) -> String? {
    MHD_lookup_connection_value(connection, .HEADER_KIND, name).map { String(cString: $0) }
}

/// Headers or query arguments in the order received; a query argument without `=` has no value.
private func connectionValues(_ connection: OpaquePointer, _ kind: MHD_ValueKind) -> [(name: String, value: String?)] {
    var pairs: [(name: String, value: String?)] = []
    withUnsafeMutablePointer(to: &pairs) { pairs in
        _ = MHD_get_connection_values(connection, kind, collectPair, pairs)
    }
    return pairs
}

private func collectPair(
    cls: UnsafeMutableRawPointer?, kind: MHD_ValueKind, key: UnsafePointer<CChar>?, value: UnsafePointer<CChar>?
) -> MHD_Result {
    guard let cls, let key else { return .YES }
    cls.assumingMemoryBound(to: [(name: String, value: String?)].self).pointee.append(
        (name: String(cString: key), value: value.map { String(cString: $0) }))
    return .YES
}
