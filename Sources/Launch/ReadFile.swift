import Glibc

/// A whole file as UTF-8 text, nil if it cannot be read (errno then says why): what reads the
/// configuration file, the tokens and the keys files.
package func readFile(_ path: String) -> String? {
    guard let file = fopen(path, "r") else { return nil }
    defer { fclose(file) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 4096)
    while true {
        let count = fread(&chunk, 1, chunk.count, file)
        if count > 0 { bytes += chunk[..<count] }
        if count < chunk.count { break }
    }
    return ferror(file) == 0 ? String(decoding: bytes, as: UTF8.self) : nil
}
