import GatewayCore

// The model reaching up.
