import BLE
import FuzzSupport
import Management

// The management socket's frame parser (Sources/Management): whatever the kernel (or a socket
// pretending to be it) delivers. Input: the bytes of one frame, as one read returns them; the
// same bytes are also read as advertising data alone.
//
// Properties:
// - parsing is a function of the bytes (the same bytes, the same event), and never traps;
// - a frame is accepted only when its header's length is what follows the header;
// - a device found's AD part is consistent with the frame's data length: kept, it is a prefix of
//   the data whose structures, one after the other, are exactly it, and only a zero length byte
//   (early termination) may follow it; dropped, the data does not split;
// - a device found encodes back to a frame that parses to the same event (less its dropped AD
//   part); its RSSI is a dBm value or none.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var input = FuzzInput(data, size)
    let bytes = input.rest()
    checkAdvertisingData(bytes)
    guard let event = try? Event(parsing: bytes) else { return 0 }
    require(event == (try? Event(parsing: bytes)), "the same frame parsed twice differently")
    require(bytes.count >= 6 && Int(bytes[4]) | Int(bytes[5]) << 8 == bytes.count - 6, "accepted a frame whose length is wrong")
    guard case .deviceFound(let found) = event else { return 0 }
    let fixed = 6 + (found.monitor == nil ? 0 : 2) + 14
    require(bytes.count >= fixed, "a device found shorter than its fixed fields")
    let declared = Int(bytes[fixed - 2]) | Int(bytes[fixed - 1]) << 8
    let advertised = Array(bytes[fixed...])
    require(declared == advertised.count, "the data length says \(declared), \(advertised.count) bytes follow")
    if found.advertisingDataDropped {
        require(found.advertisingData == .empty, "dropped advertising data still has bytes")
        require(AdvertisingData(parsing: advertised) == nil, "well-formed advertising data was dropped")
    } else {
        require(found.advertisingData == AdvertisingData(parsing: advertised), "the AD part is not the data's")
    }
    if let rssi = found.rssi { require((-128...126).contains(rssi), "RSSI \(rssi)") }
    // Encoded, a device found carries the AD it kept: one that dropped its AD part reads back without it.
    var sent = found
    sent.advertisingDataDropped = false
    require((try? Event(parsing: found.frame)) == .deviceFound(sent), "a device found does not survive its encoding")
    return 0
}

/// Advertising data splits into structures that are exactly its kept bytes, or not at all.
func checkAdvertisingData(_ data: [UInt8]) {
    guard let parsed = AdvertisingData(parsing: data) else { return }
    let kept = parsed.bytes
    require(kept == Array(data.prefix(kept.count)), "the kept bytes are not the data's start")
    require(kept.count == data.count || data[kept.count] == 0, "the data stopped before its end without a zero length")
    var rebuilt: [UInt8] = []
    for structure in parsed.structures {
        rebuilt += [UInt8(1 + structure.data.count), structure.type] + structure.data
    }
    require(rebuilt == kept, "the structures are not the kept bytes")
}
