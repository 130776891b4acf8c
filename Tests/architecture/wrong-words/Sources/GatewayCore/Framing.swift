import BLE

// The core framing Server-Sent Events and naming a door in its API.
struct StreamClient {
    var isSSE: Bool
    func head(_ seq: UInt64) -> [UInt8] { Array("id: \(seq)\nevent: notification\ndata: ".utf8) }
    func holdForREST() {}
}
