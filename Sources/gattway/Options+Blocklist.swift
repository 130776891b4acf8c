import BLE
import Glibc
import Launch

extension Options {
    /// The GATT blocklist in force: the default list unless left out, and each `--blocklist` file.
    /// A file that cannot be read or has a bad line is a start-up error ("FILE:LINE: why").
    func blocklist() throws(UsageError) -> Blocklist {
        var blocklist = defaultBlocklist ? Blocklist.standard : Blocklist()
        for file in blocklistFiles {
            guard let text = readFile(file) else {
                throw UsageError("cannot read the blocklist \(file): \(String(cString: strerror(errno)))")
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
