import GatewayCore

// A door names its own route and transport: allowed.
struct SSETransport { let route = "GET /v1/events"; var isSSE: Bool { true } }
