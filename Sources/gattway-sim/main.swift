// gattway-sim: a BlueZ 5.66 stand-in on D-Bus, with virtual peripherals and fault injection.
import DBus
import Dispatch
import FoundationEssentials
import Glibc
import Simulator
import Synchronization
import Threading

let usage = """
    usage: gattway-sim [--bus ADDRESS] [--config FILE] [--adapters N] [--management-socket PATH]
                       [--print-config] [--help]

    Serves org.bluez (the BlueZ 5.66 D-Bus API: ObjectManager, Adapter1 hci0 (and more),
    Device1, GattService1/GattCharacteristic1/GattDescriptor1, AgentManager1, ProfileManager1,
    and the peripheral role's GattManager1 and LEAdvertisingManager1, an adapter's
    advertisements and applications reached from the other adapters) on a D-Bus bus, with
    simulated BLE peripherals. BlueZ clients such as bleak or gattway talk to it as to bluetoothd.

    Options:
      --bus ADDRESS   serve on this bus (e.g. unix:path=/run/dbus/system_bus_socket). Without
                      it, a private dbus-daemon is started, stopped on exit and killed by the
                      kernel if gattway-sim is (SIGKILL, a crash); the next start removes the
                      /tmp/gattway-bus-* directory such a stop leaves.
      --config FILE   peripherals from a JSON file instead of the built-in set.
      --adapters N    N adapters, hci0 to hci<N-1> (1 to 16): those the configuration has, then
                      copies of its first with addresses counted up; each hears every device
                      whose "rssi" does not name adapters.
      --management-socket PATH
                      also serve the kernel's Bluetooth management events for the adapters, as
                      a trusted reader of the kernel's management socket gets them beside
                      bluetoothd: a Unix SOCK_SEQPACKET socket at PATH (a socket file already
                      there is removed; the file is removed on exit), any number of clients, each
                      sent every frame from its connection on, one frame per packet (the 6-byte
                      header and the parameters, as the kernel frames them; controller index N for
                      hciN): Device Found for every advertisement an adapter receives while
                      discovering, which the kernel's discovery filter (RSSI, UUIDs) keeps, before
                      bluetoothd's own checks; Device Connected and Device Disconnected as links
                      come and go. A client that does not read loses the frames its socket buffer
                      cannot hold (counted; the totals are logged on exit).
      --print-config  print the configuration (the built-in one, or FILE's with its defaults
                      filled in) as JSON and exit: a starting point for a file of your own.
      --help          this text.

    Output: the first line of stdout is DBUS_SYSTEM_BUS_ADDRESS=<address>, printed once
    org.bluez is owned and every object is exported; clients set that variable. Log lines
    follow. SIGINT or SIGTERM stops the simulator (and the private bus).

    Built-in peripherals:
      F0:00:00:00:00:01 "Sim Heart Rate"  180D (2A37 notify 1 s, 2A38 read, 2A39 write 01),
                                          180F (2A19 read/notify, 100 down 1 per 5 s), 180A
      F0:00:00:00:00:02 "Sim Serial"      FFE0/FFE1 read/write/write-without-response/notify,
                                          echoes writes, MTU 185; two 180A services
      F0:00:00:00:00:03 "Sim Secure"      12345678-1234-5678-1234-56789abc0001 encrypt-read,
                                          ...0002 encrypt-authenticated-read (ATT 0x0e, link drops)
      F0:00:00:00:00:04 (no name)         non-connectable iBeacon
      F0:00:00:00:00:05 "Sim Eddystone"   non-connectable Eddystone-URL beacon
    Built-in sensors (temperature, humidity, battery drifting at each measurement; the
    packet counter +1):
      F0:00:00:00:00:06 "Sim BTHome"      BTHome v2 (FCD2), also pressure, voltage; every 2 s;
                                          non-connectable
      F0:00:00:00:00:07 "Sim BTHome Enc"  the same, encrypted, every 3 s, with the demo bind key
                                          676174747761792064656d6f206b6579 ("gattway demo key"):
                                          gattway --sensor-keys FILE with the line
                                          F0:00:00:00:00:07 676174747761792064656d6f206b6579
      F0:00:00:00:00:08 "Sim ATC1441"     atc1441 firmware (181A, 13 bytes), every 2.5 s
      F0:00:00:00:00:09 "Sim PVVX"        pvvx firmware (181A, 15 bytes), every 2.5 s
      F0:00:00:00:00:0A "Sim MiBeacon"    Xiaomi MiBeacon (FE95), unencrypted, every 3 s
      F0:00:00:00:00:0B "Sim Ruuvi"       RuuviTag RAWv2 (0x0499), also pressure, acceleration;
                                          every 2 s; non-connectable, random address
      F0:00:00:00:00:0C "Sim MiBeacon Enc" Xiaomi MiBeacon v5 (FE95), encrypted with the demo
                                          bind key, temperature and humidity, every 3 s
      F0:00:00:00:00:0D "Sim TLM"         Eddystone-TLM (FEAA): battery voltage, temperature,
                                          advertisements sent, uptime; every 2 s; non-connectable
      F0:00:00:00:00:0E "Sim Lock"        pairs as KeyboardDisplay, passkey 123456;
                                          12345678-1234-5678-1234-56789abc0011 "locked"
                                          (encrypt-authenticated read/write: after an
                                          authenticated Pair; Just Works gets ATT 0x0e)
    Built-in UART modules (advertise their service; "uart" with echo, MTU 247):
      F0:00:00:00:00:0F "Sim NUS"         Nordic UART 6E400001-B5A3-F393-E0A9-E50E24DCCA9E:
                                          RX 6E400002-... write/write-without-response,
                                          TX 6E400003-... notify
      F0:00:00:00:00:10 "Sim MCHP"        Microchip transparent UART 49535343-FE7D-...:
                                          TX 49535343-1E4D-... notify,
                                          RX 49535343-8841-... write/write-without-response
      F0:00:00:00:00:11 "Sim HM-10"       FFE0/FFE1 read/write/write-without-response/notify

    Configuration file (JSON; only "address" and "uuid" are required, unknown keys are errors):
      { "adapters": [ { "id": "hci0", "address": "00:1A:7D:DA:71:13", "name": "gattway-sim",
                     "powered": true, "maxConnections": 7, "temporaryTimeoutSec": 30,
                     "disconnectDelayMs": 100, "connectTimeoutMs": 20000, "pairingTimeoutMs": 30000,
                     "attTimeoutMs": 30000, "experimental": false }, { "id": "hci1" } ],
        "devices": [ { "address": "F0:00:00:00:00:10", "name": "Thermo", "rssi": -60,
            "rssiJitter": 3, "txPower": 0, "connectable": true, "advertisingIntervalMs": 1000,
            "advertisingFlags": "06", "uuids": ["181A"], "manufacturerData": {"0xFFFF": "0102"},
            "advertisingCounter": false, "serviceData": {"181A": "00"}, "mtu": 247,
            "connectDelayMs": 30, "addressRotationMs": 900000,
            "pairing": { "io": "DisplayOnly", "passkey": 123456, "entersWrong": false },
            "sensor": { "format": "bthome", "intervalMs": 2000, "bindKey": "<32 hex digits>" },
            "uart": { "rx": "2A6E", "tx": "2A6E", "echo": true, "bufferBytes": 4096,
                      "drainBytesPerSecond": 20000, "streamBytesPerSecond": 0 },
            "services": [ { "uuid": "181A", "primary": true, "handle": 10, "characteristics": [
              { "uuid": "2A6E", "flags": ["read", "notify"], "value": "e803",
                "generator": "counter", "notifyIntervalMs": 1000, "echo": false,
                "accept": ["01"], "rejectCode": "0x80",
                "descriptors": [ { "uuid": "2901", "text": "Temperature", "flags": ["read"] } ] } ] } ],
            "faults": { ... } } ] }
      adapters: "adapter": {...} is one adapter, hci0; in "adapters" each id (hci<n>) and address
        defaults by position (00:1A:7D:DA:71:13 counted up). maxConnections (1 to 64): LE links
        the controller holds; one more Connect fails at once with org.bluez.Error.Failed
        "le-connection-concurrent-connection-limit". Each adapter has its own Device1 for a
        device (/org/bluez/hciN/dev_...), with its own RSSI, link, bond and GATT objects.
      rssi: a number (every adapter), or per adapter {"hci0": -50, "hci1": -80}: an adapter
        not named is out of range (hears nothing, connects to nothing). A connected device
        stops advertising: the other adapters no longer hear it, and their Connect finds
        nobody (le-connection-abort-by-local after connectTimeoutMs).
      UUIDs: "180D", "0x180D", 32-bit or 128-bit. Values: "value" in hex or "text" in UTF-8.
      flags: BlueZ's strings (read, write, write-without-response, notify, indicate,
        encrypt-read, encrypt-authenticated-read, ..., reliable-write, authorize).
      generator: heartRate ([06 bpm], 1 s) | batteryDrain (1 byte, -1 per 5 s) | counter (LE, +1 per 1 s);
    notifyIntervalMs from 1 (benchmarks) to 3600000.
      A CCCD (2902) is added to notify/indicate characteristics; handles follow from 0x000a.
      addressRotationMs (100 to 86400000; default none): a new random static address that
        often, as phones and trackers change theirs: bluetoothd hears a new device, the old
        address goes after TemporaryTimeout (each address a device of the simulator's own).
      sensor: advertises readings that change: format bthome | atc1441 | pvvx | mibeacon |
        ruuvi-rawv2 | eddystone-tlm (its service data or manufacturer data entry, which the
        device's own "serviceData"/"manufacturerData" must then not have); a new measurement
        every intervalMs (100 to 3600000, default 2000), sent with the next advertisements;
        bindKey (bthome and mibeacon, 16 bytes): every payload AES-CCM encrypted with it
        (a mibeacon then as MiBeacon v5 without its MAC).
      pairing: the device's IO capability (DisplayOnly | DisplayYesNo | KeyboardOnly |
        NoInputNoOutput, the default: Just Works | KeyboardDisplay), the passkey it displays
        (0-999999, else random each time), entersWrong: it mistypes the central's passkey.
        With the agent's capability it gives the method (RequestPasskey, DisplayPasskey,
        RequestConfirmation or none); agent errors, wrong passkeys: AuthenticationFailed;
        no answer within pairingTimeoutMs: the link drops, Cancel(), AuthenticationCanceled.
      uart: a serial port behind rx (written) and tx (notifies; may be rx): writes fill a
        bufferBytes receive buffer (1 to 1048576) drained at drainBytesPerSecond in 10 ms
        steps; a write without response loses what does not fit, a write with response is
        answered once all of it is in (past attTimeoutMs the link drops); with echo what drains
        is notified on tx in pieces of MTU-3 bytes while tx is subscribed; streamBytesPerSecond
        sends lines "uart 000123 abcdefghijklmnopqrstuvwxyz\\n" on tx while subscribed.

    Faults (per device "faults", or at run time with SetFault; every key optional):
      { "connectError": { "name": "org.bluez.Error.Failed",
                          "message": "le-connection-abort-by-remote", "count": 2 },
        "connectDelayMs": 3000, "responseDelayMs": 500, "suppressConnectedSignal": true,
        "servicesResolvedEarly": true, "outOfRange": true, "dropLinkAfterMs": 2000,
        "staleLink": true (in the kernel of the adapter that holds the link, every adapter
                           if none does; Connect there fails until that adapter powers off),
        "servicesResolvedAfterPairingMs": 300 (a pairing that ends with the link up leaves
                           ServicesResolved false until 300 ms after the Pair reply),
        "dropLinkAfterPairing": true (the link goes down right after the Pair reply),
        "keptSessionsLost": true (notification sessions kept across a link loss are lost,
                           Notifying staying true, when the link comes up again),
        "attErrors": [ { "uuid": "2A19", "operation": "read", "code": "0x0e" },
                       { "handle": 13, "operation": "any", "code": 3 } ] }

    Control interface io.gattway.Simulator1 at /io/gattway/simulator (bus name org.bluez):
      SetFault(s address, s faultJSON)   replace a device's faults
      ClearFaults(s address)             "" clears every device
      DropLink(s address)                lose the link (ServicesResolved=false, Connected=false)
      CallCount(s member, s path) -> u   method calls seen ("" matches any)
      ResetCounters()
      SetValue(s address, s uuid, ay value, b notify)   set a characteristic on the peripheral
      SetServiceData(s address, s uuid, ay data)        advertise this service data from now on
      SetServices(s address, s servicesJSON, b serviceChanged)   a firmware update: new services;
                                         bluetoothd's objects (its cache) follow at once with
                                         Service Changed while connected, at the next connection
                                         for a bonded device or another Database Hash, else only
                                         after RemoveDevice (stale: gone handles answer ATT 0x01)
      SetPairing(s address, s pairingJSON)   replace a device's "pairing"
      DisplayedPasskey(s address) -> u   the passkey the device displays while pairing
      SetUART(s address, s uartJSON)     replace a device's "uart" ("" removes it)
      UARTStats(s address) -> tttt       bytes received, dropped, echoed, streamed
      ResetUARTStats(s address)
      Restart(u downMs)                  bluetoothd exits (org.bluez released, links and sessions
                                         gone, unpaired devices forgotten) and is back downMs later
      SetPowered(b on)                   power hci0 off or on (its links and discovery end)
      SetAdapterPowered(s adapter, b on) the same for any adapter, e.g. "hci1"
      RemoveAdapter(s adapter)           the dongle is pulled: InterfacesRemoved of its GATT
                                         objects, devices and the adapter (links lost, pending
                                         calls fail, no property signals)
      AddAdapter(s adapter)              plugged in again: InterfacesAdded of the adapter, powered
                                         off, with its bonded devices only; Powered=true follows
      SetRSSI(s address, s adapter, n rssi)  how loud the adapter hears the device (-127 to 20;
                                         127: out of its range, a link there is lost)
      EndDiscovery()                     discovery ends by itself on every adapter, as after a reset
      e.g. busctl --address=$DBUS_SYSTEM_BUS_ADDRESS call org.bluez /io/gattway/simulator \\
             io.gattway.Simulator1 DropLink s F0:00:00:00:00:01

    Not simulated: AcquireNotify/AcquireWrite (NotSupported; StartNotify works), BR/EDR,
    advertising and GATT server roles, incoming pairing and authorization requests, the MITM
    pairing bluetoothd starts by itself for an authenticated attribute.
    """

