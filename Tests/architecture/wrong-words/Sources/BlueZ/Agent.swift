import BLE
import DBus

/// Answers come from a client (which door's route it took is the door's business).
func asks(_ id: String, log: (String) -> Void) {
    log("\(id): waiting for POST /v1/devices/\(id)/pairing")
    /* a block comment may say POST /v1/devices/{id}/pairing; /* nested */ still a comment: HTTP */
    log("\(id): waiting for a client's answer")
}
