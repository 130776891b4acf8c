import GatewayCore
@testable import HTTPAPI

// One door reaching into another.
