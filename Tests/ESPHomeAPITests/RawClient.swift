import Glibc

@testable import ESPHomeAPI

/// A blocking TCP client on loopback, with a receive timeout: what a test sends and reads raw.
final class RawClient {
    let fd: Int32

    /// - Parameter receiveBuffer: SO_RCVBUF before connecting (a small one makes a client that
    ///   does not read fill the server's buffer soon).
    init(port: UInt16, host: UInt32 = 0x7F00_0001, receiveBuffer: Int32? = nil) {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        if var size = receiveBuffer {
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let connected = Self.connect(fd, host: host, port: port)
        precondition(connected == 0, "connect: \(errno)")
    }

    /// Whether a TCP socket listens on exactly `host`:`port` (the kernel's list, /proc/net/tcp).
    /// Not a connect: a test beside this one listening on every address (0.0.0.0) may have been
    /// given the same port once it was free, and would take the connection.
    static func isListening(port: UInt16, host: UInt32) -> Bool {
        guard let file = fopen("/proc/net/tcp", "r") else { return false }
        defer { fclose(file) }
        // The address as the kernel prints it: the bytes in memory (network order) as a
        // little-endian number, then the port; state 0A is LISTEN.
        let address = hex(host.bigEndian.littleEndian, digits: 8) + ":" + hex(UInt32(port), digits: 4)
        var line: UnsafeMutablePointer<CChar>?
        var capacity = 0
        defer { free(line) }
        while getline(&line, &capacity, file) > 0, let line {
            let fields = String(cString: line).split(separator: " ")
            if fields.count > 3, fields[1] == address, fields[3] == "0A" { return true }
        }
        return false
    }

    private static func hex(_ value: UInt32, digits: Int) -> String {
        let text = String(value, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, digits - text.count)) + text
    }

    private static func connect(_ fd: Int32, host: UInt32, port: UInt16) -> Int32 {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = host.bigEndian
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
    }

    deinit { close(fd) }

    func send(_ bytes: [UInt8]) {
        _ = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// Exactly `count` bytes; fewer when the server closed (or 5 s passed) first.
    func read(_ count: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while bytes.count < count {
            let n = recv(fd, &chunk, min(chunk.count, count - bytes.count), 0)
            guard n > 0 else { break }
            bytes += chunk[..<n]
        }
        return bytes
    }

    /// Everything until the server closes (or 5 s pass).
    func readToEnd() -> [UInt8] {
        read(1 << 20)
    }

    /// One plaintext frame: (type, payload), nil when the connection ended first.
    func readPlaintext() -> (type: UInt16, payload: [UInt8])? {
        guard read(1) == [0] else { return nil }
        func varint() -> UInt64? {
            var value: UInt64 = 0
            for shift in stride(from: 0, to: 35, by: 7) {
                guard let byte = read(1).first else { return nil }
                value |= UInt64(byte & 0x7F) << UInt64(shift)
                if byte & 0x80 == 0 { return value }
            }
            return nil
        }
        guard let length = varint(), let type = varint() else { return nil }
        let payload = read(Int(length))
        return payload.count == Int(length) ? (UInt16(type), payload) : nil
    }

    /// One Noise frame's bytes, nil when the connection ended first.
    func readNoise() -> [UInt8]? {
        let header = read(3)
        guard header.count == 3, header[0] == 1 else { return nil }
        let length = Int(header[1]) << 8 | Int(header[2])
        let body = read(length)
        return body.count == length ? body : nil
    }
}
