import BLE
import FoundationEssentials
import Glibc

extension Options {
    /// The GATT blocklist in force: the default list unless left out, and each `--blocklist` file.
    /// A file that cannot be read or has a bad line is a start-up error ("FILE:LINE: why").
    func blocklist() throws(UsageError) -> Blocklist {
        var blocklist = defaultBlocklist ? Blocklist.standard : Blocklist()
        for file in blocklistFiles {
            let text: String
            do {
                text = String(decoding: try Data(contentsOf: URL(fileURLWithPath: file)), as: UTF8.self)
            } catch {
                // Foundation keeps the system's reason beneath its own error.
                let reason = ((error as? CocoaError)?.userInfo["NSUnderlyingError"] as? POSIXError)
                    .map { String(cString: strerror($0.code.rawValue)) } ?? "\(error)"
                throw UsageError("cannot read the blocklist \(file): \(reason)")
            }
            do {
                blocklist.add(try Blocklist(parsing: text, source: file))
            } catch {
                throw UsageError("\(error)")
            }
        }
        return blocklist
    }
}
