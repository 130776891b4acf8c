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
// - a device found's or device connected's AD (EIR) part is consistent with the frame's data
//   length: kept, it is a prefix of the data whose structures, one after the other, are exactly
//   it, and only a zero length byte (early termination) may follow it; dropped, the data does
//   not split;
// - a device disconnected is exactly 8 parameter bytes;
// - an Index Added or Removed is a header alone, for a controller, and encodes back to exactly
//   the frame it came from;
// - a device event encodes back to a frame that parses to the same event (less its dropped AD
//   part); a device found's RSSI is a dBm value or none;
// - the same bytes read as an advertisement monitor's parameters (the simulator checks a client's
//   Add Advertisement Patterns Monitor as the kernel does) or as Read Advertisement Monitor
//   Features' answer: accepted, they encode back to what parses the same.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var input = FuzzInput(data, size)
    let bytes = input.rest()
    checkAdvertisingData(bytes)
    checkMonitorParameters(bytes)
    guard let event = try? Event(parsing: bytes) else { return 0 }
    require(event == (try? Event(parsing: bytes)), "the same frame parsed twice differently")
    require(bytes.count >= 6 && Int(bytes[4]) | Int(bytes[5]) << 8 == bytes.count - 6, "accepted a frame whose length is wrong")
    if case .index(let index) = event {
        require(bytes.count == 6 && index.controller != .none, "an index event with parameters, or for no controller")
        require(index.frame == bytes, "an index event does not encode back to its frame")
        let code = Int(bytes[0]) | Int(bytes[1]) << 8
        require(code == (index == .added(index.controller) ? 0x0004 : 0x0005), "an index event of code \(code)")
    }
    guard let device = ManagementEvent(event) else { return 0 }
    var sent = device
    switch device {
    case .deviceFound(let found):
        checkDataPart(bytes, fixed: 6 + (found.monitor == nil ? 0 : 2) + 14, found.advertisingData, dropped: found.advertisingDataDropped)
        if let rssi = found.rssi { require((-128...126).contains(rssi), "RSSI \(rssi)") }
        var kept = found
        kept.advertisingDataDropped = false
        sent = .deviceFound(kept)
    case .deviceConnected(let connected):
        checkDataPart(bytes, fixed: 6 + 13, connected.advertisingData, dropped: connected.advertisingDataDropped)
        var kept = connected
        kept.advertisingDataDropped = false
        sent = .deviceConnected(kept)
    case .deviceDisconnected:
        require(bytes.count == 6 + 8, "a device disconnected of \(bytes.count - 6) parameter bytes")
    }
    // Encoded, an event carries the AD it kept: one that dropped its AD part reads back without it.
    require((try? Event(parsing: device.frame)).flatMap(ManagementEvent.init) == sent, "a device event does not survive its encoding")
    return 0
}

/// An event's AD part after `fixed` bytes (its u16 length the last two of them): the length is
/// what follows, and the parsed data is that, or dropped because it does not split.
func checkDataPart(_ bytes: [UInt8], fixed: Int, _ parsed: AdvertisingData, dropped: Bool) {
    require(bytes.count >= fixed, "a device event shorter than its fixed fields")
    let declared = Int(bytes[fixed - 2]) | Int(bytes[fixed - 1]) << 8
    let advertised = Array(bytes[fixed...])
    require(declared == advertised.count, "the data length says \(declared), \(advertised.count) bytes follow")
    if dropped {
        require(parsed == .empty, "dropped advertising data still has bytes")
        require(AdvertisingData(parsing: advertised) == nil, "well-formed advertising data was dropped")
    } else {
        require(parsed == AdvertisingData(parsing: advertised), "the AD part is not the data's")
    }
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

/// Monitor parameters and answers: what parses re-encodes to what parses the same.
func checkMonitorParameters(_ bytes: [UInt8]) {
    if let patterns = AdvertisementMonitor.patterns(parsing: bytes) {
        require(!patterns.isEmpty && patterns.count <= AdvertisementMonitor.maxPatterns, "\(patterns.count) patterns accepted")
        require(patterns.allSatisfy { !$0.value.isEmpty && Int($0.offset) + $0.value.count <= AdvertisementPattern.maxLength },
                "a pattern past the advertisement accepted")
        require(AdvertisementMonitor.patterns(parsing: AdvertisementMonitor.addParameters(patterns)) == patterns,
                "monitor patterns do not survive their encoding")
    }
    if let features = AdvertisementMonitorFeatures(parameters: bytes) {
        require(features.parameters == bytes, "the features answer does not encode back to its bytes")
    }
}