/// One line to stdout, flushed at once (the first line is read by scripts).
@Sendable func emit(_ line: String) {
    print(line)
    fflush(nil)
}

func fatal(_ message: String, code: Int32 = 1) -> Never {
    FileHandleOutput.standardError("gattway-sim: \(message)\n")
    exit(code)
}

enum FileHandleOutput {
    static func standardError(_ text: String) {
        var bytes = Array(text.utf8)
        _ = write(2, &bytes, bytes.count)
    }
}

var busAddress: String?
var configPath: String?
var adapterCount: Int?
var managementSocket: String?
var printConfig = false
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    switch argument {
    case "--help", "-h":
        emit(usage)
        exit(0)
    case "--bus":
        guard let value = arguments.popFirst() else { fatal("--bus needs an address", code: 2) }
        busAddress = value
    case "--config":
        guard let value = arguments.popFirst() else { fatal("--config needs a file", code: 2) }
        configPath = value
    case "--adapters":
        guard let value = arguments.popFirst(), let n = Int(value), (1...16).contains(n) else {
            fatal("--adapters needs a number from 1 to 16", code: 2)
        }
        adapterCount = n
    case "--management-socket":
        guard let value = arguments.popFirst() else { fatal("--management-socket needs a path", code: 2) }
        managementSocket = value
    case "--print-config":
        printConfig = true
    default:
        fatal("unknown argument \"\(argument)\" (see --help)", code: 2)
    }
}

