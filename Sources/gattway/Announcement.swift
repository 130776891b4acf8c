import Access
import Avahi
import DBus
import ESPHomeProxy
import Glibc
import Launch

/// `--esphome-api` beyond loopback: the proxy announced on the local network as an ESPHome node
/// (`_esphomelib._tcp` with its TXT records) through avahi-daemon on the system bus, so that
/// Home Assistant finds it by itself; announced again when the adapter's address (the MAC it
/// says) changes. An API served on loopback only is not announced: nothing on the network could
/// reach it.
func announce(_ proxy: ESPHomeProxy, options: Options) async -> ServiceAnnouncer? {
    guard !Exposure.isLoopback(options.esphomeHost) else {
        log("mdns: the ESPHome API listens on \(options.esphomeHost) only: not announced")
        return nil
    }
    let network = networkKind()
    @Sendable func service() async -> ServiceAnnouncer.Service {
        let a = await proxy.announcement(network: network)
        return ServiceAnnouncer.Service(name: a.name, type: a.type, port: a.port, txt: a.txt)
    }
    let announcer = ServiceAnnouncer(busAddress: Connection.systemBusAddress, service: await service(), log: { log("mdns: \($0)") })
    proxy.onAdapterChange { Task { announcer.update(await service()) } }
    await announcer.start()
    return announcer
}

/// "wifi" when the interface of the default route is a wireless one (it has
/// /sys/class/net/<interface>/wireless), else "ethernet": ESPHome's `network` TXT record.
func networkKind() -> String {
    guard let fd = fopen("/proc/net/route", "r") else { return "ethernet" }
    defer { fclose(fd) }
    var line = [CChar](repeating: 0, count: 512)
    while fgets(&line, Int32(line.count), fd) != nil {
        let text = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let fields = text.split(whereSeparator: { $0 == " " || $0 == "\t" })
        // Iface Destination Gateway ...: the default route's destination is 00000000.
        guard fields.count > 1, fields[1] == "00000000" else { continue }
        return access("/sys/class/net/\(fields[0])/wireless", F_OK) == 0 ? "wifi" : "ethernet"
    }
    return "ethernet"
}
