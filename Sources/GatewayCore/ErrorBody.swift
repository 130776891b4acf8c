import BLE

/// The documented error body: `{"error": {domain, code, name, message, detail}}`.
package struct ErrorBody: Encodable {
    package struct Content: Encodable {
        package var domain: String
        package var code: Int
        package var name: String
        package var message: String
        package var detail: String?
    }
    package var error: Content

    package init(_ error: BLEError) {
        self.error = Content(domain: error.domain.rawValue, code: error.numericCode, name: error.name,
                             message: error.message, detail: error.detail)
    }
}
