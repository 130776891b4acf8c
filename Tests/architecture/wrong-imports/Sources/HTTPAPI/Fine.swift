import GatewayCore
import HTTPServer

// Allowed: a door on the core and its transport.
