import BLE
import HTTPServer

// The core reaching for a transport.