let configuration: SimulatorConfiguration
do {
    let loaded = try configPath.map(SimulatorConfiguration.load(path:)) ?? .builtIn
    configuration = adapterCount.map(loaded.withAdapters) ?? loaded
    try configuration.validate()
} catch {
    fatal("\(error)")
}
if printConfig {
    do {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        emit(String(decoding: try encoder.encode(configuration), as: UTF8.self))
        exit(0)
    } catch {
        fatal("cannot encode the configuration: \(error)")
    }
}

/// Why the program ends: a signal, or the bus went away.
/// The waiting main task, or the reason that came before it waited (a signal during start-up).
let finished = Mutex<(continuation: CheckedContinuation<String, Never>?, early: String?)>((nil, nil))
@Sendable func finish(_ reason: String) {
    finished.withLock { f in
        if let c = f.continuation {
            c.resume(returning: reason)
            f.continuation = nil
        } else if f.early == nil {
            f.early = reason
        }
    }
}

@Sendable func finishOnSignal(_ number: Int32) { finish(number == SIGINT ? "SIGINT" : "SIGTERM") }
// Before any thread starts (the bus's, the connection's, the simulator's) and before anything is
// made that a stop must undo: a SIGTERM from here on, even during the start, stops it cleanly.
let signals = SignalWatch([SIGINT, SIGTERM], handler: finishOnSignal)

