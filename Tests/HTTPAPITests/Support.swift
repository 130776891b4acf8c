import GatewayCore
import HTTPServer
@testable import HTTPAPI

extension Gateway {
    /// The HTTP API's routes over this core, as gattway serves them (without access control).
    func router() -> Router { API(gateway: self).router() }
}