let privateBus: PrivateBus?
let address: String
if let busAddress {
    privateBus = nil
    address = busAddress
} else {
    do { privateBus = try PrivateBus() } catch { fatal("cannot start dbus-daemon: \(error)") }
    address = privateBus!.address
}

let connection: Connection
do { connection = try Connection(address: address) } catch {
    privateBus?.stop()
    fatal("cannot connect to \(address): \(error)")
}

/// Log lines wait until the address line is out: it must be the first line.
let logLines = Mutex<(ready: Bool, held: [String])>((false, []))
@Sendable func log(_ line: String) {
    let now = logLines.withLock { state -> Bool in
        if !state.ready { state.held.append(line) }
        return state.ready
    }
    if now { emit("sim: " + line) }
}
@Sendable func ready(_ first: String) {
    logLines.withLock { state in
        emit(first)
        state.held.forEach { emit("sim: " + $0) }
        state = (true, [])
    }
}

let simulator = Simulator(connection: connection, configuration: configuration, log: log)
if let managementSocket {
    do {
        try simulator.serveManagementSocket(at: managementSocket)
    } catch {
        connection.close()
        privateBus?.stop()
        fatal("--management-socket: \(error)")
    }
}

connection.setDisconnectHandler { finish("the bus connection was lost") }

let reason = await withCheckedContinuation { (continuation: CheckedContinuation<String, Never>) in
    let early = finished.withLock { f -> String? in
        if f.early == nil { f.continuation = continuation }
        return f.early
    }
    if let early { return continuation.resume(returning: early) }
    Task {
        do {
            try await simulator.start()
            ready("DBUS_SYSTEM_BUS_ADDRESS=\(address)")
        } catch {
            finish("cannot serve org.bluez: \(error)")
        }
    }
}

log("stopping (\(reason))")
if managementSocket != nil {
    let counters = simulator.managementStreamCounters
    log("management socket: \(counters.frames) frames, \(counters.connected) clients, \(counters.dropped) frames dropped for clients that did not keep up")
}
if !reason.hasPrefix("SIG") { FileHandleOutput.standardError("gattway-sim: \(reason)\n") }
simulator.stop()
// Each bounded (a stop never hangs): what did not end in time is said and left.
if !connection.close() { log("the bus connection's thread had not ended 5 s after close; left") }
if let privateBus, !privateBus.stop() { log("the private dbus-daemon had not ended 5 s after its SIGKILL; left (\(privateBus.directory))") }
signals.cancel()
exit(reason.hasPrefix("SIG") ? 0 : 1)
